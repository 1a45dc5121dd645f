"""The chaos campaign's partitions (tools/chaos/firewall.py): a cut drops the packets of
one group's processes to and from one port, both ways, and leaves other processes and
ports alone; the heal lets the same connection carry on; the campaign deletes exactly the
rules it added, and those a dead campaign left."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from tools.chaos import firewall, leftovers
from tools.chaos.firewall import Firewall

pytestmark = pytest.mark.skipif(firewall.available() is not None, reason="needs root, iptables")

GROUP = "test"  # the system group jobsvc-chaos-test
ANSWER_TIMEOUT = 2.0  # seconds a client waits for an echo: ample on a loopback
# A client in the firewalled group: sends a line per line on stdin, prints the echo, or
# "timeout" when none comes back within ANSWER_TIMEOUT.
CLIENT = f"""
import socket, sys
conn = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
conn.settimeout({ANSWER_TIMEOUT})
for line in sys.stdin:
    conn.sendall(line.encode())
    try:
        print(conn.recv(100).decode().strip() or "closed", flush=True)
    except TimeoutError:
        print("timeout", flush=True)
"""


@pytest.fixture
def echo_port() -> Iterator[int]:
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=echo, args=(conn,), daemon=True).start()

    def echo(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(100):
                conn.sendall(data)

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1]
    server.close()


@pytest.fixture
def wall() -> Iterator[Firewall]:
    made = Firewall()
    yield made
    made.close()


class Client:
    def __init__(self, port: int, gid: int) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", CLIENT, str(port)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            group=gid,
            extra_groups=[],
        )

    def ask(self, text: str) -> str:
        self.process.stdin.write(text + "\n")
        self.process.stdin.flush()
        return self.process.stdout.readline().strip()

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=10)


def our_rules() -> list[str]:
    listing = [
        subprocess.run(["iptables", "-t", table, "-S"], capture_output=True, text=True).stdout
        for table in ("filter", "mangle")
    ]
    return [line for text in listing for line in text.splitlines() if leftovers.PREFIX in line]


def test_a_cut_hangs_the_groups_connection_and_the_heal_lets_it_carry_on(wall, echo_port):
    gid = firewall.app_group(GROUP)
    wall.mark_connections(gid)
    client = Client(echo_port, gid)
    try:
        assert client.ask("before") == "before"
        wall.cut(gid, echo_port)
        assert client.ask("during") == "timeout"
        wall.heal(gid, echo_port)
        # The held data arrives once TCP retransmits it; the connection was never reset.
        answers = [client.ask(f"after {n}") for n in range(10)]
        assert "during" in "".join(answers) and "closed" not in answers
    finally:
        client.close()


def test_a_cut_leaves_other_processes_alone(wall, echo_port):
    wall.cut(firewall.app_group(GROUP), echo_port)

    with socket.create_connection(("127.0.0.1", echo_port), timeout=ANSWER_TIMEOUT) as conn:
        conn.sendall(b"ours")
        assert conn.recv(100) == b"ours"


def test_close_deletes_exactly_the_rules_it_added(echo_port):
    before = our_rules()
    made = Firewall()
    gid = firewall.app_group(GROUP)
    made.mark_connections(gid)
    made.cut(gid, echo_port)
    assert len(our_rules()) == len(before) + 3

    made.close()

    assert our_rules() == before


def test_the_rules_of_a_campaign_that_died_are_deleted_by_the_next():
    dead = f"{leftovers.PREFIX}pid=999999999,start=1"  # no such process
    rule = ["OUTPUT", "-p", "tcp", "--dport", "9", "-m", "comment", "--comment", dead, "-j", "DROP"]
    subprocess.run(["iptables", "-A", *rule], check=True)
    try:
        Firewall().close()

        assert not [line for line in our_rules() if dead in line]
    finally:
        subprocess.run(["iptables", "-D", *rule], capture_output=True)
