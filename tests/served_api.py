"""The API as `make run` serves it: gunicorn with the production config, on a free port."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tools.bench.processes import REPO, stopped_with_parent
from tools.devstack.ports import free_port

API_START_TIMEOUT = 30.0  # seconds until gunicorn answers /healthz
UNTHROTTLED = {
    "JOBSVC_LOGIN_THROTTLE_RATE": "100000/s",
    "JOBSVC_LOGIN_ACCOUNT_THROTTLE_RATE": "100000/s",
    "JOBSVC_SIGNUP_THROTTLE_RATE": "100000/s",
}


@contextmanager
def serving_api(
    *, workers: int = 2, threads: int | None = None, env: dict[str, str] | None = None
) -> Iterator[str]:
    """Serve the API with gunicorn (the production config) for the block; yields its URL.

    ``env`` adds to (or overrides) this process's environment, e.g. a setting under test.
    The log-in and sign-up throttles are shared by every test that logs in from this host
    (they live in the database), so they are set out of reach unless ``env`` sets them.
    """
    port = free_port()
    thread_args = [] if threads is None else ["--threads", str(threads)]
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            stopped_with_parent(
                [
                    sys.executable,
                    "-m",
                    "gunicorn",
                    "-c",
                    str(REPO / "deploy" / "gunicorn.conf.py"),
                    "--bind",
                    f"127.0.0.1:{port}",
                    "--workers",
                    str(workers),
                    *thread_args,
                    "jobsvc.wsgi:application",
                ]
            ),
            cwd=REPO,
            env={**os.environ, **UNTHROTTLED, **(env or {})},
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            _wait_for_health(base, process, log)
            yield base
        finally:
            process.terminate()
            process.wait(timeout=30)


def _wait_for_health(base: str, process: subprocess.Popen, log) -> None:
    deadline = time.monotonic() + API_START_TIMEOUT
    while True:
        try:
            with urllib.request.urlopen(f"{base}/healthz", timeout=1):
                return
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                pytest.fail(
                    f"gunicorn did not serve /healthz:\n{log.read().decode(errors='replace')}"
                )
            time.sleep(0.1)  # polling a starting server, bounded by the deadline above
