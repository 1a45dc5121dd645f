"""A worker's /readyz, read as a probe would: (status, body); (0, {}) while it does not serve."""

from __future__ import annotations

import json
import urllib.error
import urllib.request


def readyz(port: int) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())
    except OSError:
        return 0, {}
