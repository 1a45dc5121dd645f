"""The code's metric definitions match the contract the dashboards and alerts query.

Each process kind defines its metrics in one module; a metric renamed there (or a label
added) fails here, next to the contract, instead of blanking a dashboard panel.
"""

from __future__ import annotations

import importlib

import pytest
from prometheus_client.metrics import MetricWrapperBase

from tests.deploy.contract import (
    API_METRICS,
    DEAD_LETTER_METRICS,
    EXECUTOR_METRICS,
    SCHEDULER_METRICS,
    Metric,
)

MODULES = {
    "jobsvc.metrics": API_METRICS,
    "scheduler_worker.metrics": SCHEDULER_METRICS,
    "executor_worker.metrics": EXECUTOR_METRICS,
    "jobsvc.messaging.dead_letter": DEAD_LETTER_METRICS,
}


def defined_metrics(module_name: str) -> set[Metric]:
    module = importlib.import_module(module_name)
    return {
        # prometheus_client keeps a counter's name without `_total`, as the contract does.
        Metric(value._name, value._type, tuple(value._labelnames))
        for value in vars(module).values()
        if isinstance(value, MetricWrapperBase)
    }


@pytest.mark.parametrize("module_name", sorted(MODULES))
def test_module_defines_exactly_the_contracts_metrics(module_name):
    defined = defined_metrics(module_name)
    expected = set(MODULES[module_name])
    assert defined == expected, (
        f"only in code: {sorted(m.name for m in defined - expected)}; "
        f"only in the contract: {sorted(m.name for m in expected - defined)}"
    )
