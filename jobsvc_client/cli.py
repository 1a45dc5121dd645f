"""``jobsvc`` (or ``python -m jobsvc_client``): the command line on the client.

    jobsvc --url http://127.0.0.1:8000 login --username alice
    jobsvc me
    jobsvc jobs create --at +10s --message "Hello world" --priority 5
    jobsvc jobs list --status failed
    jobsvc jobs attempts ID
    jobsvc jobs retry-many --status failed --handler http
    jobsvc jobs wait ID
    jobsvc logout

``login`` saves the API address and token in a file readable only by its owner
(``$JOBSVC_TOKEN_FILE``, default ``~/.config/jobsvc/token.json``); every later command
uses it and saves the token again when the client refreshes it; ``logout`` revokes the
token and deletes the file. Every operation of the API has a command. Exit status: 0 on
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
from jobsvc_client.client import Client, JobFilter
from jobsvc_client.errors import AuthError, JobsvcError
from jobsvc_client.models import Attempt, Job, Token, parse_time
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

    logout = commands.add_parser("logout", help="revoke the saved token and delete it")
    logout.set_defaults(run=_logout)

    me = commands.add_parser("me", help="your account, limits and usage, as JSON")
    me.set_defaults(run=_me)

    secret = commands.add_parser(
        "webhook-secret", help="the secret your webhooks are signed with, as JSON"
    )
    secret.add_argument(
        "--rotate", action="store_true", help="replace it (the old one signs for a while too)"
    )
    secret.set_defaults(run=_webhook_secret)

    password = commands.add_parser("password", help="change your password")
    password.add_argument(
        "--password-stdin",
        action="store_true",
        help="read the current and the new password from stdin, one per line (else "
        "$JOBSVC_PASSWORD and $JOBSVC_NEW_PASSWORD, else prompts)",
    )
    password.set_defaults(run=_password_change)

    jobs = commands.add_parser("jobs", help="create, read, change and wait for jobs")
    actions = jobs.add_subparsers(dest="action", required=True)

    create = actions.add_parser("create", help="schedule a job; prints it as JSON")
    _when_arguments(create, required=True)
    create.add_argument("--message", required=True)
    create.add_argument("--handler")
    create.add_argument("--params", type=json.loads, help="handler_params as a JSON object")
    create.add_argument("--max-attempts", type=int)
    create.add_argument("--timeout", type=float, help="seconds per attempt")
    create.add_argument("--priority", type=int, help="among your own due jobs, higher first")
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

    attempts = actions.add_parser("attempts", help="a job's attempts, newest first")
    attempts.add_argument("job_id")
    attempts.add_argument("--json", action="store_true", help="one JSON object per line")
    attempts.set_defaults(run=_attempts)

    reschedule = actions.add_parser(
        "reschedule", help="move a job not yet dispatched, and/or change its message"
    )
    reschedule.add_argument("job_id")
    _when_arguments(reschedule, required=False)
    reschedule.add_argument("--message")
    reschedule.set_defaults(run=_reschedule)

    retry = actions.add_parser("retry", help="give a failed job new attempts, due now")
    retry.add_argument("job_id")
    _extra_attempts_argument(retry)
    retry.set_defaults(run=_retry)

    for name, run, text in (
        ("cancel-many", _cancel_many, "cancel your matching jobs that have not started"),
        ("retry-many", _retry_many, "retry your matching failed jobs"),
        ("redrive", _redrive, "staff: retry the matching failed jobs of every user"),
    ):
        action = actions.add_parser(name, help=text)
        _filter_arguments(action)
        if name != "cancel-many":
            _extra_attempts_argument(action)
        if name == "redrive":
            action.add_argument("--user-id", type=int, help="only this user's jobs")
        action.set_defaults(run=run)

    wait = actions.add_parser("wait", help="wait until a job finishes; exit 0 if it succeeded")
    wait.add_argument("job_id")
    wait.add_argument("--timeout", type=float, default=300.0, help="seconds (default 300)")
    wait.set_defaults(run=_wait)
    return parser


def _when_arguments(parser: argparse.ArgumentParser, *, required: bool) -> None:
    when = parser.add_mutually_exclusive_group(required=required)
    when.add_argument("--at", help="ISO 8601 with a zone, or +30s/+5m/+2h/+1d")
    when.add_argument(
        "--delay", type=float, help="seconds after the API receives the request, instead"
    )


def _extra_attempts_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--extra-attempts", type=int, help="default: the server's")


def _filter_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--status", action="append", default=[], help="repeatable")
    parser.add_argument("--from", dest="execute_at_from", help="execute_at from (inclusive)")
    parser.add_argument("--to", dest="execute_at_to", help="execute_at before (exclusive)")
    parser.add_argument("--handler")


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


def _logout(args: argparse.Namespace) -> int:
    path = _token_path(args)
    try:
        _client(args).logout()
    except AuthError:
        path.unlink(missing_ok=True)  # a token the API refuses is of no use either
        print(f"the saved token was no longer valid; {path} deleted")
        return 0
    path.unlink(missing_ok=True)
    print(f"logged out; {path} deleted")
    return 0


def _me(args: argparse.Namespace) -> int:
    print(json.dumps(_client(args).me().to_json()))
    return 0


def _webhook_secret(args: argparse.Namespace) -> int:
    client = _client(args)
    secret = client.rotate_webhook_secret() if args.rotate else client.webhook_secret()
    print(json.dumps(secret.to_json()))
    return 0


def _password_change(args: argparse.Namespace) -> int:
    client = _client(args)
    if args.password_stdin:
        current = sys.stdin.readline().rstrip("\n")
        new = sys.stdin.readline().rstrip("\n")
    else:
        current = os.environ.get("JOBSVC_PASSWORD") or getpass.getpass("Current password: ")
        new = os.environ.get("JOBSVC_NEW_PASSWORD") or getpass.getpass("New password: ")
    if not new:
        raise UsageError("the new password is empty")
    client.change_password(current_password=current, new_password=new)
    print("password changed")
    return 0


def _create(args: argparse.Namespace) -> int:
    job = _client(args).create_job(
        message=args.message,
        execute_at=_when(args.at) if args.at is not None else None,
        delay_seconds=args.delay,
        handler=args.handler,
        handler_params=args.params,
        max_attempts=args.max_attempts,
        timeout_seconds=args.timeout,
        priority=args.priority,
        idempotency_key=args.idempotency_key,
    )
    print(json.dumps(job.to_json()))
    return 0


def _reschedule(args: argparse.Namespace) -> int:
    if args.at is None and args.delay is None and args.message is None:
        raise UsageError("give --at, --delay or --message")
    job = _client(args).reschedule_job(
        args.job_id,
        execute_at=_when(args.at) if args.at is not None else None,
        delay_seconds=args.delay,
        message=args.message,
    )
    print(json.dumps(job.to_json()))
    return 0


def _retry(args: argparse.Namespace) -> int:
    job = _client(args).retry_job(args.job_id, extra_attempts=args.extra_attempts)
    print(json.dumps(job.to_json()))
    return 0


def _job_filter(args: argparse.Namespace) -> JobFilter:
    job_filter = JobFilter(
        status=[part for value in args.status for part in value.split(",") if part],
        execute_at_from=_when(args.execute_at_from) if args.execute_at_from else None,
        execute_at_to=_when(args.execute_at_to) if args.execute_at_to else None,
        handler=args.handler,
    )
    if not job_filter.to_json():
        raise UsageError("give at least one of --status, --from, --to, --handler")
    return job_filter


def _cancel_many(args: argparse.Namespace) -> int:
    print(json.dumps({"cancelled": _client(args).cancel_jobs(_job_filter(args))}))
    return 0


def _retry_many(args: argparse.Namespace) -> int:
    retried = _client(args).retry_jobs(_job_filter(args), extra_attempts=args.extra_attempts)
    print(json.dumps({"retried": retried}))
    return 0


def _redrive(args: argparse.Namespace) -> int:
    retried = _client(args).redrive_jobs(
        _job_filter(args), user_id=args.user_id, extra_attempts=args.extra_attempts
    )
    print(json.dumps({"retried": retried}))
    return 0


def _attempts(args: argparse.Namespace) -> int:
    for attempt in _client(args).iter_attempts(args.job_id):
        if args.json:
            print(json.dumps(attempt.to_json()))
        else:
            print(_attempt_line(attempt))
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


def _attempt_line(attempt: Attempt) -> str:
    """attempt, outcome, started, seconds, HTTP status, error and excerpt (JSON strings)."""
    duration = "" if attempt.duration_seconds is None else f"{attempt.duration_seconds:.3f}"
    return "\t".join(
        (
            str(attempt.attempt),
            attempt.outcome,
            attempt.started_at.isoformat() if attempt.started_at else "",
            duration,
            "" if attempt.http_status is None else str(attempt.http_status),
            json.dumps(attempt.error or ""),
            json.dumps(attempt.response_excerpt or ""),
        )
    )


def _line(job: Job) -> str:
    message = job.message if len(job.message) <= 40 else job.message[:39] + "…"
    return "\t".join(
        (job.id, job.status, job.execute_at.isoformat(), str(job.attempts), json.dumps(message))
    )
