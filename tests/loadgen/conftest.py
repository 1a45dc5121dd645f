"""The API served by gunicorn, and the end-to-end fixtures (workers on this test's topics)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.conftest import messaging, start_worker
from tests.served_api import serving_api

__all__ = ["messaging", "served_api", "start_worker"]


@pytest.fixture
def served_api() -> Iterator[str]:
    """The API as `make run` serves it (gunicorn, production config), on a free port."""
    with serving_api() as base:
        yield base
