"""The peers beside jobsvc's benchmarks: PgQueuer and Celery, measured as jobsvc is.

- ``scenario``: the ``peers`` scenario (runs in the product's venv, drives everything);
- ``venv``: the peers' own venv, from ``requirements.txt``;
- ``pgqueuer_peer``, ``celery_peer``: each peer's workers and enqueueing (run in that venv);
- ``records``: the start times the peers' no-op tasks record, and the two measures
  (standard library only: both venvs import it).
"""
