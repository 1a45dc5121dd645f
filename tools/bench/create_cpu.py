"""CPU and wall time of one job create inside the API process, without HTTP.

Calls Django's WSGI handler directly, so the numbers are the application's own cost
(middleware, authentication, validation, the insert), without gunicorn or the client.
Run it against a running stack (``make run``), with that stack's environment:

    set -a; . .state/stack.env; set +a
    .venv/bin/python -m tools.bench.create_cpu --api http://127.0.0.1:8000 [--creates 3000]

A user is signed up through the running API (for a token); every create is real and
lands in the stack's shards.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import time
from datetime import UTC, datetime, timedelta

import django

from tools.bench.api_create import bench_token


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--api", default="http://127.0.0.1:8000", help="running API, for a token")
    parser.add_argument("--creates", type=int, default=3000, help="creates per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; the first warms up")
    args = parser.parse_args()
    token = bench_token(args.api.rstrip("/"))
    django.setup()
    from django.core.wsgi import get_wsgi_application

    application = get_wsgi_application()
    due = datetime.now(UTC) + timedelta(minutes=30)
    body = json.dumps({"message": "cpu bench", "execute_at": due.isoformat()}).encode()

    def create() -> None:
        environ = {
            "REQUEST_METHOD": "POST",
            "PATH_INFO": "/api/v1/me/jobs",
            "QUERY_STRING": "",
            "SERVER_NAME": "127.0.0.1",
            "SERVER_PORT": "8000",
            "HTTP_HOST": "127.0.0.1",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "REMOTE_ADDR": "127.0.0.1",
            "CONTENT_TYPE": "application/json",
            "CONTENT_LENGTH": str(len(body)),
            "HTTP_AUTHORIZATION": f"Bearer {token}",
            "wsgi.input": io.BytesIO(body),
            "wsgi.url_scheme": "http",
            "wsgi.errors": sys.stderr,
        }
        statuses = []
        response = application(
            environ, lambda status, headers, exc_info=None: statuses.append(status)
        )
        b"".join(response)
        response.close()
        if not statuses[0].startswith("201"):
            raise SystemExit(f"create answered {statuses[0]}")

    for number in range(1, args.rounds + 1):
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(args.creates):
            create()
        wall = (time.perf_counter() - wall) / args.creates * 1000
        cpu = (time.process_time() - cpu) / args.creates * 1000
        print(f"round {number}: {wall:.3f} ms wall, {cpu:.3f} ms CPU per create")


if __name__ == "__main__":
    main()
