"""The text `make run` prints once the stack answers: where things are, how to try it."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from .stack import Stack

RULE = "=" * 78


def banner(
    *,
    stack: Stack,
    api_url: str,
    repo: Path,
    app_names: Sequence[str],
    prometheus_url: str | None = None,
) -> str:
    """The banner for a started `make run` stack whose API answers at `api_url`."""
    api = api_url.rstrip("/")
    env_file = _display(stack.root / "stack.env", repo)
    pg_server = stack.postgres[0]
    lines = [
        RULE,
        " jobsvc local stack is up",
        RULE,
        f" API             {api}/",
        f" Admin           {api}/admin/",
        f" OpenAPI schema  {api}/api/v1/schema/",
        f" PostgreSQL      {pg_server.address}  (jobsvc_control + {stack.shards} shards)",
        *(
            f"   standby       {standby.address}  (synchronous streaming replica: "
            f"{_display(standby.log_path, repo)})"
            for standby in stack.standbys_of(pg_server)
        ),
        f" ZooKeeper       {stack.zookeeper.address}",
        f" Kafka           {stack.kafka.address}  (Apache Kafka, KRaft)",
        f" Processes       {', '.join(app_names)}",
        _prometheus_line(prometheus_url),
        f" State           {_display(stack.root, repo)}/",
        f" Logs            {_display(stack.logs_dir, repo)}/",
        f" Environment     {env_file}",
        "",
        " Create an admin user (in another shell, from the repo root):",
        f"   set -a; . {env_file}; set +a",
        "   .venv/bin/python manage.py createsuperuser",
        "",
        " Try the API:",
        *("   " + line for line in _curl_example(api)),
        "",
        " Ctrl-C stops everything (the data stays for the next `make run`).",
        RULE,
    ]
    return "\n".join(lines)


def _prometheus_line(url: str | None) -> str:
    if url is None:
        return " Prometheus      not installed (apt-get install prometheus, then make run again)"
    return f" Prometheus      {url}/  (alerts: {url}/alerts, targets: {url}/targets)"


def _curl_example(api: str) -> list[str]:
    json_header = "-H 'Content-Type: application/json'"
    return [
        f"curl -s -w '\\n' -X POST {api}/api/v1/users {json_header} \\",
        """  -d '{"username": "alice", "password": "correct-horse-battery", "job_weight": 1}'""",
        f"TOKEN=$(curl -s -X POST {api}/api/v1/auth/login {json_header} \\",
        """  -d '{"username": "alice", "password": "correct-horse-battery"}' \\""",
        """  | python3 -c 'import json, sys; print(json.load(sys.stdin)["data"]["token"])')""",
        f"curl -s -w '\\n' -X POST {api}/api/v1/me/jobs {json_header} \\",
        '  -H "Authorization: Bearer $TOKEN" \\',
        """  -d "{\\"message\\": \\"Hello world\\", """
        """\\"execute_at\\": \\"$(date -u -d '+1 minute' +%Y-%m-%dT%H:%M:%SZ)\\"}\"""",
        f"curl -s -w '\\n' {api}/api/v1/me/jobs -H \"Authorization: Bearer $TOKEN\"",
    ]


def _display(path: Path, repo: Path) -> str:
    """`path` relative to the repo when inside it (what a user types), else absolute."""
    try:
        return os.path.relpath(path, repo) if path.is_relative_to(repo) else str(path)
    except ValueError:
        return str(path)
