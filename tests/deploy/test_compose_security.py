"""docker-compose.yml's security, without a Docker engine (docs/security.md, F9, F10, F19):
who each process is towards PostgreSQL, Kafka and ZooKeeper, what is published where,
and TLS in front of the API."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import pytest

from tests.deploy.support import (
    REPO,
    app_services,
    interpolate,
    interpolations,
    postgres_services,
    service_env,
    services,
    services_running,
    settings_env_reads,
)

ROLES_SCRIPT = REPO / "deploy" / "postgres" / "10-roles.sh"
PRIVILEGES_SCRIPT = REPO / "deploy" / "postgres" / "30-privileges.sh"
KAFKA_SETUP = REPO / "deploy" / "kafka" / "setup.sh"
ZOOKEEPER_START = REPO / "deploy" / "zookeeper" / "start.sh"
CADDYFILE = REPO / "deploy" / "caddy" / "Caddyfile"
APP_ROLE, OWNER_ROLE = "jobsvc_app", "jobsvc_owner"


def running_app() -> dict[str, dict]:
    """The long-running app services (not the one-shot migrate)."""
    return {name: svc for name, svc in app_services().items() if name != "migrate"}


def database_users(service: str) -> set[str]:
    env = service_env(app_services()[service])
    values = {match["name"]: "pw" for match in interpolations(env)}
    urls = [interpolate(env["JOBSVC_CONTROL_DB_URL"], values)]
    urls += interpolate(env["JOBSVC_SHARD_DB_URLS"], values).split(",")
    return {urlsplit(url.strip()).username for url in urls if url.strip()}


def required_secret(value: str) -> str:
    """The variable a value interpolates with ${NAME:?...}; fails on anything else."""
    (match,) = interpolations(value)
    assert match["op"] == ":?", value
    return match["name"]


# ---- PostgreSQL: a least-privilege application role; migrations as the owner ---------------


@pytest.mark.parametrize("service", sorted(running_app()))
def test_the_app_connects_to_every_database_as_the_application_role(service):
    assert database_users(service) == {APP_ROLE}


def test_migrations_run_as_the_owner_role():
    assert database_users("migrate") == {OWNER_ROLE}


def test_neither_role_is_a_superuser_nor_may_create_roles_or_databases():
    script = ROLES_SCRIPT.read_text()
    for role in (APP_ROLE, OWNER_ROLE):
        (statement,) = re.findall(rf"CREATE ROLE {role}\b[^;]*;", script)
        assert {"NOSUPERUSER", "NOCREATEDB", "NOCREATEROLE"} <= set(statement.split()), role


def test_the_application_role_may_touch_rows_only():
    script = PRIVILEGES_SCRIPT.read_text()
    grants = re.findall(r"GRANT ([A-Z, ]+) ON (\w+)[^;]*TO ([\w, ]+);", script)
    to_app = {(what.strip(), on) for what, on, to in grants if APP_ROLE in to}
    assert to_app == {
        ("CONNECT", "DATABASE"),
        ("USAGE", "SCHEMA"),
        ("SELECT, INSERT, UPDATE, DELETE", "TABLES"),
        ("USAGE, SELECT, UPDATE", "SEQUENCES"),
    }
    assert "ALTER SCHEMA public OWNER TO jobsvc_owner" in script
    assert "REVOKE ALL ON SCHEMA public FROM PUBLIC" in script


def test_every_database_server_runs_the_role_and_privilege_scripts_around_its_databases():
    for name, svc in postgres_services().items():
        targets = {target: source for source, target in _mounts(svc)}
        scripts = sorted(t for t in targets if t.startswith("/docker-entrypoint-initdb.d/"))
        in_order = [targets[t] for t in scripts]
        assert in_order[0] == "./deploy/postgres/10-roles.sh", name
        assert in_order[-1] == "./deploy/postgres/30-privileges.sh", name
        sql = [targets[t] for t in scripts if t.endswith(".sql")]
        assert sql and all("OWNER jobsvc_owner" in (REPO / s).read_text() for s in sql), (
            f"{name}: databases must belong to the owner role"
        )
        env = service_env(svc)
        assert env.get("POSTGRES_USER", "postgres") not in (APP_ROLE, OWNER_ROLE), name


def _mounts(svc: dict) -> list[tuple[str, str]]:
    return [tuple(v.split(":")[:2]) for v in svc.get("volumes", []) if v.startswith("./")]


# ---- Kafka: SASL/SCRAM on every client connection, ACLs, a user per kind of process -------


def kafka_brokers() -> dict[str, dict]:
    return {name: svc for name, svc in services().items() if "KAFKA_NODE_ID" in service_env(svc)}


def test_every_broker_listener_asks_for_a_login_and_acls_decide():
    for name, svc in kafka_brokers().items():
        env = service_env(svc)
        protocols = dict(
            pair.split(":") for pair in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(",")
        )
        listeners = [item.split(":")[0] for item in env["KAFKA_LISTENERS"].split(",")]
        assert all(protocols[listener].startswith("SASL_") for listener in listeners), name
        assert env["KAFKA_LISTENER_NAME_CLIENT_SASL_ENABLED_MECHANISMS"] == "SCRAM-SHA-512"
        assert env["KAFKA_AUTHORIZER_CLASS_NAME"].endswith("StandardAuthorizer"), name
        assert env["KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND"] == "false", name
        assert env["KAFKA_SUPER_USERS"] == "User:admin", name
        advertised = env["KAFKA_ADVERTISED_LISTENERS"]
        assert f"CLIENT://{name}:9092" in advertised, name


@pytest.mark.parametrize("service", sorted(app_services()))
def test_every_app_process_logs_in_to_kafka_with_scram(service):
    env = service_env(app_services()[service])
    assert env["JOBSVC_KAFKA_SECURITY_PROTOCOL"] == "SASL_PLAINTEXT"
    assert env["JOBSVC_KAFKA_SASL_MECHANISM"] == "SCRAM-SHA-512"
    assert env["JOBSVC_KAFKA_SASL_USERNAME"]
    required_secret(env["JOBSVC_KAFKA_SASL_PASSWORD"])


def test_each_kind_of_process_is_a_kafka_user_of_its_own_that_setup_creates():
    kinds = {
        "run_scheduler": "jobsvc-scheduler",
        "run_executor": "jobsvc-executor",
    }
    for command, user in kinds.items():
        for name in services_running(command):
            assert service_env(services()[name])["JOBSVC_KAFKA_SASL_USERNAME"] == user, name
    assert service_env(services()["api"])["JOBSVC_KAFKA_SASL_USERNAME"] == "jobsvc-api"
    setup = KAFKA_SETUP.read_text()
    for user in ("admin", "jobsvc-scheduler", "jobsvc-executor", "jobsvc-api"):
        assert re.search(rf"^user {user} ", setup, re.M), user


def test_only_schedulers_and_executors_may_write_the_jobs_and_dead_letter_topics():
    setup = KAFKA_SETUP.read_text()
    writes = [line for line in setup.splitlines() if "--operation Write" in line]
    assert all(
        line.startswith("  allow jobsvc-") or line.startswith("allow jobsvc-") for line in writes
    )
    writers = {line.split()[1] for line in writes}
    assert writers == {"jobsvc-scheduler", "jobsvc-executor"}
    assert not re.search(r"allow jobsvc-api .*--operation (Write|Read|Create|Alter)", setup)


def test_users_and_acls_exist_before_the_topics_are_created():
    setup = services()["kafka-setup"]
    assert setup["restart"] == "no"
    assert services()["migrate"]["depends_on"]["kafka-setup"]["condition"] == (
        "service_completed_successfully"
    )
    for broker in kafka_brokers():
        assert setup["depends_on"][broker]["condition"] == "service_healthy"


# ---- ZooKeeper: SASL required, the workers' znodes their user's --------------------------


def test_zookeeper_refuses_sessions_without_a_sasl_login():
    zookeeper = services()["zookeeper"]
    extra = service_env(zookeeper)["ZOO_CFG_EXTRA"].split()
    assert "enforce.auth.enabled=true" in extra
    assert "enforce.auth.schemes=sasl" in extra
    assert any(e.startswith("authProvider.sasl=") and "SASL" in e for e in extra)
    assert "java.security.auth.login.config" in service_env(zookeeper)["SERVER_JVMFLAGS"]
    assert 'user_jobsvc="${ZOOKEEPER_JOBSVC_PASSWORD}"' in ZOOKEEPER_START.read_text()


@pytest.mark.parametrize("service", sorted(app_services()))
def test_every_app_process_logs_in_to_zookeeper(service):
    env = service_env(app_services()[service])
    assert env["JOBSVC_ZK_SASL_USERNAME"] == "jobsvc"
    assert required_secret(env["JOBSVC_ZK_SASL_PASSWORD"]) == "ZOOKEEPER_JOBSVC_PASSWORD"


# ---- What is published where; TLS in front of the API ------------------------------------


def published(service: str) -> list[str]:
    return [str(port) for port in services()[service].get("ports") or []]


def test_only_the_tls_proxy_is_published_on_every_interface():
    for name in services():
        for port in published(name):
            if name == "proxy":
                assert port.split(":")[-1] in {"443", "80"}, port
            else:
                assert port.startswith("127.0.0.1:"), f"{name} publishes {port} everywhere"


def test_grafana_is_published_on_loopback_only():
    assert published("grafana") and all(p.startswith("127.0.0.1:") for p in published("grafana"))


def test_the_proxy_forwards_to_the_api_and_keeps_metrics_inside():
    caddyfile = CADDYFILE.read_text()
    assert "reverse_proxy api:8000" in caddyfile
    assert re.search(r"respond /metrics 404", caddyfile)
    assert ("./deploy/caddy/Caddyfile", "/etc/caddy/Caddyfile") in _mounts(services()["proxy"])


def test_the_api_trusts_the_proxy_and_marks_its_cookies_secure():
    env = service_env(services()["api"])
    assert env["JOBSVC_NUM_PROXIES"] == "1"
    assert env["JOBSVC_BEHIND_TLS_PROXY"] == "true"
    assert env["JOBSVC_SECURE_COOKIES"] == "true"
    assert "31536000" in env["JOBSVC_SECURE_HSTS_SECONDS"]
    assert env["JOBSVC_CSRF_TRUSTED_ORIGINS"].startswith("https://")


# ---- Worker endpoints (F19) ----------------------------------------------------------------


def test_worker_endpoints_listen_on_loopback_unless_configured():
    assert settings_env_reads()["JOBSVC_WORKER_METRICS_BIND"].default == "'127.0.0.1'"


@pytest.mark.parametrize(
    "service", services_running("run_scheduler") + services_running("run_executor")
)
def test_compose_workers_listen_for_prometheus_on_the_compose_network(service):
    assert service_env(services()[service])["JOBSVC_WORKER_METRICS_BIND"] == "0.0.0.0"
