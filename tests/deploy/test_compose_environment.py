"""The environment docker-compose.yml gives the app, against what the app reads.

The app's side is read from the source: every `env_*("JOBSVC_...", default)` call of
jobsvc/settings.py (parsed with `ast`, so a new setting is covered the day it is added),
the variables deploy/gunicorn.conf.py reads, and every `JOBSVC_*` string in the code.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from tests.deploy.support import (
    app_services,
    app_variable_names,
    databases_created_by,
    gunicorn_env_reads,
    interpolate,
    interpolations,
    postgres_services,
    service_env,
    services,
    settings_env_reads,
)

SECRET_SETTINGS = ("JOBSVC_SECRET_KEY", "JOBSVC_JWT_SIGNING_KEY")


def api_service() -> dict:
    return services()["api"]


def test_the_settings_parser_finds_what_settings_py_reads():
    """Guards the parser itself: these are known to be read, with these properties."""
    reads = settings_env_reads()
    assert {name for name, read in reads.items() if read.required} >= set(SECRET_SETTINGS)
    assert reads["JOBSVC_KAFKA_BOOTSTRAP"].defaults_to_loopback
    assert reads["JOBSVC_SHARD_DB_URLS"].defaults_to_loopback
    assert not reads["JOBSVC_KAFKA_JOBS_PARTITIONS"].required
    assert not reads["JOBSVC_ALLOWED_HOSTS"].defaults_to_loopback  # hosts, not addresses
    assert gunicorn_env_reads()["JOBSVC_API_BIND"].defaults_to_loopback


@pytest.mark.parametrize("service", sorted(app_services()))
def test_every_required_setting_is_set(service):
    env = service_env(app_services()[service])
    required = sorted(name for name, read in settings_env_reads().items() if read.required)
    missing = [name for name in required if name not in env]
    assert not missing, f"{service} lacks {missing}: the process would refuse to start"


@pytest.mark.parametrize("service", sorted(app_services()))
def test_every_setting_that_defaults_to_a_local_address_is_set(service):
    """A default like 127.0.0.1:9092 means the container itself, never the server."""
    env = service_env(app_services()[service])
    local = sorted(n for n, read in settings_env_reads().items() if read.defaults_to_loopback)
    missing = [name for name in local if name not in env]
    assert not missing, f"{service} would connect to its own container for {missing}"


def test_the_api_binds_all_interfaces_and_its_gunicorn_settings_are_real():
    env = service_env(api_service())
    local = [n for n, read in gunicorn_env_reads().items() if read.defaults_to_loopback]
    for name in local:
        assert name in env, f"api lacks {name}"
    assert env["JOBSVC_API_BIND"].startswith("0.0.0.0:")


@pytest.mark.parametrize("service", sorted(app_services()))
def test_every_jobsvc_variable_in_compose_is_one_the_app_reads(service):
    """Catches a typo, which the app would silently ignore."""
    known = app_variable_names()
    unknown = sorted(n for n in service_env(app_services()[service]) if n.startswith("JOBSVC_"))
    unknown = [name for name in unknown if name not in known]
    assert not unknown, f"{service} sets {unknown}, which no code reads"


def test_app_secrets_come_from_required_interpolations():
    for name, svc in app_services().items():
        env = service_env(svc)
        for secret in SECRET_SETTINGS:
            (match,) = interpolations(env[secret])
            assert match["name"] == secret and match["op"] == ":?", (name, secret)


def test_workers_have_distinct_ids():
    ids = [service_env(svc).get("JOBSVC_WORKER_ID") for svc in app_services().values()]
    worker_ids = [worker_id for worker_id in ids if worker_id]
    assert len(worker_ids) == len(set(worker_ids))
    assert len(worker_ids) >= 4


def test_api_allowed_hosts_include_how_prometheus_and_the_health_check_call_it():
    hosts = service_env(api_service())["JOBSVC_ALLOWED_HOSTS"].split(",")
    assert {"api", "127.0.0.1"} <= {host.strip() for host in hosts}


# ---- databases --------------------------------------------------------------------------------


def _urls(service: str) -> tuple[str, list[str]]:
    env = service_env(app_services()[service])
    values = {m["name"]: "pw" for m in interpolations(env)}
    control = interpolate(env["JOBSVC_CONTROL_DB_URL"], values)
    shards = [u.strip() for u in interpolate(env["JOBSVC_SHARD_DB_URLS"], values).split(",")]
    return control, [url for url in shards if url]


@pytest.mark.parametrize("service", sorted(app_services()))
def test_every_database_url_names_a_database_its_server_creates(service):
    control, shards = _urls(service)
    created = {name: databases_created_by(svc) for name, svc in postgres_services().items()}
    for url in [control, *shards]:
        parts = urlsplit(url)
        assert parts.hostname in created, f"{url}: no postgres service {parts.hostname}"
        database = parts.path.lstrip("/")
        assert database in created[parts.hostname], f"{parts.hostname} never creates {database}"


def test_shards_live_on_at_least_two_servers_apart_from_the_control_database():
    control, shards = _urls("api")
    shard_hosts = {urlsplit(url).hostname for url in shards}
    assert len(shard_hosts) >= 2
    assert urlsplit(control).hostname not in shard_hosts
    assert len(shards) == len(set(shards)), "each shard is its own database"


def _database(url: str) -> tuple[str | None, int | None, str]:
    parts = urlsplit(url)
    return parts.hostname, parts.port, parts.path


def test_every_app_service_sees_the_same_shards():
    """Shard i must be the same database for every process, or jobs get lost (the role
    connecting to it may differ: migrate connects as the owner)."""
    layouts = {
        service: (_database(control), tuple(map(_database, shards)))
        for service, (control, shards) in ((s, _urls(s)) for s in app_services())
    }
    assert len(set(layouts.values())) == 1
