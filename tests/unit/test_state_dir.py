"""The local stack's state dir (`.state/`) is its user's alone (F24): logs and data hold
job messages, and PostgreSQL logs slow statements without their parameters."""

from __future__ import annotations

import os
import stat

import pytest

from tools.devstack.postgres import TUNING
from tools.devstack.state import StateDir


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.skipif(os.geteuid() == 0, reason="as root the postgres group may pass through")
def test_the_state_dir_and_its_logs_are_private_to_their_user(tmp_path):
    state = StateDir(tmp_path / ".state")

    state.create()

    assert mode(state.root) == 0o700
    assert mode(state.logs_dir) == 0o700
    assert mode(state.run_dir) == 0o700


def test_an_existing_open_state_dir_is_closed_again(tmp_path):
    state = StateDir(tmp_path / ".state")
    state.logs_dir.mkdir(parents=True)
    state.logs_dir.chmod(0o755)

    state.create()

    assert mode(state.logs_dir) == 0o700
    assert mode(state.root) & 0o007 == 0  # nothing for other users, root or not


def test_postgres_logs_no_statement_parameters():
    assert TUNING["log_parameter_max_length"] == "0"
