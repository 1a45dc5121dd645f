"""Command line of the local stack launcher: `python -m tools.devstack COMMAND`.

run [--shards N] [--replicas N] [--api-port PORT] [--schedulers N] [--executors N]
    [--state-dir DIR]
    The `make run` stack, with its data kept in `.state/`: PostgreSQL (control + N shard
    databases, and with --replicas its synchronous standbys), ZooKeeper, the Apache Kafka
    broker (KRaft), migrations and topics, then the API (gunicorn) and the workers. Prints where
    everything is; restarts a worker that exits; Ctrl-C stops it all.
test [PYTEST ARGS...]
    The `make test` run: a throwaway stack on free ports in a fresh temp dir (two
    PostgreSQL servers, ZooKeeper, Kafka), migrations and topics, then pytest with the
    stack's environment. Exits with pytest's exit code. Every argument goes to pytest.
    JOBSVC_KEEP_TEST_STACK=1 keeps the temp dir (data and logs) for a post-mortem.
bench [ARGS...]
    The benchmark suite (`python -m tools.bench ARGS`) against a throwaway stack.
fetch-kafka
    Fetch the Kafka broker's jars from Maven Central into the cache, unless they are
    there already (`make bootstrap` runs it).
clean-state [--state-dir DIR]
    Delete the `make run` state: all data, logs and secrets.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType

from .apps import app_specs
from .banner import banner
from .errors import LocalStackError, PortInUse, ServerStartError, StateMismatch
from .interrupts import Interrupted, SignalGuard
from .kafka_jars import ensure_kafka_jars
from .management import SETUP_COMMANDS, run_commands
from .polling import poll_until
from .ports import LOOPBACK, free_port, port_is_free
from .probes import http_ok
from .process import reap_leftovers
from .prometheus import start_local_prometheus
from .stack import (
    MANIFEST_FILE,
    TEST_STACK_DIR_ENV,
    Stack,
    build_run_stack,
    build_test_stack,
    new_stack_dir,
    standby_names,
)
from .state import PersistedState, StateDir
from .supervisor import SERVER_STOP_ORDER

logger = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]
DEFAULT_STATE_DIR = REPO / ".state"
DEFAULT_SHARDS = 4
DEFAULT_API_PORT = 8000
DEFAULT_WORKERS = 2  # scheduler processes, and executor processes, in `make run`
# Ports a new state dir tries first (the services' usual ports), else any free port.
DEFAULT_PORTS = {
    "postgres": 54321,
    "zookeeper": 2181,
    "kafka": 9092,
    "kafka-controller": 9093,
    "prometheus": 9090,
}
DEFAULT_STANDBY_PORT = 54322  # the first standby's (with --replicas); the next ones count up
DEFAULT_REPLICAS = 0  # standbys of the PostgreSQL server in `make run`
API_READY_TIMEOUT = 90.0  # seconds from gunicorn's start until GET /healthz answers 200
PYTEST_INTERRUPT_GRACE = 15.0  # seconds pytest gets to finish after a Ctrl-C, then killed
KEEP_TEST_STACK_ENV = "JOBSVC_KEEP_TEST_STACK"
PG_BIN_DIR_ENV = "JOBSVC_PG_BIN_DIR"

EXIT_OK = 0
EXIT_CHILD_DIED = 1  # `run`: a server exited, or an app process is in a crash loop
EXIT_STACK_FAILED = 70  # the stack could not be started (distinct from pytest's codes)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(
        level=os.environ.get("JOBSVC_LOCALSTACK_LOG_LEVEL", "INFO"),
        format="%(asctime)s localstack %(levelname)s %(message)s",
        datefmt="%H:%M:%S",
    )
    if args[:1] == ["test"]:  # not argparse: every later argument belongs to pytest
        return _reporting_errors(lambda: cmd_test(args[1:]))
    if args[:1] == ["bench"]:  # likewise, to the benchmark suite
        return _reporting_errors(lambda: cmd_bench(args[1:]))
    options = _parser().parse_args(args)
    commands: dict[str, Callable[[], int]] = {
        "run": lambda: cmd_run(options),
        "clean-state": lambda: cmd_clean_state(options),
        "fetch-kafka": cmd_fetch_kafka,
    }
    return _reporting_errors(commands[options.command])


def cmd_run(options: argparse.Namespace) -> int:
    """`make run`: start the persistent stack, print the banner, supervise until Ctrl-C."""
    state = StateDir(options.state_dir)
    with state.locked():
        reap_leftovers(state.run_dir, last=SERVER_STOP_ORDER)
        persisted = state.load()
        shards = _resolve_shards(persisted, options.shards, state)
        api_url = f"http://{LOOPBACK}:{options.api_port}"
        if not port_is_free(options.api_port):
            raise PortInUse(
                f"{LOOPBACK}:{options.api_port} is already in use (another `make run`?); "
                f"choose another port: make run ARGS='--api-port 8001'"
            )
        ports = _choose_ports(
            persisted.ports if persisted is not None else {}, replicas=options.replicas
        )
        state.save(PersistedState(shards=shards, ports=ports))
        stack = build_run_stack(
            state, shards=shards, ports=ports, secrets=state.secrets(), replicas=options.replicas
        )
        with SignalGuard() as guard:
            try:
                return _run_until_stopped(
                    stack,
                    state,
                    options,
                    api_url,
                    prometheus_port=ports["prometheus"],
                    guard=guard,
                )
            except Interrupted as exc:
                logger.info("%s received: stopping the stack", exc)
                return EXIT_OK
            finally:
                guard.shield()
                stack.stop()


def _run_until_stopped(
    stack: Stack,
    state: StateDir,
    options: argparse.Namespace,
    api_url: str,
    *,
    prometheus_port: int,
    guard: SignalGuard,
) -> int:
    stack.start()
    state.write_env_file(stack.env)
    run_commands(SETUP_COMMANDS, repo=REPO, env=stack.process_env(), logs_dir=state.logs_dir)
    specs = app_specs(
        repo=REPO,
        api_bind=f"{LOOPBACK}:{options.api_port}",
        control_socket=state.run_dir / "gunicorn.ctl",
        schedulers=options.schedulers,
        executors=options.executors,
    )
    for spec in specs:
        stack.start_app(spec, repo=REPO)
    # Prometheus, when installed, scrapes the processes just started (None: not installed).
    prometheus_url = start_local_prometheus(
        stack, specs, root=state.root / "prometheus", repo=REPO, port=prometheus_port
    )
    _wait_for_api(stack, api_url)
    print(
        banner(
            stack=stack,
            api_url=api_url,
            repo=REPO,
            app_names=[s.name for s in specs],
            prometheus_url=prometheus_url,
        )
    )
    sys.stdout.flush()
    # Workers that exit are restarted; this returns only when the stack must stop.
    failure = stack.supervisor.watch(shielded=guard.deferred)
    if failure is None:  # stopped by someone else; cannot happen while we hold the stack
        return EXIT_OK
    dead = failure.process
    logger.error(
        "\n%s\n%s (pid %s) %s (%s). Last lines of %s:\n%s\nStopping the whole stack.\n%s",
        "!" * 78,
        dead.name,
        dead.pid,
        dead.describe_exit().upper(),
        failure.reason,
        dead.log_path,
        dead.log_tail(),
        "!" * 78,
    )
    return EXIT_CHILD_DIED


def cmd_test(pytest_args: Sequence[str]) -> int:
    """`make test`: throwaway stack, migrations and topics, pytest, teardown."""
    return _in_throwaway_stack("jobsvc-test-", [sys.executable, "-m", "pytest", *pytest_args])


def cmd_bench(bench_args: Sequence[str]) -> int:
    """`make bench`: throwaway stack, then the benchmark suite (`python -m tools.bench`).

    The suite starts the API and worker processes each scenario needs, on this stack.
    """
    return _in_throwaway_stack("jobsvc-bench-", [sys.executable, "-m", "tools.bench", *bench_args])


def _in_throwaway_stack(prefix: str, argv: Sequence[str]) -> int:
    """Run `argv` against a new stack on free ports; tear the stack down in all cases."""
    started = time.monotonic()
    root = new_stack_dir(prefix)
    stack: Stack | None = None
    with SignalGuard() as guard:
        try:
            stack = build_test_stack(root)
            stack.start()
            stack.write_manifest(root / MANIFEST_FILE)
            env = stack.process_env(
                {
                    TEST_STACK_DIR_ENV: str(root),
                    PG_BIN_DIR_ENV: str(stack.postgres[0].bin_dir),
                }
            )
            run_commands(SETUP_COMMANDS, repo=REPO, env=env, logs_dir=stack.logs_dir)
            logger.info("throwaway stack ready in %.1fs (%s)", time.monotonic() - started, root)
            return _run_child(argv, env=env, guard=guard)
        except Interrupted as exc:
            logger.info("%s received: stopping the throwaway stack", exc)
            return 128 + exc.signum
        finally:
            guard.shield()
            if stack is not None:
                stack.stop()
            if os.environ.get(KEEP_TEST_STACK_ENV) == "1":
                logger.info("kept the stack's data and logs in %s", root)
            else:
                shutil.rmtree(root, ignore_errors=True)


def cmd_fetch_kafka() -> int:
    """Fetch the broker's jars into the cache unless they are there (`make bootstrap`)."""
    logger.info("Kafka broker jars in %s", ensure_kafka_jars())
    return EXIT_OK


