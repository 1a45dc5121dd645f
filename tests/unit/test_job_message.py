"""The jobs topic's message: the weight executors order by, and what a bad one is."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from jobsvc.jobs.priorities import PRIORITY_DEFAULT
from jobsvc.messaging.job_message import JobMessage, MalformedJobMessage

MESSAGE = JobMessage(
    job_id="2Jb6hU3kDN1Qf0kP7zXv9mWcR4a",
    shard_id=1,
    user_id=7,
    attempt=1,
    epoch=3,
    due_at=datetime(2030, 1, 1, tzinfo=UTC),
    dispatched_at=datetime(2030, 1, 1, 0, 0, 0, 12000, tzinfo=UTC),
    weight=4.0,
    priority=9,
    handler="http",
)


def with_weight(weight) -> bytes:
    data = json.loads(MESSAGE.encode())
    if weight is ...:
        del data["weight"]
    else:
        data["weight"] = weight
    return json.dumps(data).encode()


def test_a_message_round_trips_with_its_users_weight():
    assert JobMessage.decode(MESSAGE.encode()) == MESSAGE


def test_a_message_without_a_weight_priority_or_handler_gets_the_defaults():
    """Messages published by a scheduler from before these were sent."""
    data = json.loads(MESSAGE.encode())
    del data["weight"], data["priority"], data["handler"]
    message = JobMessage.decode(json.dumps(data).encode())
    assert (message.weight, message.priority, message.handler) == (1.0, PRIORITY_DEFAULT, None)


def test_a_message_without_a_handler_encodes_without_one():
    message = JobMessage.decode(MESSAGE._replace(handler=None).encode())
    assert message.handler is None


@pytest.mark.parametrize("handler", [7, True, ["http"], {"name": "http"}])
def test_a_handler_that_is_not_a_string_is_malformed(handler):
    data = json.loads(MESSAGE.encode())
    data["handler"] = handler
    with pytest.raises(MalformedJobMessage, match="handler"):
        JobMessage.decode(json.dumps(data).encode())


@pytest.mark.parametrize("priority", ["9", 1.5, True, None])
def test_a_priority_that_is_not_an_int_is_malformed(priority):
    data = json.loads(MESSAGE.encode())
    data["priority"] = priority
    with pytest.raises(MalformedJobMessage, match="priority"):
        JobMessage.decode(json.dumps(data).encode())


@pytest.mark.parametrize("weight", [0, -1, "4", True, None, [1]])
def test_a_weight_that_is_not_a_positive_finite_number_is_malformed(weight):
    with pytest.raises(MalformedJobMessage, match="weight"):
        JobMessage.decode(with_weight(weight))


@pytest.mark.parametrize("literal", [b"NaN", b"Infinity", b"1" + b"0" * 400])
def test_non_finite_weights_are_malformed(literal):
    """Not JSON at all (NaN, Infinity), or a number no float holds."""
    raw = with_weight(1).replace(b'"weight": 1', b'"weight": ' + literal)
    with pytest.raises(MalformedJobMessage, match="not JSON"):
        JobMessage.decode(raw)


@pytest.mark.parametrize("due_at", ["2030-01-01T00:00:00", "tomorrow", "2030-13-01T00:00:00Z", 7])
def test_a_due_time_without_an_offset_or_not_a_time_is_malformed(due_at):
    data = json.loads(MESSAGE.encode())
    data["due_at"] = due_at
    with pytest.raises(MalformedJobMessage, match="due_at"):
        JobMessage.decode(json.dumps(data).encode())


@pytest.mark.parametrize("raw", [None, b"", b"\xff\xfe", b"[1]", b'{"v": 2}', b"{"])
def test_what_is_not_a_version_1_object_is_malformed(raw):
    with pytest.raises(MalformedJobMessage):
        JobMessage.decode(raw)


def test_times_are_written_in_utc_with_a_z():
    data = json.loads(MESSAGE.encode())
    assert (data["due_at"], data["dispatched_at"]) == (
        "2030-01-01T00:00:00Z",
        "2030-01-01T00:00:00.012000Z",
    )
