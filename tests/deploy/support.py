"""Helpers of the deployment tests: the repo's deployment files, parsed.

Nothing here needs a server or a Docker engine: docker-compose.yml is read with PyYAML,
the application's settings with `ast`, PromQL with a small tokenizer.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"
COMPOSE_ENV_EXAMPLE = REPO / "deploy" / "compose.env.example"
DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
PROMETHEUS_DIR = REPO / "deploy" / "prometheus"
GRAFANA_DIR = REPO / "deploy" / "grafana"
SETTINGS_FILE = REPO / "jobsvc" / "settings.py"
GUNICORN_CONFIG = REPO / "deploy" / "gunicorn.conf.py"
# Where the application's code lives (what reads JOBSVC_* variables at run time).
APP_SOURCES = (
    REPO / "jobsvc",
    REPO / "scheduler_worker",
    REPO / "executor_worker",
    REPO / "coordination",
    GUNICORN_CONFIG,
)

JOBSVC_NAME = re.compile(r"^JOBSVC_[A-Z0-9_]+$")


# ---- docker-compose.yml -------------------------------------------------------------------


@cache
def compose() -> dict[str, Any]:
    """docker-compose.yml as data (YAML anchors and merge keys resolved, not interpolated)."""
    return yaml.safe_load(COMPOSE_FILE.read_text())


def services() -> dict[str, dict[str, Any]]:
    return compose()["services"]


def app_services() -> dict[str, dict[str, Any]]:
    """The services that run the application image (built from the Dockerfile)."""
    return {name: svc for name, svc in services().items() if "build" in svc}


def service_env(service: Mapping[str, Any]) -> dict[str, str]:
    """A service's `environment`, in either compose syntax (mapping or KEY=VALUE list)."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        return dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {key: "" if value is None else str(value) for key, value in env.items()}


def service_command(service: Mapping[str, Any]) -> str:
    command = service.get("command") or ""
    return " ".join(command) if isinstance(command, list) else str(command)


def bind_mounts(service: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(host path, container path) of a service's bind mounts (short syntax, ./ paths)."""
    mounts = []
    for volume in service.get("volumes") or []:
        if isinstance(volume, str) and volume.startswith("./"):
            source, target = volume.split(":")[:2]
            mounts.append((source, target))
    return mounts


def services_running(command: str) -> list[str]:
    """The app services whose command contains `command` ("run_scheduler"...)."""
    return sorted(name for name, svc in app_services().items() if command in service_command(svc))


def postgres_services() -> dict[str, dict[str, Any]]:
    return {
        name: svc
        for name, svc in services().items()
        if str(svc.get("image", "")).startswith("postgres:")
    }


def databases_created_by(postgres_service: Mapping[str, Any]) -> set[str]:
    """The databases a postgres service has after its first start (POSTGRES_DB, init SQL)."""
    env = service_env(postgres_service)
    databases = {env.get("POSTGRES_DB") or env.get("POSTGRES_USER", "postgres")}
    for source, target in bind_mounts(postgres_service):
        if target.startswith("/docker-entrypoint-initdb.d/") and source.endswith(".sql"):
            sql = (REPO / source).read_text()
            databases |= set(re.findall(r"CREATE DATABASE\s+(\w+)", sql, re.IGNORECASE))
    return databases


# ${NAME}, ${NAME:-default}, ${NAME-default}, ${NAME:?error}, ${NAME?error}
INTERPOLATION = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<op>:?[-?])?(?P<arg>[^}]*)\}")


def interpolations(value: Any) -> Iterator[re.Match[str]]:
    """Every ${...} interpolation anywhere in a compose value."""
    if isinstance(value, str):
        yield from INTERPOLATION.finditer(value)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from interpolations(key)
            yield from interpolations(item)
    elif isinstance(value, list):
        for item in value:
            yield from interpolations(item)


def interpolate(text: str, values: Mapping[str, str]) -> str:
    """Compose-style interpolation of `text` with `values` (defaults where unset)."""

    def substitute(match: re.Match[str]) -> str:
        name, op, arg = match["name"], match["op"] or "", match["arg"]
        value = values.get(name)
        if op.endswith("-") and (value is None or (op == ":-" and value == "")):
            return arg
        if op.endswith("?") and (value is None or (op == ":?" and value == "")):
            raise KeyError(f"{name}: {arg}")
        return value or ""

    return INTERPOLATION.sub(substitute, text)


# ---- what the application reads -----------------------------------------------------------

ENV_READERS = frozenset(
    {"env_str", "env_int", "env_float", "env_bool", "env_list", "env_database_urls", "env_networks"}
)
LOOPBACK_ADDRESS = re.compile(r"(127\.0\.0\.1|localhost|\[::1\]):\d+")


