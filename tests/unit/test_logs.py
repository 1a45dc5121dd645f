"""Log records carry the id of the request being served, in both formats."""

from __future__ import annotations

import json
import logging

from jobsvc import logs


def record(message: str = "hello") -> logging.LogRecord:
    return logging.LogRecord("jobsvc.test", logging.WARNING, __file__, 1, message, (), None)


def stamped(item: logging.LogRecord) -> logging.LogRecord:
    for log_filter in (logs.WorkerIdFilter(), logs.RequestIdFilter()):
        assert log_filter.filter(item)
    return item


def test_a_record_written_while_a_request_is_served_carries_its_id(monkeypatch):
    monkeypatch.setenv(logs.WORKER_ID_ENV, "api-1")
    token = logs.request_id.set("req-42")
    try:
        item = stamped(record())
    finally:
        logs.request_id.reset(token)

    assert json.loads(logs.JsonFormatter().format(item))["request_id"] == "req-42"
    assert "[api-1 req-42] hello" in logs.PlainFormatter().format(item)


def test_a_record_outside_a_request_has_no_request_id(monkeypatch):
    monkeypatch.setenv(logs.WORKER_ID_ENV, "executor-1")
    item = stamped(record())

    assert "request_id" not in json.loads(logs.JsonFormatter().format(item))
    assert "[executor-1] hello" in logs.PlainFormatter().format(item)


def test_the_plain_format_leaves_out_both_ids_when_neither_is_set(monkeypatch):
    monkeypatch.delenv(logs.WORKER_ID_ENV, raising=False)

    assert "[] hello" in logs.PlainFormatter().format(stamped(record()))
