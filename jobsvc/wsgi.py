"""WSGI entry point of the API (served by gunicorn, see deploy/gunicorn.conf.py).

Imported in each gunicorn worker (the app is not preloaded), which then tunes its garbage
collector (jobsvc.gc_tuning) as the workers do. The job handlers are built here, before
the first request: a bad handler configuration (HandlerConfigError) stops the worker's
boot, and so gunicorn, instead of failing every create that names a handler."""

import os

from django.conf import settings
from django.core.wsgi import get_wsgi_application

from jobsvc.gc_tuning import tune_garbage_collector

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "jobsvc.settings")
application = get_wsgi_application()

from jobsvc.handlers.setup import validation_registry  # noqa: E402 (needs the apps loaded)

validation_registry()
tune_garbage_collector(settings.GC_YOUNG_THRESHOLD)  # after start-up's objects exist
