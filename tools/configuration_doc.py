"""docs/configuration.md, generated from the code that reads the settings.

    python -m tools.configuration_doc > docs/configuration.md

Every ``JOBSVC_*`` variable the service reads, in the order and under the headings of
``jobsvc/settings.py``, then the API server's (``deploy/gunicorn.conf.py``) and the
workers' commands': its default, its type and bound, and what it does, taken from the
comment above the line that reads it (or the line's own comment). The code stays the one
place for each fact; tests/unit/test_configuration_doc.py fails when the page and the
code disagree.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SETTINGS = REPO / "jobsvc" / "settings.py"
GUNICORN = REPO / "deploy" / "gunicorn.conf.py"
COMMANDS = (REPO / "jobsvc" / "worker_process.py",)
COMMAND = "python -m tools.configuration_doc > docs/configuration.md"

KINDS = {
    "env_str": "text",
    "env_int": "integer",
    "env_float": "number",
    "env_bool": "true or false",
    "env_list": "comma-separated list",
    "env_database_urls": "comma-separated PostgreSQL URLs",
    "env_networks": "comma-separated networks (CIDR)",
    "env_rate": "rate: N/s, N/min, N/hour or N/day",
}
HEADING = re.compile(r"^# -+ (?P<title>.+?) -+$")
NAME = re.compile(r"^JOBSVC_[A-Z0-9_]+$")
DEFAULT_NOTE = re.compile(r"\s*\(default:? (?P<default>[^)]*)\)$")


@dataclass(frozen=True)
class Variable:
    name: str
    default: str
    kind: str
    text: str


def _comment_above(lines: list[str], lineno: int) -> str:
    """The comment block that ends right above line ``lineno`` (1-based), as one paragraph."""
    block: list[str] = []
    index = lineno - 2
    while index >= 0 and lines[index].lstrip().startswith("#"):
        line = lines[index].strip()
        if HEADING.match(line):
            break
        block.insert(0, line.lstrip("#").strip())
        index -= 1
    return " ".join(block)


def _inline_comment(lines: list[str], node: ast.AST) -> str:
    line = lines[node.end_lineno - 1]
    return line.split("  # ", 1)[1].strip() if "  # " in line else ""


def _default(node: ast.expr | None) -> str:
    if node is None:
        return "required"
    if isinstance(node, ast.IfExp) and ast.unparse(node.orelse) == "None":
        return "required (a development value with `JOBSVC_DEBUG=true`)"
    try:
        value = _evaluate(node)
    except Exception:  # refers to other settings: shown as written
        return f"`{ast.unparse(node)}`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        return f"`{value}`" if value else "empty"
    return f"`{value:g}`" if isinstance(value, float) else f"`{value}`"


def _evaluate(node: ast.expr):
    """A default written as an expression of constants (64 * 1024, a join over range(4))."""
    code = compile(ast.Expression(node), "<default>", "eval")
    return eval(code, {"__builtins__": {"range": range}})


def _kind(call: ast.Call, function: str) -> str:
    kind = KINDS.get(function, "text")
    for keyword in call.keywords:
        if keyword.arg in ("minimum", "maximum"):
            word = "at least" if keyword.arg == "minimum" else "at most"
            try:
                bound = f"{_evaluate(keyword.value):g}"
            except Exception:  # another setting or a constant: shown as written
                bound = f"`{ast.unparse(keyword.value)}`"
            kind += f", {word} {bound}"
    return kind


def settings_variables(path: Path = SETTINGS) -> Iterator[tuple[str, Variable]]:
    """(heading, variable) for every ``env_*("JOBSVC_...")`` call, in the file's order."""
    source = path.read_text()
    lines = source.splitlines()
    heading = "General"
    statements = ast.parse(source).body
    headings = {
        number: match["title"]
        for number, line in enumerate(lines, start=1)
        if (match := HEADING.match(line.strip()))
    }
    for statement in statements:
        for number in sorted(headings):
            if number < statement.lineno:
                heading = headings[number]
        comment = _comment_above(lines, statement.lineno) or _inline_comment(lines, statement)
        calls = [
            node
            for node in ast.walk(statement)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id.startswith("env_")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and NAME.match(str(node.args[0].value))
        ]
        for call in sorted(calls, key=lambda node: (node.lineno, node.col_offset)):
            default = call.args[1] if len(call.args) > 1 else None
            for keyword in call.keywords:
                if keyword.arg == "default":
                    default = keyword.value
            own = _comment_above(lines, call.lineno) if call.lineno != statement.lineno else ""
            yield (
                heading,
                Variable(
                    name=call.args[0].value,
                    default="empty"
                    if default is None and call.func.id == "env_list"
                    else _default(default),
                    kind=_kind(call, call.func.id),
                    text=own or (comment if len(calls) == 1 else ""),
                ),
            )


