"""API create benchmark: single-job and bulk requests against a running API, driven by wrk.

wrk (C, event loop) generates the load so the client costs little of the 2 cores the
server shares with it. Each scenario logs a fresh user in, runs wrk with a Lua script that
posts jobs due at random times within the next hour, and reads throughput and latency
percentiles from wrk's output.

    python -m tools.bench.api_create --api http://127.0.0.1:8000 [--duration 15]
"""

from __future__ import annotations

import argparse
import json
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from tools.bench.processes import REPO, WorkerProcess
from tools.devstack.ports import free_port

GUNICORN_CONFIG = REPO / "deploy" / "gunicorn.conf.py"

_LUA_TEMPLATE = """
local token = "%(token)s"
local bulk = %(bulk)d
math.randomseed(os.time())
local function job()
  local t = os.time() + 600 + math.random(0, 3000)
  return string.format('{"message":"bench job %%d","execute_at":"%%s"}',
                       math.random(1, 1000000000), os.date("!%%Y-%%m-%%dT%%H:%%M:%%SZ", t))
end
request = function()
  local body
  if bulk > 0 then
    local items = {}
    for i = 1, bulk do items[i] = job() end
    body = "[" .. table.concat(items, ",") .. "]"
  else
    body = job()
  end
  return wrk.format("POST", nil, {["Content-Type"] = "application/json",
                                  ["Authorization"] = "Bearer " .. token}, body)
end
local codes = {}
response = function(status, headers, body)
  codes[status] = (codes[status] or 0) + 1
end
done = function(summary, latency, requests)
  local errors = summary.errors.status + summary.errors.connect + summary.errors.read
                 + summary.errors.write + summary.errors.timeout
  io.write(string.format("RESULT requests=%%d seconds=%%.3f errors=%%d "
    .. "p50=%%.3f p90=%%.3f p99=%%.3f max=%%.3f\\n",
    summary.requests, summary.duration / 1e6, errors,
    latency:percentile(50) / 1000, latency:percentile(90) / 1000,
    latency:percentile(99) / 1000, latency.max / 1000))
end
"""

_RESULT = re.compile(
    r"RESULT requests=(\d+) seconds=([\d.]+) errors=(\d+) "
    r"p50=([\d.]+) p90=([\d.]+) p99=([\d.]+) max=([\d.]+)"
)


@dataclass(frozen=True)
class ScenarioResult:
    scenario: str
    connections: int
    jobs_per_request: int
    requests: int
    seconds: float
    errors: int
    requests_per_second: float
    jobs_per_second: float
    latency_ms_p50: float
    latency_ms_p90: float
    latency_ms_p99: float
    latency_ms_max: float


