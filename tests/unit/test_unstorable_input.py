"""Strings with NUL or unpaired surrogates, and huge numbers, never get past the parsers as
anything but a clear 400, and nothing the API could echo back fails to render.

Hypothesis feeds the request parser, the job parsers and the serializers such strings in
values and in keys, at any depth.
"""

from __future__ import annotations

import io
import json
import math

from django.utils import timezone
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from rest_framework.exceptions import ParseError, ValidationError

from jobsvc.accounts.serializers import LoginInput, UserCreateInput
from jobsvc.api.errors import exception_handler
from jobsvc.api.parsers import JSONParser, unstorable_text
from jobsvc.api.renderers import JSONRenderer
from jobsvc.jobs.serializers import JobsCancelInput, JobsRedriveInput, JobsRetryInput
from jobsvc.jobs.specs import SpecErrors, parse_job_spec, parse_job_specs, parse_reschedule

# Any code point, lone surrogates and NUL included (Hypothesis leaves surrogates out of
# text unless asked), with the troublemakers made likely.
hostile_text = st.text(
    alphabet=st.characters(codec=None, categories=None)
    | st.sampled_from(["\x00", "\ud800", "\udfff", "\ud83d", "\ude00", "é", "\u2028"]),
    max_size=12,
)
huge_numbers = (
    st.integers(min_value=-(10**40), max_value=10**40)
    | st.floats()
    | st.sampled_from([10**308, 1e308, -1e308, 5e-324, 1e-300, 2**63, -(2**63) - 1, 2**31, 32768])
)
field_names = st.sampled_from(
    [
        "message",
        "execute_at",
        "delay_seconds",
        "handler",
        "handler_params",
        "max_attempts",
        "priority",
        "timeout_seconds",
        "status",
        "execute_at_from",
        "execute_at_to",
        "extra_attempts",
        "user_id",
        "username",
        "password",
        "job_weight",
        "url",
        "topic",
        "headers",
    ]
)
leaves = st.none() | st.booleans() | huge_numbers | hostile_text
values = st.recursive(
    leaves,
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(field_names | hostile_text, children, max_size=4)
    ),
    max_leaves=10,
)
bodies = st.dictionaries(field_names | hostile_text, values, max_size=6)


def rendered(response) -> dict:
    """The bytes the API would send for ``response``: valid UTF-8 JSON, whatever it holds."""
    raw = JSONRenderer().render(response.data)
    return json.loads(raw.decode("utf-8"))


def error_response(exc: Exception) -> dict:
    response = exception_handler(exc, {})
    assert response is not None, f"{exc!r} would be a 500"
    assert 400 <= response.status_code < 500
    body = rendered(response)
    assert body["success"] is False
    assert body["error"]["message"]
    return body


def raw_json(value) -> bytes:
    """``value`` as a client would send it: surrogates as \\u escapes, huge numbers spelled out."""
    return json.dumps(value, ensure_ascii=True, allow_nan=True).encode("ascii")


@settings(max_examples=400, deadline=None)
@given(value=values)
def test_the_parser_returns_only_storable_text_or_refuses_the_body(value):
    try:
        parsed = JSONParser().parse(io.BytesIO(raw_json(value)))
    except (ParseError, ValidationError) as exc:
        error_response(exc)
        return
    assert unstorable_text(parsed) is None
    assert not _has_non_finite(parsed)


@settings(max_examples=200, deadline=None)
@given(value=values)
def test_a_body_holding_nul_or_a_lone_surrogate_is_refused_naming_where(value):
    assume(not _has_non_finite(value))  # Infinity and NaN are refused by the JSON parser first
    body = {"message": "m", "handler_params": {"outer": [value, "\ud800"]}}

    try:
        JSONParser().parse(io.BytesIO(raw_json(body)))
    except ValidationError as exc:
        error = error_response(exc)["error"]
        assert list(error["fields"]) == ["handler_params"]
        assert error["message"].startswith("handler_params.outer[")
    else:
        raise AssertionError("a lone surrogate was accepted")


@given(key=st.sampled_from(["\ud800", "a\x00b", "\udc00x"]))
def test_a_bad_key_is_named_with_escapes_in_a_body_that_renders(key):
    body = [{"message": "ok"}, {"message": "m", "handler_params": {key: 1}}]

    try:
        JSONParser().parse(io.BytesIO(raw_json(body)))
    except ValidationError as exc:
        error = error_response(exc)["error"]
    else:
        raise AssertionError("a bad key was accepted")

    assert list(error["fields"]) == ["1"]
    assert "\\u" in next(iter(error["fields"]["1"]["handler_params"]))


@settings(max_examples=300, deadline=None)
@given(body=bodies | st.lists(bodies, max_size=3) | values)
def test_the_job_parsers_answer_a_spec_or_a_renderable_400(body):
    now = timezone.now()
    for parse in (parse_job_spec, parse_reschedule, parse_job_specs):
        try:
            parse(body, now=now)
        except SpecErrors as exc:
            error_response(ValidationError(exc.detail))


@settings(max_examples=300, deadline=None)
@given(body=bodies | values)
def test_the_serializers_answer_valid_or_a_renderable_400(body):
    cases = [
        (JobsCancelInput, {"allowed_statuses": frozenset({"scheduled", "queued"})}),
        (JobsRetryInput, {"allowed_statuses": frozenset({"failed"})}),
        (JobsRedriveInput, {"allowed_statuses": frozenset({"failed"})}),
        (LoginInput, {}),
        (UserCreateInput, {}),
    ]
    for serializer_class, context in cases:
        serializer = serializer_class(data=body, context=context)
        if not serializer.is_valid():
            error_response(ValidationError(serializer.errors))


@given(data=values)
def test_anything_the_api_could_echo_renders_as_json_that_reads_back_the_same(data):
    raw = JSONRenderer().render({"data": _finite(data)})

    assert json.loads(raw.decode("utf-8")) == {"data": _finite(data)}


def _has_non_finite(value) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_has_non_finite(item) for item in value.values())
    if isinstance(value, list):
        return any(_has_non_finite(item) for item in value)
    return False


def _finite(value):
    """NaN is never equal to itself; the renderer refuses non-finite numbers anyway."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite(item) for item in value]
    return value


def test_a_number_too_large_for_a_float_is_a_parse_error_not_infinity():
    for raw in (b'{"delay_seconds": 1e400}', b'{"job_weight": -1e999}', b"[1E309]"):
        try:
            JSONParser().parse(io.BytesIO(raw))
        except ParseError as exc:
            error_response(exc)
        else:
            raise AssertionError(f"{raw!r} was read")
