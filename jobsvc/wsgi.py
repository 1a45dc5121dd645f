"""WSGI entry point of the API (served by gunicorn, see deploy/gunicorn.conf.py).

Imported in each gunicorn worker (the app is not preloaded), which then tunes its garbage
collector (jobsvc.gc_tuning) as the workers do."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "jobsvc.settings")
application = get_wsgi_application()

from django.conf import settings  # noqa: E402  (configured by get_wsgi_application)

from jobsvc.gc_tuning import tune_garbage_collector  # noqa: E402

tune_garbage_collector(settings.GC_YOUNG_THRESHOLD)
