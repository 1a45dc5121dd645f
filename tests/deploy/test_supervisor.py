"""`make run` keeps going when a worker dies (tools/devstack/supervisor.py).

Real child processes (small Python programs) stand in for the workers: the supervisor
restarts one that exits or is killed, gives up on a crash loop, stops the stack when a
server exits, and never starts anything once the stack is stopping.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deploy.support import REPO
from tests.waiting import wait_until
from tools.devstack.apps import app_specs
from tools.devstack.interrupts import Interrupted, SignalGuard
from tools.devstack.ports import LOOPBACK, free_port
from tools.devstack.probes import http_ok
from tools.devstack.process import ManagedProcess
from tools.devstack.restarts import RestartPolicy
from tools.devstack.server import Server
from tools.devstack.supervisor import StackFailure, Supervisor

WATCH_INTERVAL = 0.02  # seconds: the test's supervisor looks often
TIMEOUT = 10.0  # seconds for a child to start, exit or be restarted
API_TIMEOUT = 60.0  # seconds for gunicorn to answer /healthz (a loaded 2-core machine)
SLEEP_FOREVER = "import time; print('up', flush=True); time.sleep(600)"
START_LINE = "=== "  # ManagedProcess writes one such line to the log per start


def fast_policy(*, delay: float = 0.05, crash_loop_exits: int = 3) -> RestartPolicy:
    return RestartPolicy(first_delay=delay, max_delay=delay, crash_loop_exits=crash_loop_exits)


class Watching:
    """A supervisor watching from a background thread, as `make run` does from its main one."""

    def __init__(self, supervisor: Supervisor) -> None:
        self.supervisor = supervisor
        self.result: list[StackFailure | None] = []
        self.thread = threading.Thread(
            target=lambda: self.result.append(supervisor.watch(interval=WATCH_INTERVAL)),
            daemon=True,
        )
        self.thread.start()

    def returned(self) -> StackFailure | None:
        self.thread.join(TIMEOUT)
        assert not self.thread.is_alive(), "watch did not return"
        return self.result[0]


@pytest.fixture
def supervisors() -> Iterator[list[Supervisor]]:
    """Supervisors a test made; every process they hold is stopped afterwards."""
    made: list[Supervisor] = []
    yield made
    for supervisor in made:
        supervisor.stop()


def start_child(supervisor: Supervisor, tmp_path: Path, code: str, name: str = "worker"):
    return supervisor.start_app(
        name=name,
        argv=[sys.executable, "-c", code],
        env=dict(os.environ),
        cwd=tmp_path,
        log_path=tmp_path / f"{name}.log",
        pid_file=tmp_path / f"{name}.pid",
    )


def starts_in_log(tmp_path: Path, name: str = "worker") -> int:
    lines = (tmp_path / f"{name}.log").read_text().splitlines()
    return sum(line.startswith(START_LINE) for line in lines)


def test_a_killed_worker_is_restarted_with_a_loud_log_line(supervisors, tmp_path, caplog):
    supervisor = Supervisor(restarts=fast_policy())
    supervisors.append(supervisor)
    first = start_child(supervisor, tmp_path, SLEEP_FOREVER)
    watching = Watching(supervisor)
    caplog.set_level(logging.WARNING, logger="tools.devstack.supervisor")

    os.kill(first.pid, signal.SIGKILL)

    def restarted() -> bool:
        current = supervisor.apps[0]
        return current is not first and current.is_running()

    wait_until(restarted, timeout=TIMEOUT, what="the killed worker runs again")
    # "up" is in the log since the first start: wait for the second start and its pid file.
    wait_until(
        lambda: starts_in_log(tmp_path) == 2 and (tmp_path / "worker.pid").exists(),
        timeout=TIMEOUT,
        what="the second start, with its pid file",
    )
    announced = caplog.text
    assert f"worker (pid {first.pid}) was killed by SIGKILL: restart 1 in 0.1 s" in announced
    assert "3 exits within 60 s stop the stack" in announced
    # The restart is announced once the new process is registered: a moment after it runs.
    wait_until(
        lambda: f"restarted worker (pid {supervisor.apps[0].pid})" in caplog.text,
        timeout=TIMEOUT,
        what="the restart is logged",
    )

    supervisor.stop()
    assert watching.returned() is None
    assert not supervisor.apps[0].is_running()


def test_the_api_killed_with_sigkill_serves_again_on_its_port(supervisors, tmp_path):
    # The real `make run` API process: gunicorn's master dies, its workers (same process
    # group) are killed with it, and the restarted master binds the same port.
    api_bind = f"{LOOPBACK}:{free_port()}"
    (spec,) = app_specs(
        repo=REPO,
        api_bind=api_bind,
        control_socket=tmp_path / "gunicorn.ctl",
        schedulers=0,
        executors=0,
    )
    supervisor = Supervisor(restarts=fast_policy())
    supervisors.append(supervisor)
    first = supervisor.start_app(
        name=spec.name,
        argv=spec.argv,
        env={**os.environ, **spec.env, "JOBSVC_API_WORKERS": "1"},
        cwd=REPO,
        log_path=tmp_path / "api.log",
    )
    health = f"http://{api_bind}/healthz"
    wait_until(lambda: http_ok(health), timeout=API_TIMEOUT, what="the API answers")
    watching = Watching(supervisor)

    os.kill(first.pid, signal.SIGKILL)

    wait_until(lambda: supervisor.apps[0] is not first, timeout=TIMEOUT, what="restarted")
    wait_until(lambda: http_ok(health), timeout=API_TIMEOUT, what="the API answers again")
    assert supervisor.apps[0].is_running()
    supervisor.stop()
    assert watching.returned() is None


def test_a_worker_that_keeps_exiting_stops_the_stack_as_a_crash_loop(supervisors, tmp_path):
    supervisor = Supervisor(restarts=fast_policy(crash_loop_exits=3))
    supervisors.append(supervisor)
    start_child(supervisor, tmp_path, "import sys; sys.exit(3)")

    failure = supervisor.watch(interval=WATCH_INTERVAL)

    assert failure is not None
    assert failure.reason == "crash loop: 3 exits within 60 s"
    assert failure.process.name == "worker"
    assert failure.process.describe_exit() == "exited with code 3"
    assert starts_in_log(tmp_path) == 3  # started once, restarted twice, then given up
    assert not (tmp_path / "worker.pid").exists()


def test_what_an_exited_worker_left_in_its_process_group_is_killed(supervisors, tmp_path):
    # Like a gunicorn master killed with -9: its workers would keep the port.
    grandchild_pid_file = tmp_path / "grandchild.pid"
    code = (
        "import os, subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        # Written whole, then renamed: the test must never read a file created but empty.
        f"open({str(grandchild_pid_file)!r} + '.tmp', 'w').write(str(child.pid))\n"
        f"os.replace({str(grandchild_pid_file)!r} + '.tmp', {str(grandchild_pid_file)!r})\n"
        "time.sleep(600)\n"
    )
    supervisor = Supervisor(restarts=fast_policy(delay=30.0))
    supervisors.append(supervisor)
    parent = start_child(supervisor, tmp_path, code)
    wait_until(grandchild_pid_file.exists, timeout=TIMEOUT, what="the grandchild started")
    grandchild = int(grandchild_pid_file.read_text())
    watching = Watching(supervisor)

    os.kill(parent.pid, signal.SIGKILL)

    wait_until(lambda: not _alive(grandchild), timeout=TIMEOUT, what="the grandchild is gone")
    supervisor.stop()
    assert watching.returned() is None


def test_no_restart_happens_once_the_stack_is_stopping(supervisors, tmp_path, caplog):
    supervisor = Supervisor(restarts=fast_policy(delay=30.0))
    supervisors.append(supervisor)
    first = start_child(supervisor, tmp_path, SLEEP_FOREVER)
    watching = Watching(supervisor)
    caplog.set_level(logging.WARNING, logger="tools.devstack.supervisor")
    os.kill(first.pid, signal.SIGKILL)
    wait_until(lambda: "restart 1 in 30.0 s" in caplog.text, timeout=TIMEOUT, what="exit seen")

    supervisor.stop()

    assert watching.returned() is None
    assert supervisor.apps == (first,)
    assert starts_in_log(tmp_path) == 1
    with pytest.raises(RuntimeError, match="stopping"):
        start_child(supervisor, tmp_path, SLEEP_FOREVER, name="late")


class SleepingServer(Server):
    """A stand-in server process (the supervisor only sees that its process runs)."""

    kind = "kafka"
    ready_timeout = TIMEOUT

    def _argv(self) -> list[str]:
        return [sys.executable, "-c", SLEEP_FOREVER]

    def _is_ready(self) -> bool:
        return True


def test_a_server_that_exits_stops_the_stack_without_a_restart(supervisors, tmp_path):
    supervisor = Supervisor(restarts=fast_policy())
    supervisors.append(supervisor)
    server = SleepingServer(root=tmp_path / "server", port=1)
    supervisor.add_server(server)
    server.start()
    start_child(supervisor, tmp_path, SLEEP_FOREVER)

    os.kill(server.pid, signal.SIGKILL)
    failure = supervisor.watch(interval=WATCH_INTERVAL)

    assert failure is not None
    assert failure.process is server.process
    assert failure.reason == "servers are not restarted"
    assert failure.process.describe_exit() == "was killed by SIGKILL"
    assert supervisor.apps[0].is_running()  # the launcher stops the rest, in order


def test_a_signal_during_a_deferred_step_interrupts_only_after_it():
    steps: list[str] = []
    with SignalGuard() as guard, pytest.raises(Interrupted) as interrupted:
        with guard.deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            steps.append("registered")  # the step ran to its end despite the signal
        steps.append("after")
    assert steps == ["registered"]
    assert interrupted.value.signum == signal.SIGTERM


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_managed_process_describes_how_it_ended(tmp_path):
    process = ManagedProcess(
        name="p",
        argv=[sys.executable, "-c", "import os; os.kill(os.getpid(), 15)"],
        log_path=tmp_path / "p.log",
    )
    process.start()
    process.wait(TIMEOUT)
    assert process.describe_exit() == "was killed by SIGTERM"
    process.release()
