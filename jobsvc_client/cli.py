"""``jobsvc`` (or ``python -m jobsvc_client``): the command line on the client.

    jobsvc --url http://127.0.0.1:8000 login --username alice
    jobsvc jobs create --at +10s --message "Hello world"
    jobsvc jobs list --status failed
    jobsvc jobs wait ID

``login`` saves the API address and token in a file readable only by its owner
(``$JOBSVC_TOKEN_FILE``, default ``~/.config/jobsvc/token.json``); every later command
uses it and saves the token again when the client refreshes it. Exit status: 0 on
success, 1 when the API refuses or a waited-for job did not succeed, 2 on bad usage.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import re
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from itertools import islice
from pathlib import Path

from jobsvc_client import __version__
from jobsvc_client.client import Client
from jobsvc_client.errors import JobsvcError
from jobsvc_client.models import Job, Token, parse_time
from jobsvc_client.token_file import Session, default_path, session_load, session_save

DEFAULT_URL = "http://127.0.0.1:8000"
_RELATIVE = re.compile(r"\+(\d+(?:\.\d+)?)([smhd])")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class UsageError(Exception):
    """The command line is wrong in a way argparse cannot tell."""


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return args.run(args)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (JobsvcError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jobsvc", description="The jobsvc REST API from the command line."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--url", help=f"API address (default: the saved one, else {DEFAULT_URL})")
    parser.add_argument(
        "--token-file",
        type=Path,
        help="saved session (default: $JOBSVC_TOKEN_FILE, else ~/.config/jobsvc/token.json)",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    signup = commands.add_parser("signup", help="create a user")
    signup.add_argument("--username", required=True)
    signup.add_argument("--job-weight", type=float)
    _password_arguments(signup)
    signup.set_defaults(run=_signup)

    login = commands.add_parser("login", help="log in and save the token")
    login.add_argument("--username", required=True)
    _password_arguments(login)
    login.set_defaults(run=_login)

    jobs = commands.add_parser("jobs", help="create, read, cancel and wait for jobs")
    actions = jobs.add_subparsers(dest="action", required=True)

    create = actions.add_parser("create", help="schedule a job; prints it as JSON")
    create.add_argument("--at", required=True, help="ISO 8601 with a zone, or +30s/+5m/+2h/+1d")
    create.add_argument("--message", required=True)
    create.add_argument("--handler")
    create.add_argument("--params", type=json.loads, help="handler_params as a JSON object")
    create.add_argument("--max-attempts", type=int)
    create.add_argument("--timeout", type=float, help="seconds per attempt")
    create.add_argument("--idempotency-key", help="default: a new random key")
    create.set_defaults(run=_create)

    listing = actions.add_parser("list", help="the caller's jobs, newest first")
    listing.add_argument("--status", action="append", default=[], help="e.g. failed (repeatable)")
    listing.add_argument("--limit", type=int, help="at most this many jobs")
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    listing.set_defaults(run=_list)

    for name, run, text in (
        ("get", _get, "one job as JSON"),
        ("cancel", _cancel, "cancel a job that has not started"),
    ):
        action = actions.add_parser(name, help=text)
        action.add_argument("job_id")
        action.set_defaults(run=run)

    wait = actions.add_parser("wait", help="wait until a job finishes; exit 0 if it succeeded")
    wait.add_argument("job_id")
    wait.add_argument("--timeout", type=float, default=300.0, help="seconds (default 300)")
    wait.set_defaults(run=_wait)
    return parser


def _password_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--password-stdin",
        action="store_true",
        help="read the password from stdin (else $JOBSVC_PASSWORD, else a prompt)",
    )


def _password(args: argparse.Namespace) -> str:
    if args.password_stdin:
        return sys.stdin.readline().rstrip("\n")
    return os.environ.get("JOBSVC_PASSWORD") or getpass.getpass()


def _token_path(args: argparse.Namespace) -> Path:
    return args.token_file or default_path()


def _client(args: argparse.Namespace, *, logged_in: bool = True) -> Client:
    path = _token_path(args)
    session = session_load(path)
    if logged_in and session is None:
        raise UsageError(f"not logged in (no {path}); run: jobsvc login")
    url = args.url or (session.url if session else DEFAULT_URL)

    def save(token: Token) -> None:
        session_save(path, Session(url, token))

    token = session.token if session and (args.url in (None, session.url)) else None
    return Client(url, token=token, on_token=save)


def _signup(args: argparse.Namespace) -> int:
    user = _client(args, logged_in=False).sign_up(
        username=args.username, password=_password(args), job_weight=args.job_weight
    )
    print(json.dumps(user))
    return 0


def _login(args: argparse.Namespace) -> int:
    token = _client(args, logged_in=False).login(username=args.username, password=_password(args))
    print(f"logged in; token saved in {_token_path(args)}, valid until {token.expire.isoformat()}")
    return 0


def _create(args: argparse.Namespace) -> int:
    job = _client(args).create_job(
        message=args.message,
        execute_at=_when(args.at),
        handler=args.handler,
        handler_params=args.params,
        max_attempts=args.max_attempts,
        timeout_seconds=args.timeout,
        idempotency_key=args.idempotency_key,
    )
    print(json.dumps(job.to_json()))
    return 0


def _list(args: argparse.Namespace) -> int:
    statuses = [part for value in args.status for part in value.split(",") if part]
    jobs = islice(_client(args).iter_jobs(status=statuses), args.limit)
    for job in jobs:
        if args.json:
            print(json.dumps(job.to_json()))
        else:
            print(_line(job))
    return 0


def _get(args: argparse.Namespace) -> int:
    print(json.dumps(_client(args).get_job(args.job_id).to_json()))
    return 0


def _cancel(args: argparse.Namespace) -> int:
    print(json.dumps(_client(args).cancel_job(args.job_id).to_json()))
    return 0


def _wait(args: argparse.Namespace) -> int:
    job = _client(args).wait(args.job_id, timeout=args.timeout)
    print(json.dumps(job.to_json()))
    return 0 if job.status == "succeeded" else 1


def _when(text: str) -> datetime:
    if match := _RELATIVE.fullmatch(text.strip()):
        seconds = float(match[1]) * _UNIT_SECONDS[match[2]]
        return datetime.now(UTC) + timedelta(seconds=seconds)
    try:
        when = parse_time(text)
    except ValueError:
        raise UsageError(f"--at {text!r}: not ISO 8601 nor +N[smhd]") from None
    if when is None or when.tzinfo is None:
        raise UsageError(f"--at {text!r}: needs a time zone, e.g. 2030-01-01T12:00:00Z")
    return when


def _line(job: Job) -> str:
    message = job.message if len(job.message) <= 40 else job.message[:39] + "…"
    return "\t".join(
        (job.id, job.status, job.execute_at.isoformat(), str(job.attempts), json.dumps(message))
    )
