"""Both distributions build and install as a user installs them, each in a fresh venv.

The server (`pip install .`) gets its dependencies from the runtime lock, as the image
does, and must then need nothing more: the wheel is installed with no index. The client
(`pip install ./jobsvc_client`) needs nothing but the standard library and brings the
`jobsvc` command. Wheels are built from a copy of the files the builds read, with the
setuptools of the dev lock (no build backend fetched); the runtime lock comes from pip's
cache where it can, else from the package index.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import jobsvc
import jobsvc_client

REPO = Path(__file__).resolve().parents[2]
SERVER_SOURCES = (
    "pyproject.toml",
    "README.md",
    "LICENSE",
    "jobsvc",
    "scheduler_worker",
    "executor_worker",
    "coordination",
)
SERVER_PACKAGES = ("jobsvc", "scheduler_worker", "executor_worker", "coordination")
INSTALL_TIMEOUT = 600  # seconds: a cold pip cache fetches the runtime lock from the index


def _run(
    *command: str | Path, cwd: Path, env: dict[str, str] | None = None, timeout: float = 120
) -> str:
    result = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=env or _clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, f"{command}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def _clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without the test stack's settings or the repo on the path."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("JOBSVC_", "DJANGO_", "PYTHON", "VIRTUAL_ENV"))
    }
    return {**env, "PIP_DISABLE_PIP_VERSION_CHECK": "1", **extra}


_IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", "build", "*.egg-info")


def _copy(names: tuple[str, ...], source: Path, target: Path) -> Path:
    target.mkdir()
    for name in names:
        path = source / name
        if path.is_dir():
            shutil.copytree(path, target / name, ignore=_IGNORED)
        else:
            shutil.copy2(path, target / name)
    return target


def _wheel(source: Path, out: Path) -> Path:
    _run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "--wheel-dir",
        out,
        source,
        cwd=source,
    )
    (wheel,) = out.glob("*.whl")
    return wheel


def _venv(path: Path) -> Path:
    """A fresh venv. Without pip of its own: this process's pip installs into it."""
    _run(sys.executable, "-m", "venv", "--without-pip", path, cwd=path.parent)
    return path / "bin"


def _pip(bin_dir: Path, *args: str | Path, cwd: Path, timeout: float = 120) -> str:
    """pip, run by this process's interpreter, working on the venv of bin_dir."""
    return _run(
        sys.executable, "-m", "pip", "--python", bin_dir / "python", *args, cwd=cwd, timeout=timeout
    )


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("packaging")


@pytest.fixture(scope="module")
def client_bin(workdir) -> Path:
    source = workdir / "client-src"
    shutil.copytree(REPO / "jobsvc_client", source, ignore=_IGNORED)
    wheel = _wheel(source, workdir / "client-dist")
    bin_dir = _venv(workdir / "client-venv")
    _pip(bin_dir, "install", "--no-index", wheel, cwd=workdir)
    return bin_dir


@pytest.fixture(scope="module")
def server_bin(workdir) -> Path:
    source = _copy(SERVER_SOURCES, REPO, (workdir / "server-src"))
    wheel = _wheel(source, workdir / "server-dist")
    bin_dir = _venv(workdir / "server-venv")
    lock = REPO / "requirements" / "runtime.txt"
    _pip(bin_dir, "install", "--require-hashes", "-r", lock, cwd=workdir, timeout=INSTALL_TIMEOUT)
    # No index: every dependency the package declares must already be there, from the lock.
    _pip(bin_dir, "install", "--no-index", wheel, cwd=workdir)
    return bin_dir


def test_the_client_installs_alone_with_a_jobsvc_command(client_bin, workdir):
    usage = _run(client_bin / "jobsvc", "--help", cwd=workdir)
    assert usage.startswith("usage: jobsvc") and "jobs" in usage
    version = _run(client_bin / "jobsvc", "--version", cwd=workdir)
    assert version.split() == ["jobsvc", jobsvc_client.__version__]
    installed = json.loads(_pip(client_bin, "list", "--format=json", cwd=workdir))
    assert [package["name"] for package in installed] == ["jobsvc-client"]


def test_the_server_installs_from_the_runtime_lock_and_runs_from_anywhere(server_bin, workdir):
    _pip(server_bin, "check", cwd=workdir)
    env = _clean_env(DJANGO_SETTINGS_MODULE="jobsvc.settings", JOBSVC_DEBUG="true")
    _run(server_bin / "python", "-m", "django", "check", cwd=workdir, env=env)
    commands = _run(server_bin / "python", "-m", "django", "help", cwd=workdir, env=env)
    for command in ("migrate_all", "ensure_topics", "run_scheduler", "run_executor"):
        assert command in commands
    probe = textwrap.dedent(f"""
        import importlib, json, django
        django.setup()
        from django.db.migrations.loader import MigrationLoader
        from django.template.loader import get_template
        import jobsvc
        migrations = MigrationLoader(None, ignore_no_migrations=True).disk_migrations
        print(json.dumps({{
            "files": [importlib.import_module(name).__file__ for name in {SERVER_PACKAGES!r}],
            "version": jobsvc.__version__,
            "migrations": sorted({{app for app, _ in migrations}}),
            "template": str(get_template("admin/cluster/overview.html").origin),
        }}))
    """)
    found = json.loads(_run(server_bin / "python", "-c", probe, cwd=workdir, env=env))
    site = str(workdir / "server-venv")
    assert all(file.startswith(site) for file in found["files"]), found["files"]
    assert found["version"] == jobsvc.__version__
    assert {"accounts", "jobs"} <= set(found["migrations"])
    assert found["template"].startswith(site)


def test_the_server_package_leaves_the_tools_and_the_client_out(server_bin, workdir):
    files = _pip(server_bin, "show", "--files", "jobsvc", cwd=workdir)
    tops = {line.strip().split("/")[0] for line in files.splitlines() if "/" in line}
    assert set(SERVER_PACKAGES) <= tops
    assert not tops & {"tools", "tests", "deploy", "jobsvc_client"}
