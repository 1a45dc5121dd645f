"""Errors of the local stack launcher.

    LocalStackError
     +-- BinaryNotFound            a server program or system user is not installed
     +-- PortInUse                 a port the user asked for is taken
     +-- StateMismatch             the state dir does not match what was asked
     +-- ServerStartError          a server or app process died or was not ready in time
     +-- ManagementCommandFailed   `manage.py <command>` failed or timed out

The CLI prints any of them as one clear message and exits non-zero.
"""

from __future__ import annotations


class LocalStackError(Exception):
    """The local stack could not be started or run as asked."""


class BinaryNotFound(LocalStackError):
    """A server program or system user is missing; `make bootstrap` installs them."""


class PortInUse(LocalStackError):
    """A port the user asked for is already taken."""


class StateMismatch(LocalStackError):
    """The persisted state dir was created with different settings than asked now."""


class ServerStartError(LocalStackError):
    """A server or app process exited while starting or was not ready by its deadline."""


class ManagementCommandFailed(LocalStackError):
    """A `manage.py` command exited non-zero or ran past its deadline."""
