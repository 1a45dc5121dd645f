"""Layers point down: the product never imports the tools (benchmarks, chaos, the local
stack, the load generator) or the deployment files, and `jobsvc` never imports a worker.
The application image holds only the product (tests/deploy/test_dockerfile.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("jobsvc", "scheduler_worker", "executor_worker", "coordination", "jobsvc_client")
FORBIDDEN = {
    "jobsvc": {"tools", "deploy", "tests", "scheduler_worker", "executor_worker"},
    "scheduler_worker": {"tools", "deploy", "tests", "executor_worker"},
    "executor_worker": {"tools", "deploy", "tests", "scheduler_worker"},
    "coordination": {"tools", "deploy", "tests", "jobsvc", "scheduler_worker", "executor_worker"},
    "jobsvc_client": {"tools", "deploy", "tests", "jobsvc", "scheduler_worker", "executor_worker"},
}


def _imports(path: Path) -> set[str]:
    tops = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            tops |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            tops.add(node.module.split(".")[0])
    return tops


@pytest.mark.parametrize("package", PRODUCT)
def test_a_product_package_imports_nothing_above_or_beside_it(package):
    offending = {
        str(path.relative_to(REPO)): sorted(_imports(path) & FORBIDDEN[package])
        for path in (REPO / package).rglob("*.py")
    }
    assert {file: found for file, found in offending.items() if found} == {}
