"""Reading EXPLAIN (ANALYZE, FORMAT JSON) plans: which scans read the jobs table, and how
many rows they looked at."""

from __future__ import annotations


def scans_of_jobs(plan) -> list[dict]:
    """The plan's scans of the jobs table, under any alias."""
    nodes = plan if isinstance(plan, list) else [plan]
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
