"""Facts about the project itself: its version, its licence, its changelog."""

from __future__ import annotations

import re
from pathlib import Path

import jobsvc
import jobsvc_client

REPO = Path(__file__).resolve().parents[2]


def test_the_client_is_released_with_the_service():
    assert jobsvc_client.__version__ == jobsvc.__version__


def test_the_changelog_has_an_entry_for_this_version():
    changelog = (REPO / "CHANGELOG.md").read_text()
    released = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$", changelog, re.M)
    assert released and released[0] == jobsvc.__version__


def test_the_licence_is_the_apache_licence_2_0():
    text = (REPO / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
