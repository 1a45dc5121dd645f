"""Drive a running system through its API: ``python manage.py loadgen [options]``.

The logic is in ``deploy.loadgen``; this command reads the options, creates the run's
users, prints a line a second and the summary, and writes ``--json``.
"""

from __future__ import annotations

import json
import secrets
import signal
import threading
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from deploy.loadgen.database import lookup_jobs
from deploy.loadgen.errors import LoadgenError
from deploy.loadgen.runner import LoadConfig, LoadGenerator
from deploy.loadgen.stats import Summary
from deploy.loadgen.users import users_create_and_log_in, weights_for
from jobsvc.sharding.ids import shard_of


class Command(BaseCommand):
    help = (
        "Create jobs through the API at a target rate and print, once a second, created/s, "
        "dispatched/s, executed/s, backlog, lateness p50/p99 and errors; then a summary. "
        "Ctrl-C ends the run early (the summary is still printed)."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--api", default="http://127.0.0.1:8000", help="API base URL")
        parser.add_argument("--users", type=int, default=3, help="users to create (default 3)")
        parser.add_argument(
            "--weights",
            default="1",
            help="job weights, comma-separated, cycled over the users (default 1)",
        )
        parser.add_argument(
            "--rate", type=float, default=100.0, help="jobs per second, all users (default 100)"
        )
        parser.add_argument(
            "--horizon",
            type=float,
            default=0.0,
            help="execute_at is uniform in now..now+HORIZON seconds (default 0: due now)",
        )
        parser.add_argument("--bulk", type=int, default=1, help="jobs per request (default 1)")
        parser.add_argument(
            "--duration", type=float, default=30.0, help="seconds of creating (default 30)"
        )
        parser.add_argument(
            "--concurrency", type=int, default=4, help="HTTP connections (default 4)"
        )
        parser.add_argument(
            "--drain",
            type=float,
            default=30.0,
            help="after creating, observe until every job finished, at most this many "
            "seconds (default 30)",
        )
        parser.add_argument("--json", type=Path, help="also write the summary here as JSON")

    def handle(self, *args, **options) -> None:
        config = _config(options)
        try:
            config.validate()
            run_id = secrets.token_hex(3)
            logged_in = users_create_and_log_in(
                api=config.api,
                run_id=run_id,
                weights=weights_for(users=config.users, weights=list(config.weights)),
            )
            generator = LoadGenerator(
                config=config,
                users=logged_in.users,
                lookup=lookup_jobs,
                shard_of=shard_of,
                write=self._line,
            )
        except LoadgenError as exc:
            raise CommandError(str(exc)) from exc
        self._line(
            f"run {run_id}: {config.users} users (weights "
            f"{', '.join(f'{w:g}' for w in config.weights)}, cycled), {config.rate:g} jobs/s "
            f"in requests of {config.bulk}, execute_at within {config.horizon:g} s, "
            f"{config.duration:g} s, {config.concurrency} connections, against {config.api}"
        )
        if logged_in.issued_in_process:
            self._line(
                f"({logged_in.issued_in_process} logins were throttled by the API; their "
                "tokens were issued in process)"
            )
        summary = self._run(generator)
        self._line(summary.text())
        if options["json"]:
            options["json"].parent.mkdir(parents=True, exist_ok=True)
            options["json"].write_text(json.dumps(summary.as_dict(), indent=2))
            self._line(f"summary written to {options['json']}")

    def _run(self, generator: LoadGenerator) -> Summary:
        """Run; SIGTERM stops it like Ctrl-C (only the main thread can take signals)."""
        if threading.current_thread() is not threading.main_thread():
            return generator.run()
        previous = signal.signal(signal.SIGTERM, lambda *_: generator.stop())
        try:
            return generator.run()
        finally:
            signal.signal(signal.SIGTERM, previous)

    def _line(self, text: str) -> None:
        self.stdout.write(text)
        self.stdout.flush()


def _config(options: dict) -> LoadConfig:
    try:
        weights = [float(part) for part in options["weights"].split(",") if part.strip()]
    except ValueError as exc:
        raise CommandError(f"--weights: {exc}") from exc
    if options["bulk"] > settings.MAX_BULK_JOBS:
        raise CommandError(f"--bulk: the API takes at most {settings.MAX_BULK_JOBS} a request")
    return LoadConfig(
        api=options["api"].rstrip("/"),
        users=options["users"],
        weights=tuple(weights),
        rate=options["rate"],
        horizon=options["horizon"],
        bulk=options["bulk"],
        duration=options["duration"],
        concurrency=options["concurrency"],
        drain=options["drain"],
    )