def gunicorn_variables(path: Path = GUNICORN) -> Iterator[Variable]:
    """The API server's variables, as the config's docstring lists them (with their
    defaults), each one the config reads."""
    module = ast.parse(path.read_text())
    read = {
        node.args[0].value
        for node in ast.walk(module)
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
    }
    for line in (ast.get_docstring(module) or "").splitlines():
        name, _, text = line.strip().partition(" ")
        if NAME.match(name) and name in read:
            match = DEFAULT_NOTE.search(text)
            default = match["default"] if match else ""
            text = DEFAULT_NOTE.sub("", text).strip()
            yield Variable(name=name, default=default, kind="", text=text)


def command_variables(paths: tuple[Path, ...] = COMMANDS) -> Iterator[Variable]:
    """``os.environ.get("JOBSVC_...")`` in what the workers' commands share, with the option's
    help."""
    seen = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and node.keywords):
                continue
            help_text = next((k.value for k in node.keywords if k.arg == "help"), None)
            for inner in ast.walk(node):
                if (
                    isinstance(inner, ast.Call)
                    and ast.unparse(inner.func) == "os.environ.get"
                    and NAME.match(str(getattr(inner.args[0], "value", "")))
                    and inner.args[0].value not in seen
                    and isinstance(help_text, ast.Constant)
                ):
                    seen.add(inner.args[0].value)
                    yield Variable(
                        name=inner.args[0].value,
                        default="host-pid",
                        kind="text",
                        text=f"{help_text.value}; the `--worker-id` option's default",
                    )


def _table(variables: list[Variable]) -> list[str]:
    rows = ["| variable | default | what |", "|---|---|---|"]
    for variable in variables:
        text = variable.text.replace("|", "\\|")
        default = f"{variable.default} ({variable.kind})" if variable.kind else variable.default
        rows.append(f"| `{variable.name}` | {default} | {text} |")
    return rows


def page() -> str:
    parts = [
        "# Configuration",
        "",
        f"<!-- Generated by `{COMMAND}` from jobsvc/settings.py, "
        "deploy/gunicorn.conf.py and the workers' commands: edit those, not this page. -->",
        "",
        "Every setting is an environment variable read once at start-up; a missing or bad "
        "value stops the process with a message naming the variable. The API, the "
        "schedulers and the executors read the same variables: give them the same values. "
        "`JOBSVC_DEBUG=true` supplies development keys and must never be set in production.",
    ]
    sections: dict[str, list[Variable]] = {}
    for heading, variable in settings_variables():
        sections.setdefault(heading, []).append(variable)
    for heading, variables in sections.items():
        parts += ["", f"## {heading}", "", *_table(variables)]
    parts += [
        "",
        "## The API server (`deploy/gunicorn.conf.py`)",
        "",
        *_table(list(gunicorn_variables())),
        "",
        "## Worker commands (`run_scheduler`, `run_executor`)",
        "",
        *_table(list(command_variables())),
    ]
    return "\n".join(parts) + "\n"


def main() -> int:
    sys.stdout.write(page())
    return 0


if __name__ == "__main__":
    sys.exit(main())
