"""The README is a user's guide a newcomer reads in minutes, and its layout is the tree's."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
MAX_LINES = 300


def _layout() -> list[str]:
    """The first word of each entry in the README's Layout block."""
    section = README.read_text().split("\n## Layout\n", 1)[1]
    block = section.split("```", 2)[1]
    return [line.split()[0] for line in block.splitlines() if line and not line[0].isspace()]


def test_the_readme_is_at_most_300_lines():
    assert len(README.read_text().splitlines()) <= MAX_LINES


def test_the_layout_names_only_what_exists():
    for entry in _layout():
        assert (REPO / entry).exists(), entry


def test_the_layout_names_every_top_level_folder_in_the_repository():
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    folders = {path.split("/")[0] + "/" for path in tracked if "/" in path}
    folders = {folder for folder in folders if not folder.startswith(".")}
    assert folders <= set(_layout())


def test_every_relative_link_in_the_docs_resolves():
    pages = [README, REPO / "CHANGELOG.md", *sorted((REPO / "docs").rglob("*.md"))]
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" not in target:
                assert (page.parent / target).exists(), f"{page.relative_to(REPO)}: {target}"
