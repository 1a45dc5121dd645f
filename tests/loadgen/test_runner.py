"""A run against a fake API and fake shards: pacing, counting, errors, stopping early."""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from jobsvc.sharding.ids import new_job_id, shard_of
from tools.loadgen.runner import LoadConfig, LoadGenerator
from tools.loadgen.tracker import JobState
from tools.loadgen.users import RunUser


class FakeApi:
    """Answers job creation like jobsvc (201, the jobs with their ids), or a set status."""

    def __init__(self) -> None:
        self.fail_with: int | None = None
        self.created: list[str] = []
        self.received: list[tuple[float, str]] = []  # (when, execute_at) of each job
        self.tokens: list[str] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self):
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as gunicorn

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                items = body if isinstance(body, list) else [body]
                if api.fail_with:
                    self._answer(api.fail_with, {"success": False})
                    return
                jobs = [{"id": new_job_id(shard_id=n % 2), **item} for n, item in enumerate(items)]
                with api._lock:
                    api.created += [job["id"] for job in jobs]
                    api.received += [(time.time(), item["execute_at"]) for item in items]
                    api.tokens.append(self.headers["Authorization"])
                self._answer(201, {"success": True, "data": jobs if body is items else jobs[0]})

            def _answer(self, status: int, payload: dict) -> None:
                raw = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args) -> None:
                pass

        return Handler


@pytest.fixture
def api() -> Iterator[FakeApi]:
    server = FakeApi()
    yield server
    server.stop()


class LatestDraw(random.Random):
    """Draws the upper end of every range."""

    def uniform(self, a: float, b: float) -> float:
        return b


def every_job_ran_at_once(shard: int, ids: list[str]) -> list[JobState]:
    now = time.time()
    return [JobState(job_id, "succeeded", now, now, now) for job_id in ids]


USERS = [RunUser(1, "a", 1.0, "token-a"), RunUser(2, "b", 2.0, "token-b")]


def config(fake: FakeApi, **overrides) -> LoadConfig:
    values = {
        "api": fake.url,
        "users": 2,
        "weights": (1.0, 2.0),
        "rate": 200.0,
        "horizon": 0.0,
        "bulk": 5,
        "duration": 1.5,
        "concurrency": 2,
        "drain": 3.0,
    }
    return LoadConfig(**(values | overrides))


def test_a_run_creates_at_the_target_rate_and_sees_every_job_finish(api):
    lines: list[str] = []
    generator = LoadGenerator(
        config=config(api),
        users=USERS,
        lookup=every_job_ran_at_once,
        shard_of=shard_of,
        write=lines.append,
    )
    summary = generator.run().as_dict()

    # 200 jobs/s in requests of 5 for 1.5 s: 60 requests, taking turns between the users.
    assert summary["created"] == len(api.created) == 300
    assert summary["requests"] == 60
    assert api.tokens.count("Bearer token-a") == api.tokens.count("Bearer token-b") == 30
    assert summary["executed"] == 300
    assert summary["unfinished"] == {"due": 0, "not_yet_due": 0}
    assert summary["errors"]["total"] == 0
    assert summary["interrupted"] is False
    assert "created/s" in lines[0]
    assert len(summary["series"]) == len(lines) - 1 >= 2
    assert sum(s["executed_per_s"] for s in summary["series"]) == pytest.approx(300, rel=0.2)


def test_failed_requests_are_counted_by_kind(api):
    api.fail_with = 503
    generator = LoadGenerator(
        config=config(api, duration=0.5, drain=0.0),
        users=USERS,
        lookup=every_job_ran_at_once,
        shard_of=shard_of,
        write=lambda line: None,
    )
    summary = generator.run().as_dict()
    assert summary["created"] == 0
    assert summary["errors"] == {"total": 20, "by_kind": {"HTTP 503": 20}}


def test_connection_errors_are_counted(api):
    url = api.url
    api.stop()
    generator = LoadGenerator(
        config=config(api, api=url, rate=20.0, bulk=1, duration=0.5, drain=0.0),
        users=USERS,
        lookup=every_job_ran_at_once,
        shard_of=shard_of,
        write=lambda line: None,
    )
    summary = generator.run().as_dict()
    assert summary["errors"]["by_kind"] == {"connection": 10}


def test_jobs_due_later_are_not_looked_up_before_their_time(api):
    looked_up: list[str] = []

    def lookup(shard: int, ids: list[str]) -> list[JobState]:
        looked_up.extend(ids)
        return every_job_ran_at_once(shard, ids)

    generator = LoadGenerator(
        config=config(api, horizon=3600.0, duration=1.0, drain=1.0),
        users=USERS,
        lookup=lookup,
        shard_of=shard_of,
        write=lambda line: None,
        rng=LatestDraw(),  # every job due an hour on: none during the 2-s run
    )
    summary = generator.run().as_dict()
    assert looked_up == []
    assert summary["unfinished"] == {"due": 0, "not_yet_due": 200}


def test_with_a_lead_every_job_is_due_that_long_after_its_request(api):
    generator = LoadGenerator(
        config=config(api, lead=5.0, horizon=0.0, duration=0.5, drain=0.0),
        users=USERS,
        lookup=every_job_ran_at_once,
        shard_of=shard_of,
        write=lambda line: None,
    )
    summary = generator.run().as_dict()

    assert summary["created"] == len(api.received) == 100
    for received, execute_at in api.received:
        due = datetime.fromisoformat(execute_at).timestamp()
        assert 4.0 < due - received <= 5.0  # sent just before the fake API received it
    assert summary["unfinished"] == {"due": 0, "not_yet_due": 100}


def test_stop_ends_the_run_early_with_a_summary(api):
    generator = LoadGenerator(
        config=config(api, duration=60.0),
        users=USERS,
        lookup=every_job_ran_at_once,
        shard_of=shard_of,
        write=lambda line: None,
    )
    threading.Timer(1.2, generator.stop).start()
    started = time.monotonic()
    summary = generator.run()
    assert time.monotonic() - started < 5
    assert summary.interrupted
    assert 0 < summary.created < 60 * 200


def test_ctrl_c_during_an_observation_ends_the_run_with_a_summary(api):
    calls = []

    def interrupted_lookup(shard: int, ids: list[str]) -> list[JobState]:
        calls.append(shard)
        raise KeyboardInterrupt

    generator = LoadGenerator(
        config=config(api, duration=60.0),
        users=USERS,
        lookup=interrupted_lookup,
        shard_of=shard_of,
        write=lambda line: None,
    )
    summary = generator.run()
    assert calls
    assert summary.interrupted
    assert summary.created > 0
    assert "summary (interrupted)" in summary.text()