def cmd_clean_state(options: argparse.Namespace) -> int:
    """Delete the state dir, after stopping anything an earlier launch left running."""
    state = StateDir(options.state_dir)
    if not state.root.exists():
        logger.info("%s does not exist: nothing to delete", state.root)
        return EXIT_OK
    with state.locked():
        reap_leftovers(state.run_dir, last=SERVER_STOP_ORDER)
        shutil.rmtree(state.root)
    logger.info("deleted %s", state.root)
    return EXIT_OK


def _run_child(argv: Sequence[str], *, env: Mapping[str, str], guard: SignalGuard) -> int:
    # The child (pytest, the benchmarks) stays in the launcher's session: a Ctrl-C at the
    # terminal reaches it directly, so it stops the way it always does and prints its
    # summary. The launcher only waits.
    process = subprocess.Popen(list(argv), env=env, cwd=REPO)
    interrupted_at: list[float] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        interrupted_at.append(time.monotonic())
        if signum == signal.SIGTERM:  # sent to the launcher alone: pass it on
            process.send_signal(signal.SIGTERM)

    with guard.redirected(on_signal):
        while True:
            try:
                code = process.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                pass
            if interrupted_at and time.monotonic() - interrupted_at[0] > PYTEST_INTERRUPT_GRACE:
                logger.warning("%s still runs after the interrupt: killing it", argv[2])
                process.kill()
                code = process.wait()
                break
    return 128 - code if code < 0 else code  # killed by signal N: exit 128 + N, as a shell does


