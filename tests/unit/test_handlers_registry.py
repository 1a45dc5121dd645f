"""The handler registry (names -> configured handlers) and the API's handler validation."""

from __future__ import annotations

from typing import Any

import pytest

from jobsvc.handlers.base import Handler, JobContext
from jobsvc.handlers.errors import (
    HandlerConfigError,
    InvalidHandlerParams,
    UnknownHandler,
)
from jobsvc.handlers.http import HttpHandler
from jobsvc.handlers.kafka import KafkaHandler
from jobsvc.handlers.record import RecordHandler
from jobsvc.handlers.registry import BUILTIN_HANDLERS, HandlerRegistry
from jobsvc.handlers.validation import validate_handler

OPTIONS = {
    "http": {
        "signing_secrets": lambda user_id: ["whsec_" + "c2VjcmV0" * 4],
        "allowed_hosts": ["127.0.0.1"],
        "allow_private_addresses": True,
    },
    "kafka": {
        "allowed_topics": ["events"],
        "reserved_topics": ["jobs", "jobs.dead-letter"],
        "topics_of": lambda user_id: {"events"} if user_id == 1 else set(),
    },
}


class EchoHandler:
    """A project's own handler, configured through the registry's options."""

    def __init__(self, *, prefix: str = "") -> None:
        self.prefix = prefix

    def validate_params(self, params: Any) -> dict[str, Any]:
        if set(params) - {"text"}:
            raise InvalidHandlerParams("Only text is accepted.")
        return {"text": self.prefix + str(params.get("text", ""))}

    def handle(self, job: JobContext) -> None:
        return None


class NotAHandler:
    pass


@pytest.fixture
def registry() -> HandlerRegistry:
    paths = {**BUILTIN_HANDLERS, "echo": f"{__name__}.EchoHandler"}
    return HandlerRegistry(paths, options={**OPTIONS, "echo": {"prefix": "> "}})


def test_the_built_in_handlers_are_found_by_name(registry):
    assert isinstance(registry.get("default"), RecordHandler)
    assert isinstance(registry.get("http"), HttpHandler)
    assert isinstance(registry.get("kafka"), KafkaHandler)
    assert registry.names() == ["default", "echo", "http", "kafka"]


def test_a_projects_own_handler_is_built_with_its_options(registry):
    echo = registry.get("echo")

    assert isinstance(echo, Handler)
    assert registry.validate_params("echo", {"text": "hi"}) == {"text": "> hi"}


def test_the_same_handler_instance_is_returned_every_time(registry):
    assert registry.get("http") is registry.get("http")


@pytest.mark.parametrize("name", ["nope", "", "DEFAULT", ["default"], None])
def test_an_unknown_name_raises_unknown_handler_listing_the_known_ones(registry, name):
    with pytest.raises(UnknownHandler) as caught:
        registry.get(name)

    assert caught.value.field == "handler"
    assert "default, echo, http, kafka" in str(caught.value)


def test_params_are_validated_by_the_named_handler(registry):
    assert registry.validate_params("default", {}) == {}
    assert registry.validate_params("kafka", {"topic": "events"}) == {"topic": "events"}
    with pytest.raises(InvalidHandlerParams, match="topic"):
        registry.validate_params("kafka", {"topic": "jobs"})


def test_validating_params_of_an_unknown_handler_raises_unknown_handler(registry):
    with pytest.raises(UnknownHandler):
        registry.validate_params("nope", {})


def test_errors_are_also_the_standard_exceptions_callers_may_catch():
    assert issubclass(InvalidHandlerParams, ValueError)
    assert issubclass(UnknownHandler, LookupError)


@pytest.mark.parametrize(
    ("paths", "options", "words"),
    [
        ({"x": "no_such_module.Handler"}, {}, "cannot import"),
        ({"x": f"{__name__}.Missing"}, {}, "cannot import"),
        ({"x": "nodots"}, {}, "not a dotted path"),
        ({"x": f"{__name__}.NotAHandler"}, {}, "no validate_params"),
        ({"x": f"{__name__}.EchoHandler"}, {"x": {"colour": "red"}}, "colour"),
        ({"x": f"{__name__}.EchoHandler"}, {"y": {}}, "unconfigured handlers"),
        ({"": f"{__name__}.EchoHandler"}, {}, "1 to 64 characters"),
        ({"x" * 65: f"{__name__}.EchoHandler"}, {}, "1 to 64 characters"),
        ({"http": BUILTIN_HANDLERS["http"]}, {}, "signing_secrets"),
        ({"kafka": BUILTIN_HANDLERS["kafka"]}, {"kafka": {"allowed_topics": []}}, "topics_of"),
    ],
)
def test_a_broken_configuration_fails_at_construction_naming_the_handler(paths, options, words):
    with pytest.raises(HandlerConfigError) as caught:
        HandlerRegistry(paths, options=options)

    assert words in str(caught.value)


# --- validate_handler: what the API calls --------------------------------------------------


def test_with_the_owner_the_owners_grants_are_checked_too(registry):
    params = {"topic": "events"}

    assert validate_handler(name="kafka", params=params, registry=registry, user_id=1)
    with pytest.raises(InvalidHandlerParams, match="not one of the topics"):
        validate_handler(name="kafka", params=params, registry=registry, user_id=2)
    assert validate_handler(name="default", params={}, registry=registry, user_id=2)


def test_no_handler_means_the_default_handler_with_no_params(registry):
    assert validate_handler(name=None, params=None, registry=registry) == ("default", {})
    assert validate_handler(name=None, params={}, registry=registry) == ("default", {})


def test_a_named_handler_returns_its_validated_params(registry):
    result = validate_handler(name="echo", params={"text": "hi"}, registry=registry)

    assert result == ("echo", {"text": "> hi"})


def test_params_without_a_handler_name_are_refused_by_the_default_handler(registry):
    with pytest.raises(InvalidHandlerParams, match="takes no parameters; got: url"):
        validate_handler(name=None, params={"url": "http://x/"}, registry=registry)


@pytest.mark.parametrize("params", [[], "x", 3])
def test_params_that_are_not_an_object_are_refused(registry, params):
    with pytest.raises(InvalidHandlerParams, match="JSON object") as caught:
        validate_handler(name="default", params=params, registry=registry)

    assert caught.value.field == "handler_params"


@pytest.mark.parametrize("name", [3, ["http"], {"name": "http"}])
def test_a_handler_name_that_is_not_a_string_is_refused(registry, name):
    with pytest.raises(UnknownHandler, match="Must be a string") as caught:
        validate_handler(name=name, params=None, registry=registry)

    assert caught.value.field == "handler"


def test_an_unknown_handler_name_is_refused_with_the_choices(registry):
    with pytest.raises(UnknownHandler, match=r"Unknown handler 'mail'; one of: default, echo"):
        validate_handler(name="mail", params={}, registry=registry)
