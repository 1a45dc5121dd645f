"""WSGI entry point of the API (served by gunicorn, see deploy/gunicorn.conf.py)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "jobsvc.settings")
application = get_wsgi_application()