def _wait_for_api(stack: Stack, api_url: str) -> None:
    def give_up() -> None:
        exited = stack.supervisor.exited()
        if exited:
            dead = exited[0]
            raise ServerStartError(
                f"{dead.name} exited with code {dead.returncode} while the API was starting; "
                f"last lines of {dead.log_path}:\n{dead.log_tail()}"
            )

    health_url = f"{api_url}/healthz"
    if not poll_until(lambda: http_ok(health_url), timeout=API_READY_TIMEOUT, give_up=give_up):
        raise ServerStartError(
            f"GET {health_url} did not answer 200 within {API_READY_TIMEOUT:.0f}s; "
            f"see {stack.logs_dir / 'api.log'}"
        )


def _resolve_shards(
    persisted: PersistedState | None, requested: int | None, state: StateDir
) -> int:
    if persisted is None:
        return requested if requested is not None else DEFAULT_SHARDS
    if requested is not None and requested != persisted.shards:
        raise StateMismatch(
            f"{state.root} was created with {persisted.shards} shards; it cannot be resumed "
            f"with {requested}. Run without --shards to resume, or delete the state "
            "(`make clean-state`, which deletes all local data) to start over."
        )
    return persisted.shards


def _choose_ports(previous: Mapping[str, int], *, replicas: int) -> dict[str, int]:
    """The persisted ports where still free, else new ones (the caller persists them).

    A standby's port is kept once chosen, also through runs without it.
    """
    defaults = dict(DEFAULT_PORTS)
    for index, name in enumerate(standby_names("postgres", replicas)):
        defaults[name] = DEFAULT_STANDBY_PORT + index
    ports: dict[str, int] = {
        service: port for service, port in previous.items() if service not in defaults
    }
    for service, default in defaults.items():
        before = previous.get(service)
        ports[service] = free_port(preferred=before if before is not None else default)
        if before is not None and ports[service] != before:
            logger.warning("%s: port %d is taken now; using %d", service, before, ports[service])
    return ports


def _reporting_errors(command: Callable[[], int]) -> int:
    try:
        return command()
    except LocalStackError as exc:
        logger.error("%s", exc)
        return EXIT_STACK_FAILED


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.devstack",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = commands.add_parser("run", help="start the local stack (make run)")
    run.add_argument(
        "--shards",
        type=_positive_int,
        default=None,
        help=f"shard databases of a new state dir (default {DEFAULT_SHARDS}); "
        "a resumed state dir keeps its own",
    )
    run.add_argument(
        "--replicas",
        type=_non_negative_int,
        default=DEFAULT_REPLICAS,
        help="synchronous streaming-replication standbys of the PostgreSQL server, cloned "
        f"from it at every start (default {DEFAULT_REPLICAS})",
    )
    run.add_argument(
        "--api-port",
        type=_positive_int,
        default=DEFAULT_API_PORT,
        help=f"API port on {LOOPBACK} (default {DEFAULT_API_PORT}); fails if taken",
    )
    run.add_argument(
        "--schedulers",
        type=_non_negative_int,
        default=DEFAULT_WORKERS,
        help=f"scheduler worker processes, once they exist (default {DEFAULT_WORKERS})",
    )
    run.add_argument(
        "--executors",
        type=_non_negative_int,
        default=DEFAULT_WORKERS,
        help=f"executor worker processes, once they exist (default {DEFAULT_WORKERS})",
    )
    run.add_argument(
        "--state-dir",
        type=Path,
        default=DEFAULT_STATE_DIR,
        help="data, logs and secrets of the stack (default <repo>/.state)",
    )
    commands.add_parser("fetch-kafka", help="fetch the Kafka broker's jars (make bootstrap)")
    commands.add_parser("test", help="run pytest against a throwaway stack (make test)")
    commands.add_parser("bench", help="benchmarks against a throwaway stack (make bench)")
    clean = commands.add_parser("clean-state", help="delete the run state (all local data)")
    clean.add_argument(
        "--state-dir", type=Path, default=DEFAULT_STATE_DIR, help="default <repo>/.state"
    )
    return parser


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {value}")
    return value
