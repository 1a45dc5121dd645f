"""Everything the client sends and reads is in the API's OpenAPI schema, with its types,
and every operation of the schema is in the client.

If the API renames a path, a parameter or a field, or changes a type, or gains an
operation the client lacks, this fails before a user notices.
"""

from __future__ import annotations

import inspect
import types
import typing
from dataclasses import fields
from datetime import datetime
from typing import Any

import pytest
from rest_framework.test import APIClient

from jobsvc_client.client import LIST_PARAMETERS, OPERATIONS, PAGE_PARAMETERS, Client
from jobsvc_client.models import Account, Attempt, Job, JobSpec, Token, WebhookSecret

pytestmark = pytest.mark.django_db(databases="__all__")


@pytest.fixture(scope="module")
def schema() -> dict:
    response = APIClient().get("/api/v1/schema/", {"format": "json"})
    assert response.status_code == 200
    return response.json()


def resolve(schema: dict, node: dict) -> dict:
    while "$ref" in node or len(node.get("allOf", ())) == 1:
        if "allOf" in node:  # drf-spectacular wraps a described enum: {"allOf": [$ref]}
            [inner] = node["allOf"]
            node = {**resolve(schema, inner), **{k: v for k, v in node.items() if k != "allOf"}}
            continue
        node = schema["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]]
    return node


def non_null(schema: dict, node: dict) -> dict:
    """A nullable enum is drf-spectacular's oneOf [the enum, NullEnum]: the enum."""
    if "oneOf" not in node:
        return node
    options = [resolve(schema, option) for option in node["oneOf"]]
    [option] = [o for o in options if o.get("enum") != [None]]
    return {**option, "nullable": True}


def operation(schema: dict, name: str) -> dict:
    method, path = OPERATIONS[name]
    assert path in schema["paths"], f"{name}: {path} is not in the schema"
    assert method in schema["paths"][path], f"{name}: {method.upper()} {path} is not"
    return schema["paths"][path][method]


def request_schema(schema: dict, name: str) -> dict:
    content = operation(schema, name)["requestBody"]["content"]["application/json"]
    return resolve(schema, content["schema"])


def response_data(schema: dict, name: str, status: str) -> dict:
    content = operation(schema, name)["responses"][status]["content"]["application/json"]
    return resolve(schema, resolve(schema, content["schema"])["properties"]["data"])


def json_type(annotation: Any) -> tuple[dict[str, Any], bool]:
    """The OpenAPI type (and format) a Python annotation reads, and whether None is allowed."""
    args = typing.get_args(annotation)
    nullable = isinstance(annotation, types.UnionType) and type(None) in args
    if nullable:
        (annotation,) = [arg for arg in args if arg is not type(None)]
    base = typing.get_origin(annotation) or annotation
    mapping = {
        str: {"type": "string"},
        int: {"type": "integer"},
        float: {"type": "number"},
        bool: {"type": "boolean"},
        dict: {"type": "object"},
        list: {"type": "array"},
        datetime: {"type": "string", "format": "date-time"},
    }
    return mapping[base], nullable


def assert_fields_match(schema: dict, shape: dict, cls: type, *, skip=("extra",)) -> None:
    hints = typing.get_type_hints(cls)
    for field in fields(cls):
        if field.name in skip:
            continue
        assert field.name in shape["properties"], f"{cls.__name__}.{field.name} not in the schema"
        declared = non_null(schema, resolve(schema, shape["properties"][field.name]))
        expected, nullable = json_type(hints[field.name])
        for key, value in expected.items():
            assert declared.get(key) == value, f"{cls.__name__}.{field.name}: {declared}"
        if not nullable:
            assert not declared.get("nullable"), f"{cls.__name__}.{field.name} may be null"


def schema_operations(schema: dict) -> dict[tuple[str, str], str]:
    """(method, path) -> operationId of every operation the schema describes."""
    return {
        (method, path): details.get("operationId", f"{method} {path}")
        for path, methods in schema["paths"].items()
        for method, details in methods.items()
        if method in {"get", "post", "put", "patch", "delete"}
    }


@pytest.mark.parametrize("name", sorted(OPERATIONS))
def test_every_operation_the_client_uses_is_in_the_schema(schema, name):
    operation(schema, name)


def test_the_client_has_every_operation_of_the_schema(schema):
    """operationId -> the client operation that calls it; none may be missing."""
    covered = {target: name for name, target in OPERATIONS.items()}
    missing = sorted(
        operation_id
        for target, operation_id in schema_operations(schema).items()
        if target not in covered
    )
    assert not missing, f"the client has no method for {missing} (add it to OPERATIONS)"


def test_every_client_operation_is_called_by_a_client_method():
    source = inspect.getsource(Client)
    uncalled = [name for name in OPERATIONS if f'"{name}"' not in source]
    assert not uncalled, f"no Client method calls {uncalled}"


def test_the_job_the_client_reads_is_the_job_the_api_returns(schema):
    for name, status in (("jobs_get", "200"), ("jobs_cancel", "200"), ("jobs_create", "201")):
        assert_fields_match(schema, response_data(schema, name, status), Job)
    page = response_data(schema, "jobs_list", "200")
    assert_fields_match(schema, resolve(schema, page["items"]), Job)


def test_the_job_the_client_sends_is_a_job_the_api_takes(schema):
    body = request_schema(schema, "jobs_create")
    # A single job, or (the API documents it in the operation) a list of them. A oneOf
    # beside the properties is a rule on them (exactly one of execute_at, delay_seconds).
    shape = body if "properties" in body else resolve(schema, body["oneOf"][0])
    assert_fields_match(schema, shape, JobSpec)
    assert set(shape.get("required", [])) <= {"message", "execute_at"}
    headers = {
        p["name"] for p in operation(schema, "jobs_create")["parameters"] if p["in"] == "header"
    }
    assert "Idempotency-Key" in headers


def test_list_parameters_and_log_in_fields_are_the_api_s(schema):
    query = {p["name"] for p in operation(schema, "jobs_list")["parameters"] if p["in"] == "query"}
    assert set(LIST_PARAMETERS) <= query
    assert {"username", "password"} <= set(request_schema(schema, "login")["properties"])
    assert {"username", "password"} <= set(request_schema(schema, "sign_up")["properties"])
    assert_fields_match(schema, response_data(schema, "login", "200"), Token)
    assert_fields_match(schema, response_data(schema, "refresh", "200"), Token)
    assert "pagination" in resolve(schema, _list_envelope(schema))["properties"]


def test_attempts_and_the_account_the_client_reads_are_the_apis(schema):
    page = response_data(schema, "jobs_attempts", "200")
    assert_fields_match(schema, resolve(schema, page["items"]), Attempt)
    query = {
        p["name"] for p in operation(schema, "jobs_attempts")["parameters"] if p["in"] == "query"
    }
    assert set(PAGE_PARAMETERS) <= query
    assert_fields_match(schema, response_data(schema, "me", "200"), Account)
    for name in ("webhook_secret", "webhook_secret_rotate"):
        assert_fields_match(schema, response_data(schema, name, "200"), WebhookSecret)


@pytest.mark.parametrize(
    ("name", "fields"),
    [
        ("jobs_reschedule", {"execute_at", "delay_seconds", "message"}),
        ("jobs_retry", {"extra_attempts"}),
        ("jobs_cancel_many", {"status", "execute_at_from", "execute_at_to", "handler"}),
        ("jobs_retry_many", {"status", "execute_at_from", "execute_at_to", "handler"}),
        ("jobs_redrive", {"user_id", "extra_attempts"}),
    ],
)
def test_the_fields_the_client_sends_are_the_apis(schema, name, fields):
    assert fields <= set(request_schema(schema, name)["properties"])


def _list_envelope(schema: dict) -> dict:
    content = operation(schema, "jobs_list")["responses"]["200"]["content"]["application/json"]
    return content["schema"]
