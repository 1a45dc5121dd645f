"""Errors raised by the coordination package.

    CoordinationError
     └── CoordinationUnavailable

Callers catch `CoordinationError`; kazoo's own exceptions do not leave this package.
"""

from __future__ import annotations


class CoordinationError(Exception):
    """Root of every error the coordination package raises."""


class CoordinationUnavailable(CoordinationError):
    """ZooKeeper could not be reached in time."""
