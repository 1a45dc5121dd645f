"""docs/configuration.md says what the code reads: every variable, its default and its text."""

from __future__ import annotations

import ast
from pathlib import Path

from tools import configuration_doc

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "configuration.md"
PRODUCT = ("jobsvc", "scheduler_worker", "executor_worker", "coordination")


def _variables_read(path: Path) -> set[str]:
    """JOBSVC_* names given as the first argument of a call (env_str, os.environ.get, ...)."""
    return {
        node.args[0].value
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and configuration_doc.NAME.match(str(node.args[0].value))
    }


def test_the_page_is_what_the_code_generates():
    assert PAGE.read_text() == configuration_doc.page(), (
        f"docs/configuration.md is out of date: run `{configuration_doc.COMMAND}`"
    )


def test_every_variable_the_service_reads_is_on_the_page():
    sources = [path for package in PRODUCT for path in (REPO / package).rglob("*.py")]
    read = set().union(*map(_variables_read, [*sources, configuration_doc.GUNICORN]))
    documented = {
        line.split("`")[1] for line in PAGE.read_text().splitlines() if line.startswith("| `")
    }
    assert read - documented == set()
