"""Which ports `make run` persists in its state dir (tools/devstack/cli.py)."""

from __future__ import annotations

from tools.devstack.cli import DEFAULT_PORTS, _choose_ports


def test_without_replicas_the_same_services_get_ports_as_before():
    assert set(_choose_ports({}, replicas=0)) == set(DEFAULT_PORTS)


def test_a_standby_port_is_chosen_with_replicas_and_kept_through_a_run_without():
    ports = _choose_ports({}, replicas=1)
    assert set(ports) == {*DEFAULT_PORTS, "postgres-standby"}
    assert len(set(ports.values())) == len(ports)
    without = _choose_ports(ports, replicas=0)
    assert without["postgres-standby"] == ports["postgres-standby"]
