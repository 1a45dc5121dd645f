"""Errors of the load generator; the management command turns them into CommandError."""

from __future__ import annotations


class LoadgenError(Exception):
    """The load generator cannot start or go on."""


class ApiUnreachable(LoadgenError):
    """The API's base URL does not answer."""


class LoginFailed(LoadgenError):
    """A run's user could not get a token (neither through the API nor in process)."""


class ObservationFailed(LoadgenError):
    """A shard could not be read this second; the next observation tries again."""
