"""EXPLAIN (ANALYZE, FORMAT JSON) plans, and reading them: which scans read the jobs table, and how
many rows they looked at."""

from __future__ import annotations

import json


def explain(cursor, sql: str, params=None, *, buffers: bool = False) -> list[dict]:
    """Run EXPLAIN (ANALYZE[, BUFFERS], FORMAT JSON) of ``sql`` on ``cursor``; the plan,
    decoded (the driver returns the json column as text or already decoded)."""
    options = "ANALYZE, BUFFERS" if buffers else "ANALYZE"
    cursor.execute(f"EXPLAIN ({options}, FORMAT JSON) {sql}", params)
    [[plan]] = cursor.fetchall()
    return json.loads(plan) if isinstance(plan, str) else plan


def scans_of_jobs(plan) -> list[dict]:
    """The plan's scans of the jobs table, under any alias."""
    nodes = list(plan) if isinstance(plan, list) else [plan]
    found = []
    while nodes:
        node = nodes.pop()
        node = node.get("Plan", node)
        if node.get("Relation Name") == "jobs" and node["Node Type"].endswith("Scan"):
            found.append(node)
        nodes.extend(node.get("Plans", []))
    return found


def rows_read(scans: list[dict]) -> float:
    """Rows the scans looked at: returned, or read and filtered out."""
    return sum(
        (
            scan["Actual Rows"]
            + scan.get("Rows Removed by Filter", 0)
            + scan.get("Rows Removed by Index Recheck", 0)
        )
        * scan["Actual Loops"]
        for scan in scans
    )
