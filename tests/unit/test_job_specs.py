"""Validation of job-create requests (one job, or a bulk list), without the HTTP layer."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from datetime import timezone as dt_timezone

import pytest
from django.utils import timezone
from hypothesis import given
from hypothesis import strategies as st

from jobsvc.jobs.specs import (
    SpecErrors,
    parse_aware_datetime,
    parse_job_spec,
    parse_job_specs,
)

HORIZON_DAYS = 365


@pytest.fixture
def now() -> datetime:
    return timezone.now()


def body(now: datetime, message: object = "hello", **execute_at: float) -> dict:
    due = now + timedelta(**(execute_at or {"hours": 1}))
    return {"message": message, "execute_at": due.isoformat()}


def errors_of(raw: object, now: datetime) -> dict:
    with pytest.raises(SpecErrors) as caught:
        parse_job_spec(raw, now=now)
    return caught.value.detail


def test_a_valid_request_gives_a_spec_due_at_the_same_instant_in_utc(now):
    due = now + timedelta(hours=1)

    spec = parse_job_spec({"message": "hello", "execute_at": due.isoformat()}, now=now)

    assert (spec.message, spec.execute_at) == ("hello", due)
    assert spec.execute_at.tzinfo == UTC


def test_an_offset_is_converted_to_utc(now):
    plus_seven = dt_timezone(timedelta(hours=7))
    due = (now + timedelta(days=30)).astimezone(plus_seven)

    spec = parse_job_spec({"message": "m", "execute_at": due.isoformat()}, now=now)

    assert due.isoformat().endswith("+07:00")
    assert spec.execute_at == due
    assert spec.execute_at.utcoffset() == timedelta(0)
    assert spec.execute_at.hour == (due.hour - 7) % 24


@pytest.mark.parametrize(
    ("raw", "fields"),
    [
        ({}, {"message", "execute_at"}),
        ({"execute_at": "2030-01-01T00:00:00Z"}, {"message"}),
        ({"message": None, "execute_at": "2030-01-01T00:00:00Z"}, {"message"}),
        ({"message": "m"}, {"execute_at"}),
        ({"message": "m", "execute_at": None}, {"execute_at"}),
    ],
)
def test_missing_fields_are_each_reported_as_required(raw, fields):
    now = datetime(2029, 6, 1, tzinfo=UTC)

    detail = errors_of(raw, now)

    assert set(detail) == fields
    assert all(detail[field][0].startswith("This field is required") for field in fields)


@pytest.mark.parametrize("raw", [None, [], "text", 42, True])
def test_a_body_that_is_not_an_object_is_refused(raw, now):
    assert "non_field_errors" in errors_of(raw, now)


@pytest.mark.parametrize("message", [42, 1.5, True, ["m"], {"m": 1}])
def test_a_message_that_is_not_a_string_is_refused(message, now):
    assert errors_of(body(now, message), now) == {"message": ["Must be a string."]}


def test_an_empty_message_is_accepted(now):
    assert parse_job_spec(body(now, ""), now=now).message == ""


@pytest.mark.parametrize(
    ("message", "ok"),
    [
        ("a" * 12, True),
        ("a" * 13, False),
        ("é" * 6, True),  # 12 bytes
        ("é" * 7, False),  # 7 characters but 14 bytes
        ("€" * 4, True),  # 12 bytes
        ("€" * 4 + "a", False),
        ("😀" * 3, True),  # 12 bytes
        ("😀" * 3 + "a", False),
    ],
)
def test_the_message_limit_counts_utf8_bytes_not_characters(message, ok, now, settings):
    settings.MAX_MESSAGE_BYTES = 12

    if ok:
        assert parse_job_spec(body(now, message), now=now).message == message
    else:
        assert errors_of(body(now, message), now) == {"message": ["At most 12 bytes of UTF-8."]}


def test_a_message_at_the_default_limit_is_accepted_and_one_byte_more_is_not(now, settings):
    limit = settings.MAX_MESSAGE_BYTES

    assert parse_job_spec(body(now, "é" * (limit // 2)), now=now)
    assert "message" in errors_of(body(now, "é" * (limit // 2) + "a"), now)


def test_a_message_with_a_nul_character_is_refused(now):
    assert "NUL" in errors_of(body(now, "a\x00b"), now)["message"][0]


@pytest.mark.parametrize("message", ["\ud800", "a\udfffb", "\ude00\ud83d"])
def test_a_message_with_a_lone_surrogate_is_refused(message, now):
    assert "surrogate" in errors_of(body(now, message), now)["message"][0]


@pytest.mark.parametrize(
    ("execute_at", "says"),
    [
        ("2030-01-01T00:00:00", "time zone"),
        ("2030-01-01", "time zone"),
        ("tomorrow", "Not an ISO 8601"),
        ("", "Not an ISO 8601"),
        ("2030-01-01T00:00:00Z" + " " * 60, "Not an ISO 8601"),
        ("2030-13-01T00:00:00Z", "out of range"),
        ("2030-02-30T00:00:00Z", "out of range"),
        ("2030-01-01T25:00:00Z", "out of range"),
        ("2030-01-01T00:00:00+24:00", "out of range"),
        (1_900_000_000, "ISO 8601 date-time string"),
        (["2030-01-01T00:00:00Z"], "ISO 8601 date-time string"),
    ],
)
def test_an_unusable_execute_at_is_refused_with_a_reason(execute_at, says):
    now = datetime(2029, 6, 1, tzinfo=UTC)

    detail = errors_of({"message": "m", "execute_at": execute_at}, now)

    assert list(detail) == ["execute_at"]
    assert says in detail["execute_at"][0]


@pytest.mark.parametrize("execute_at", ["9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+23:59"])
def test_a_time_that_leaves_the_calendar_in_utc_is_refused(execute_at, now):
    assert "execute_at" in errors_of({"message": "m", "execute_at": execute_at}, now)


def test_a_job_up_to_the_horizon_ahead_is_accepted_and_beyond_is_refused(now):
    horizon = timedelta(days=HORIZON_DAYS)

    assert parse_job_spec(body(now, days=HORIZON_DAYS), now=now)
    assert errors_of(body(now, seconds=horizon.total_seconds() + 1), now) == {
        "execute_at": [f"Must be at most {HORIZON_DAYS} days in the future."]
    }


def test_a_job_due_in_the_past_is_accepted_up_to_the_horizon(now):
    horizon = timedelta(days=HORIZON_DAYS)

    assert parse_job_spec(body(now, days=-1), now=now)
    assert parse_job_spec(body(now, days=-HORIZON_DAYS), now=now)
    assert errors_of(body(now, seconds=-horizon.total_seconds() - 1), now) == {
        "execute_at": [f"Must be at most {HORIZON_DAYS} days in the past."]
    }


def test_the_horizon_follows_the_setting(now, settings):
    settings.MAX_SCHEDULE_HORIZON = timedelta(days=2)

    assert parse_job_spec(body(now, days=2), now=now)
    assert "execute_at" in errors_of(body(now, days=3), now)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=10,
)


@given(
    raw=json_values
    | st.fixed_dictionaries({"message": json_values, "execute_at": json_values | st.text()})
)
def test_any_json_body_is_either_a_spec_or_spec_errors(raw):
    now = datetime(2029, 6, 1, tzinfo=UTC)
    try:
        spec = parse_job_spec(raw, now=now)
    except SpecErrors as exc:
        assert exc.detail
    else:
        assert isinstance(spec.message, str)
        assert spec.execute_at.tzinfo == UTC


@given(text=st.text(max_size=80))
def test_parse_aware_datetime_returns_a_utc_time_or_a_message(text):
    parsed = parse_aware_datetime(text)

    if isinstance(parsed, datetime):
        assert parsed.utcoffset() == timedelta(0)
    else:
        assert isinstance(parsed, str)
        assert parsed


# --- bulk ---------------------------------------------------------------------------------


def bulk_errors_of(raw: object, now: datetime) -> dict | list:
    with pytest.raises(SpecErrors) as caught:
        parse_job_specs(raw, now=now)
    return caught.value.detail


def test_a_bulk_request_gives_one_spec_per_item_in_order(now):
    items = [body(now, f"job {n}", minutes=n + 1) for n in range(5)]

    specs = parse_job_specs(items, now=now)

    assert [spec.message for spec in specs] == [f"job {n}" for n in range(5)]


@pytest.mark.parametrize("raw", [[], {}, None, "[]", {"message": "m"}])
def test_a_bulk_request_needs_a_non_empty_list(raw, now):
    assert "non_field_errors" in bulk_errors_of(raw, now)


def test_a_bulk_request_may_hold_up_to_the_limit(now, settings):
    settings.MAX_BULK_JOBS = 3

    assert len(parse_job_specs([body(now)] * 3, now=now)) == 3
    assert bulk_errors_of([body(now)] * 4, now) == {
        "non_field_errors": ["At most 3 jobs per request, got 4."]
    }


def test_the_default_bulk_limit_is_1000(now):
    assert len(parse_job_specs([body(now)] * 1000, now=now)) == 1000
    assert "non_field_errors" in bulk_errors_of([body(now)] * 1001, now)


def test_one_bad_item_in_a_bulk_request_is_reported_at_its_index(now):
    items = [body(now), body(now), {"message": 1, "execute_at": "soon"}, body(now)]

    detail = bulk_errors_of(items, now)

    assert detail[:2] == [{}, {}]
    assert set(detail[2]) == {"message", "execute_at"}
    assert detail[3] == {}


def test_a_bulk_item_that_is_not_an_object_is_reported_at_its_index(now):
    detail = bulk_errors_of([body(now), "not a job"], now)

    assert detail[0] == {}
    assert "non_field_errors" in detail[1]


# --- delay_seconds ----------------------------------------------------------------------


@pytest.mark.parametrize("delay", [0, 1.5, 3600])
def test_delay_seconds_makes_the_job_due_that_long_after_now(now, delay):
    spec = parse_job_spec({"message": "m", "delay_seconds": delay}, now=now)

    assert spec.execute_at == now + timedelta(seconds=delay)
    assert spec.delay_seconds == delay


def test_execute_at_and_delay_seconds_together_are_refused(now):
    raw = {"message": "m", "execute_at": "2030-01-01T00:00:00Z", "delay_seconds": 5}

    detail = errors_of(raw, now)

    assert detail == {"delay_seconds": ["Give execute_at or delay_seconds, not both."]}


def test_neither_execute_at_nor_delay_seconds_names_both(now):
    detail = errors_of({"message": "m"}, now)

    assert "delay_seconds" in detail["execute_at"][0]


@pytest.mark.parametrize("delay", [-1, "10", True, [], 365 * 86400 + 1])
def test_an_unusable_delay_is_refused(now, delay, settings):
    settings.MAX_SCHEDULE_HORIZON = timedelta(days=365)

    detail = errors_of({"message": "m", "delay_seconds": delay}, now)

    assert list(detail) == ["delay_seconds"]


@pytest.mark.parametrize("name", ["exeucte_at", "user_id", "status", "handler_param"])
def test_a_field_the_api_does_not_know_is_refused_not_ignored(now, name):
    detail = errors_of(body(now) | {name: 1}, now)

    assert set(detail) == {name}
    assert detail[name][0].startswith("Unknown field")


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"message": "m", "execute_at": None, "delay_seconds": 5}, "execute_at"),
        (
            {"message": "m", "execute_at": "2030-01-01T00:00:00Z", "delay_seconds": None},
            "delay_seconds",
        ),
    ],
)
def test_a_null_time_beside_the_other_is_refused(raw, field):
    detail = errors_of(raw, datetime(2029, 6, 1, tzinfo=UTC))

    assert detail == {field: ["May not be null: leave the field out."]}
