"""The API served by gunicorn, and the end-to-end fixtures (workers on this test's topics)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

import pytest

from deploy.bench.processes import REPO
from deploy.localstack.ports import free_port
from tests.e2e.conftest import messaging, start_worker

__all__ = ["messaging", "served_api", "start_worker"]

API_START_TIMEOUT = 30.0  # seconds until gunicorn answers /healthz


@pytest.fixture
def served_api() -> Iterator[str]:
    """The API as `make run` serves it (gunicorn, production config), on a free port."""
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "-c",
            str(REPO / "deploy" / "gunicorn.conf.py"),
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "2",
            "jobsvc.wsgi:application",
        ],
        cwd=REPO,
        env=os.environ.copy(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + API_START_TIMEOUT
    while True:
        try:
            with urllib.request.urlopen(f"{base}/healthz", timeout=1):
                break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail("gunicorn did not serve /healthz")
            time.sleep(0.1)  # polling a starting server, bounded by the deadline above
    yield base
    process.terminate()
    process.wait(timeout=30)
