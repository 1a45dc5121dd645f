"""JOBSVC_METRICS_ALLOWED_NETWORKS and other network lists read from the environment."""

from __future__ import annotations

from ipaddress import ip_network

import pytest

from jobsvc.env import ConfigError, env_networks


def test_networks_and_bare_addresses_are_read(monkeypatch):
    monkeypatch.setenv("NETS", " 10.0.0.0/8 , 192.0.2.1,2001:db8::/32")

    assert env_networks("NETS", "") == [
        ip_network("10.0.0.0/8"),
        ip_network("192.0.2.1/32"),
        ip_network("2001:db8::/32"),
    ]


def test_host_bits_are_allowed_and_dropped(monkeypatch):
    monkeypatch.setenv("NETS", "10.1.2.3/8")

    assert env_networks("NETS", "") == [ip_network("10.0.0.0/8")]


def test_the_default_applies_when_unset(monkeypatch):
    monkeypatch.delenv("NETS", raising=False)

    assert env_networks("NETS", "127.0.0.0/8") == [ip_network("127.0.0.0/8")]


@pytest.mark.parametrize("value", ["10.0.0.0/33", "localhost", "10.0.0.0/8;"])
def test_a_value_that_is_not_a_network_is_a_config_error_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv("NETS", value)

    with pytest.raises(ConfigError, match="NETS"):
        env_networks("NETS", "")
