"""What the settings refuse at start-up (F13, F20): weak or missing keys, DEBUG on a public
name, and a handler configuration that would fail later. Each case imports the settings
(or the API's WSGI application) in a fresh Python, as a process starting would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
KEYS = {
    "JOBSVC_SECRET_KEY": "k" * 8 + "abcdefghij" * 4,
    "JOBSVC_JWT_SIGNING_KEY": "j" * 40 + "0123456789",
}


def start(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("JOBSVC_")}
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**clean, "DJANGO_SETTINGS_MODULE": "jobsvc.settings", **env},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


PRINT_KEYS = (
    "from django.conf import settings; print(settings.SECRET_KEY, settings.JWT_SIGNING_KEY)"
)
IMPORT_API = "import jobsvc.wsgi"


def test_debug_without_keys_gets_random_keys_of_its_own_never_a_known_constant():
    first = start(PRINT_KEYS, JOBSVC_DEBUG="true")
    second = start(PRINT_KEYS, JOBSVC_DEBUG="true")

    assert first.returncode == 0, first.stderr
    assert first.stdout != second.stdout
    assert "dev-only" not in first.stdout


def test_without_debug_the_keys_are_required():
    result = start(PRINT_KEYS)

    assert result.returncode != 0
    assert "JOBSVC_SECRET_KEY" in result.stderr


@pytest.mark.parametrize("key", ["short-key", "a" * 64, "abababababababababababababababab"])
def test_a_short_or_repetitive_key_stops_start_up(key):
    result = start(PRINT_KEYS, **{**KEYS, "JOBSVC_SECRET_KEY": key})

    assert result.returncode != 0
    assert "at least 32 characters" in result.stderr


def test_debug_on_a_public_host_name_stops_start_up():
    result = start(PRINT_KEYS, JOBSVC_DEBUG="true", JOBSVC_ALLOWED_HOSTS="jobs.example.com")

    assert result.returncode != 0
    assert "local names only" in result.stderr


@pytest.mark.parametrize("topic", ["jobs", "jobs.dead-letter", "__consumer_offsets"])
def test_an_api_allowed_to_publish_to_a_system_topic_does_not_start(topic):
    result = start(IMPORT_API, **KEYS, JOBSVC_KAFKA_HANDLER_ALLOWED_TOPICS=f"events,{topic}")

    assert result.returncode != 0
    assert "system topics" in result.stderr


def test_an_api_with_a_sound_handler_configuration_starts():
    result = start(IMPORT_API, **KEYS, JOBSVC_KAFKA_HANDLER_ALLOWED_TOPICS="events")

    assert result.returncode == 0, result.stderr
