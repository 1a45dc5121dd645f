# syntax=docker/dockerfile:1
# One image for every jobsvc process. The default command runs the API; the workers and
# the one-shot setup override it (see docker-compose.yml):
#
#   docker build -t jobsvc .
#   docker run ... jobsvc                                   # API (gunicorn) on :8000
#   docker run ... jobsvc python manage.py run_scheduler    # a scheduler worker
#   docker run ... jobsvc python manage.py run_executor     # an executor worker
#   docker run ... jobsvc sh -c 'python manage.py migrate_all && python manage.py ensure_topics'
#
# Configuration is the JOBSVC_* environment (docs/configuration.md); nothing secret is
# baked in.

# A patch release on a fixed Debian release; bump it on purpose (and for security fixes).
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

# ---- build: the locked runtime requirements in a virtualenv ------------------------------
FROM ${PYTHON_IMAGE} AS build

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1

RUN python -m venv /opt/venv
COPY requirements/runtime.txt /tmp/requirements/runtime.txt
# Every package, transitive ones included, at the version and with the hashes the lock
# names, so the image builds the same twice. Binary wheels only: every locked requirement
# ships one, so no compiler is needed, and a release without a wheel fails the build
# instead of silently compiling.
RUN /opt/venv/bin/pip install --require-hashes --only-binary=:all: \
      -r /tmp/requirements/runtime.txt

# ---- runtime -----------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}

ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    DJANGO_SETTINGS_MODULE=jobsvc.settings \
    JOBSVC_API_BIND=0.0.0.0:8000

# An unprivileged user with a fixed uid; the code stays owned by root, so the processes
# cannot change it.
RUN groupadd --system --gid 10001 jobsvc \
 && useradd --system --uid 10001 --gid jobsvc --home-dir /app --no-create-home \
      --shell /usr/sbin/nologin jobsvc

COPY --from=build /opt/venv /opt/venv

WORKDIR /app
COPY manage.py ./
COPY coordination/ coordination/
COPY jobsvc/ jobsvc/
COPY scheduler_worker/ scheduler_worker/
COPY executor_worker/ executor_worker/
COPY deploy/gunicorn.conf.py deploy/gunicorn.conf.py
# Bytecode compiled at build time: the user cannot write it at run time.
RUN python -m compileall -q /app

USER 10001:10001

# 8000: the API (JOBSVC_API_BIND); 9100: the metrics port docker-compose.yml gives workers.
EXPOSE 8000 9100

CMD ["gunicorn", "--config", "deploy/gunicorn.conf.py", "jobsvc.wsgi:application"]