@dataclass(frozen=True)
class EnvRead:
    """One JOBSVC_* variable the application reads, and what happens when it is unset."""

    name: str
    required: bool  # no default outside DEBUG: the process refuses to start without it
    default: str | None  # the default's source text, None when there is none

    @property
    def defaults_to_loopback(self) -> bool:
        """True when the default is an address on this host: wrong in a container."""
        return self.default is not None and bool(LOOPBACK_ADDRESS.search(self.default))


def settings_env_reads(path: Path = SETTINGS_FILE) -> dict[str, EnvRead]:
    """The `env_*("JOBSVC_...", default)` calls of jobsvc/settings.py."""
    reads = {}
    for call in _calls(path):
        if not (isinstance(call.func, ast.Name) and call.func.id in ENV_READERS):
            continue
        name = _first_string(call)
        if name is None:
            continue
        default = _default_arg(call)
        if default is None:
            # env_str has no default: required. The others default in their signature.
            required = call.func.id == "env_str"
            reads[name] = EnvRead(name, required=required, default=None)
        else:
            reads[name] = EnvRead(
                name, required=_none_outside_debug(default), default=ast.unparse(default)
            )
    return reads


def gunicorn_env_reads(path: Path = GUNICORN_CONFIG) -> dict[str, EnvRead]:
    """The variables deploy/gunicorn.conf.py reads (`os.environ.get`, `_int_env`)."""
    reads = {}
    for call in _calls(path):
        name = _first_string(call)
        if name is None or not JOBSVC_NAME.match(name):
            continue
        is_get = isinstance(call.func, ast.Attribute) and call.func.attr == "get"
        is_helper = isinstance(call.func, ast.Name) and call.func.id.endswith("_env")
        if not (is_get or is_helper):
            continue
        default = _default_arg(call)
        reads[name] = EnvRead(
            name, required=False, default=None if default is None else ast.unparse(default)
        )
    return reads


def app_variable_names() -> set[str]:
    """Every JOBSVC_* name that appears as a string in the application's code."""
    names = set()
    for source in APP_SOURCES:
        files = [source] if source.is_file() else sorted(source.rglob("*.py"))
        for file in files:
            for node in ast.walk(ast.parse(file.read_text(), filename=str(file))):
                if (
                    isinstance(node, ast.Constant)
                    and isinstance(node.value, str)
                    and JOBSVC_NAME.match(node.value)
                ):
                    names.add(node.value)
    return names


def _calls(path: Path) -> Iterator[ast.Call]:
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Call):
            yield node


def _first_string(call: ast.Call) -> str | None:
    if call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str):
        return call.args[0].value
    return None


def _default_arg(call: ast.Call) -> ast.expr | None:
    if len(call.args) > 1:
        return call.args[1]
    for keyword in call.keywords:
        if keyword.arg == "default":
            return keyword.value
    return None


def _none_outside_debug(default: ast.expr) -> bool:
    """`X if DEBUG else None` (or a plain None): no default in production."""
    if isinstance(default, ast.Constant):
        return default.value is None
    if isinstance(default, ast.IfExp):
        return any(
            isinstance(branch, ast.Constant) and branch.value is None
            for branch in (default.body, default.orelse)
        )
    return False


# ---- PromQL ---------------------------------------------------------------------------------

_STRINGS = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGES = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(
    r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", re.IGNORECASE
)
_VARIABLES = re.compile(r"\$\{?\w+\}?")
_IDENTIFIER = re.compile(r"(?<![\w.])([A-Za-z_:][A-Za-z0-9_:]*)\b(?!\s*\()")
_NUMBER_SUFFIX = re.compile(r"(?<=\d)[smhdwy]\b")
_KEYWORDS = frozenset(
    {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring"}
    | {"group_left", "group_right", "inf", "nan", "atan2"}
)


def promql_metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (function names and labels excluded)."""
    text = _STRINGS.sub(" ", expr)
    text = _MATCHERS.sub(" ", text)
    text = _RANGES.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    text = _VARIABLES.sub(" ", text)
    text = _NUMBER_SUFFIX.sub(" ", text)
    names = {match.group(1) for match in _IDENTIFIER.finditer(text)}
    return {name for name in names if name.lower() not in _KEYWORDS}


# ---- promtool -----------------------------------------------------------------------------


def promtool(*args: str, cwd: Path = PROMETHEUS_DIR) -> subprocess.CompletedProcess[str]:
    """Run promtool; fail (not skip) when it is missing: `make bootstrap` installs it."""
    binary = shutil.which("promtool")
    if binary is None:
        pytest.fail(
            "promtool not found on PATH. It comes with Debian's `prometheus` package, which "
            "`make bootstrap` installs (or: apt-get install prometheus)."
        )
    return subprocess.run(
        [binary, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )
