"""A typed client and CLI for the jobsvc REST API. Standard library only; no Django.

from jobsvc_client import Client
client = Client("http://127.0.0.1:8000")
client.login(username="alice", password="...")
job = client.create_job(message="Hello world", execute_at=when)
client.wait(job.id)

Installed on its own (``pip install ./jobsvc_client``, the ``jobsvc-client``
distribution), it brings the ``jobsvc`` command.
"""

from jobsvc_client.client import AttemptPage, Client, JobFilter, Page
from jobsvc_client.errors import (
    ApiError,
    AuthError,
    Conflict,
    Forbidden,
    JobsvcError,
    NotFound,
    NotLoggedIn,
    TransportError,
    Unavailable,
    Unprocessable,
    WaitTimeout,
)
from jobsvc_client.models import TERMINAL_STATUSES, Account, Attempt, Job, JobSpec, Token

# Released with the service: the same as jobsvc.__version__ (a unit test holds them equal).
__version__ = "0.2.0"

__all__ = [
    "TERMINAL_STATUSES",
    "Account",
    "ApiError",
    "Attempt",
    "AttemptPage",
    "AuthError",
    "Client",
    "Conflict",
    "Forbidden",
    "Job",
    "JobFilter",
    "JobSpec",
    "JobsvcError",
    "NotFound",
    "NotLoggedIn",
    "Page",
    "Token",
    "TransportError",
    "Unavailable",
    "Unprocessable",
    "WaitTimeout",
]