def _post_json(url: str, payload: dict) -> dict:
    request = urllib.request.Request(
        url,
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


def bench_token(api: str) -> str:
    """Sign up a fresh bench user and return its token."""
    username = f"bench-{secrets.token_hex(4)}"
    password = secrets.token_urlsafe(16)
    _post_json(f"{api}/api/v1/users", {"username": username, "password": password})
    login = _post_json(f"{api}/api/v1/auth/login", {"username": username, "password": password})
    return login["data"]["token"]


def run_scenario(
    *, api: str, scenario: str, bulk: int, connections: int, duration: int, threads: int = 1
) -> ScenarioResult:
    wrk = shutil.which("wrk")
    if wrk is None:
        raise SystemExit("wrk is not installed: apt-get install wrk (make bootstrap does)")
    token = bench_token(api)
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(_LUA_TEMPLATE % {"token": token, "bulk": bulk})
    try:
        output = subprocess.run(
            [
                wrk,
                f"-t{threads}",
                f"-c{connections}",
                f"-d{duration}s",
                "--timeout",
                "10s",
                "-s",
                script.name,
                f"{api}/api/v1/me/jobs",
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    finally:
        Path(script.name).unlink()
    match = _RESULT.search(output)
    if match is None:
        raise RuntimeError(f"could not read wrk's output:\n{output}")
    requests, seconds, errors = int(match[1]), float(match[2]), int(match[3])
    jobs_per_request = max(bulk, 1)
    return ScenarioResult(
        scenario=scenario,
        connections=connections,
        jobs_per_request=jobs_per_request,
        requests=requests,
        seconds=seconds,
        errors=errors,
        requests_per_second=round(requests / seconds, 1),
        jobs_per_second=round((requests - errors) * jobs_per_request / seconds, 1),
        latency_ms_p50=float(match[4]),
        latency_ms_p90=float(match[5]),
        latency_ms_p99=float(match[6]),
        latency_ms_max=float(match[7]),
    )


def run_all(*, api: str, duration: int) -> list[ScenarioResult]:
    return [
        run_scenario(api=api, scenario="single create", bulk=0, connections=16, duration=duration),
        run_scenario(
            api=api,
            scenario="bulk create (1000/request)",
            bulk=1000,
            connections=4,
            duration=duration,
        ),
    ]


def markdown_table(results: list[ScenarioResult]) -> str:
    lines = [
        "| scenario | connections | requests/s | jobs/s | p50 ms | p99 ms | errors |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r.scenario} | {r.connections} | {r.requests_per_second:,.0f} | "
            f"{r.jobs_per_second:,.0f} | {r.latency_ms_p50:.1f} | {r.latency_ms_p99:.1f} | "
            f"{r.errors} |"
        )
    return "\n".join(lines)


@contextmanager
def served_api(context, *, env: dict[str, str] | None = None, name: str = "bench-api"):
    """gunicorn serving the API on the bench stack while the block runs; yields its URL.

    ``env`` defaults to the stack's. The per-user create rate is raised (a bulk scenario
    creates ~40,000 jobs/s as one user, far past the default), not turned off, so every
    create still pays the check; an environment that sets a rate keeps it (0 measures
    without the limits).
    """
    env = context.env if env is None else env
    port = free_port()
    api = WorkerProcess(
        kind="api",
        name=name,
        env={
            **env,
            "JOBSVC_API_BIND": f"127.0.0.1:{port}",
            "JOBSVC_USER_CREATE_RATE_PER_SECOND": env.get(
                "JOBSVC_USER_CREATE_RATE_PER_SECOND", "1000000"
            ),
        },
        log_dir=context.out,
        argv=[
            *(sys.executable, "-m", "gunicorn", "--config", str(GUNICORN_CONFIG)),
            "jobsvc.wsgi:application",
        ],
    )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_for_health(base, api)
        yield base
    finally:
        api.stop()


def run_against_new_api(context) -> dict:
    """The bench-suite scenario: serve the API with gunicorn on this stack, then measure."""
    with served_api(context) as base:
        results = run_all(api=base, duration=5 if context.quick else 15)
    return {
        "setup": "gunicorn (deploy/gunicorn.conf.py defaults) on the 2-core machine that also "
        "runs PostgreSQL (2 servers, 4 shards), ZooKeeper, Kafka and wrk",
        "results": [asdict(r) for r in results],
        "markdown": markdown_table(results),
    }


def _wait_for_health(base: str, api: WorkerProcess, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not api.alive():
            raise RuntimeError(f"gunicorn exited:\n{api.log()}")
        try:
            with urllib.request.urlopen(f"{base}/healthz", timeout=1):
                return
        except OSError:
            time.sleep(0.1)  # polling a starting server, bounded by the deadline
    raise RuntimeError(f"the API did not answer /healthz within {timeout} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--api", default="http://127.0.0.1:8000", help="API base URL")
    parser.add_argument("--duration", type=int, default=15, help="seconds per scenario")
    parser.add_argument("--json", type=Path, help="also write the results here as JSON")
    args = parser.parse_args()
    results = run_all(api=args.api.rstrip("/"), duration=args.duration)
    print(markdown_table(results))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2))


if __name__ == "__main__":
    main()
