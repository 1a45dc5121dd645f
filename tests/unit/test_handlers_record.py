"""The default handler records the message at DEBUG and succeeds; it takes no parameters."""

from __future__ import annotations

import logging

import pytest

from jobsvc.handlers.base import JobContext
from jobsvc.handlers.errors import InvalidHandlerParams
from jobsvc.handlers.record import RecordHandler


def job(message: str = "Hello world") -> JobContext:
    return JobContext(job_id="j1", user_id=7, shard_id=3, attempt=1, message=message)


def test_the_message_is_logged_at_debug_and_the_job_succeeds(caplog):
    with caplog.at_level(logging.DEBUG, logger="jobsvc.handlers.record"):
        assert RecordHandler().handle(job()) is None

    [record] = caplog.records
    assert record.levelno == logging.DEBUG
    assert "Hello world" in record.getMessage()
    assert (record.job_id, record.shard_id) == ("j1", 3)


def test_nothing_is_logged_at_info(caplog):
    with caplog.at_level(logging.INFO, logger="jobsvc.handlers.record"):
        RecordHandler().handle(job())

    assert caplog.records == []


def test_a_long_message_is_cut_in_the_log_line(caplog):
    with caplog.at_level(logging.DEBUG, logger="jobsvc.handlers.record"):
        RecordHandler().handle(job("x" * 65_536))

    assert len(caplog.records[0].getMessage()) < 400


@pytest.mark.parametrize("params", [None, {}])
def test_no_parameters_are_accepted_as_none(params):
    assert RecordHandler().validate_params(params) == {}


@pytest.mark.parametrize(
    ("params", "words"),
    [({"url": "x"}, "takes no parameters; got: url"), ([], "JSON object")],
)
def test_any_parameter_is_refused(params, words):
    with pytest.raises(InvalidHandlerParams, match=words):
        RecordHandler().validate_params(params)
