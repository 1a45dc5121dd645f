"""The peers' own virtualenv: their pinned packages, apart from the product's.

``peers_venv(root)`` creates ``root/peers-venv`` with the packages of
``requirements.txt`` beside this file (the first run fetches them from PyPI, later runs
install from pip's cache) and returns its Python. The product's venv is not touched.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

REQUIREMENTS = Path(__file__).with_name("requirements.txt")
INSTALL_TIMEOUT = 900  # seconds for pip: the first run downloads the packages
STAMP = ".requirements-sha256"  # in the venv: the requirements it was built from


def peers_venv(root: Path) -> Path:
    """The venv's Python, created (or brought up to ``requirements.txt``) under ``root``."""
    venv = root / "peers-venv"
    python = venv / "bin" / "python"
    wanted = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    stamp = venv / STAMP
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    subprocess.run(
        [
            *(str(python), "-m", "pip", "install", "--disable-pip-version-check", "--quiet"),
            *("--requirement", str(REQUIREMENTS)),
        ],
        check=True,
        timeout=INSTALL_TIMEOUT,
    )
    stamp.write_text(wanted)
    return python


def installed_versions(python: Path, packages: tuple[str, ...]) -> dict[str, str]:
    """The installed version of each of ``packages`` in that venv."""
    script = (
        "import importlib.metadata as m, sys\n"
        "for name in sys.argv[1:]: print(name, m.version(name))\n"
    )
    output = subprocess.run(
        [str(python), "-c", script, *packages],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    return dict(line.split(" ", 1) for line in output.splitlines())
