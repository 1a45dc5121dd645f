"""docker-compose.yml, validated without a Docker engine.

1. Against the Compose Specification's JSON schema. `compose_spec.json` beside this file is
   a verbatim copy of the schema that Debian's `docker-compose` 1.29.2 package ships
   (/usr/lib/python3/dist-packages/compose/config/compose_spec.json; Compose
   Specification, Apache License 2.0): the schema cannot be downloaded here, and a copy
   keeps the test independent of that package.
2. Structurally: the topology the product needs, health checks, start-up order, pinned
   images, and that the files it mounts exist.
3. With `docker-compose config` (v1) when that tool is installed: it interpolates and
   resolves the whole file as Compose would.

The environment the app services get is checked in test_compose_environment.py.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest

from tests.deploy.support import (
    COMPOSE_ENV_EXAMPLE,
    COMPOSE_FILE,
    REPO,
    app_services,
    bind_mounts,
    compose,
    databases_created_by,
    interpolations,
    postgres_services,
    service_command,
    service_env,
    services,
    services_running,
)

SCHEMA_FILE = Path(__file__).with_name("compose_spec.json")
ONE_SHOT = "no"  # the `restart` policy of a job that runs once and exits
# A version tag: at least major.minor, optionally suffixes ("16.4-bookworm", "v2.54.1",
# "3.11.14-slim-bookworm").
PINNED_TAG = re.compile(r"^v?\d+\.\d+(\.\d+)?([-.][A-Za-z0-9.]+)*$")


# ---- schema ---------------------------------------------------------------------------------


def test_compose_file_is_valid_against_the_compose_spec_schema():
    schema = json.loads(SCHEMA_FILE.read_text())
    jsonschema.Draft201909Validator.check_schema(schema)
    errors = sorted(
        jsonschema.Draft201909Validator(schema).iter_errors(compose()), key=lambda e: e.path
    )
    assert not errors, "\n".join(
        f"{'/'.join(map(str, error.path)) or '(top)'}: {error.message}" for error in errors
    )


def test_schema_check_catches_a_misspelt_key():
    """The schema is strict enough to matter: an unknown service key is an error."""
    schema = json.loads(SCHEMA_FILE.read_text())
    broken = json.loads(json.dumps(compose()))
    broken["services"]["api"]["helthcheck"] = broken["services"]["api"].pop("healthcheck")
    assert list(jsonschema.Draft201909Validator(schema).iter_errors(broken))


# ---- topology -------------------------------------------------------------------------------


def test_every_part_of_the_production_topology_is_a_service():
    names = set(services())
    assert {"zookeeper", "migrate", "api", "prometheus", "grafana"} <= names
    assert len(kafka_services()) >= 3, "a Kafka cluster that survives a node's loss"
    assert len(postgres_services()) >= 3, "a control database server and two shard servers"
    assert len(services_running("run_scheduler")) >= 2
    assert len(services_running("run_executor")) >= 2


def kafka_services() -> list[str]:
    """The brokers (kafka-setup runs the same image once, to create users and ACLs)."""
    return [
        name
        for name, svc in services().items()
        if svc["image"].startswith("apache/kafka:") and "KAFKA_NODE_ID" in service_env(svc)
    ]


def test_kafka_is_a_kraft_quorum_of_every_broker_with_topic_auto_creation_off():
    brokers = kafka_services()
    voters = {f"{service_env(services()[name])['KAFKA_NODE_ID']}@{name}:9093" for name in brokers}
    for name in brokers:
        env = service_env(services()[name])
        assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false", name
        assert env["KAFKA_PROCESS_ROLES"] == "broker,controller", name
        assert set(env["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(",")) == voters, name
    assert len({service_env(services()[name])["CLUSTER_ID"] for name in brokers}) == 1


def test_every_topic_is_on_three_brokers_and_a_write_needs_two():
    for name in kafka_services():
        env = service_env(services()[name])
        assert env["KAFKA_DEFAULT_REPLICATION_FACTOR"] == "3", name
        assert env["KAFKA_MIN_INSYNC_REPLICAS"] == "2", name
        assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "3", name
        assert env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == "2", name
        assert env["KAFKA_UNCLEAN_LEADER_ELECTION_ENABLE"] == "false", name
    for name, svc in app_services().items():
        env = service_env(svc)
        assert env["JOBSVC_KAFKA_REPLICATION_FACTOR"] == "3", name
        assert env["JOBSVC_KAFKA_MIN_INSYNC_REPLICAS"] == "2", name
        assert set(env["JOBSVC_KAFKA_BOOTSTRAP"].split(",")) == {
            f"{broker}:9092" for broker in kafka_services()
        }, name


def test_zookeeper_is_the_official_image():
    assert services()["zookeeper"]["image"].startswith("zookeeper:")


def test_migrate_applies_every_schema_and_creates_the_topics_once():
    migrate = services()["migrate"]
    command = service_command(migrate)
    assert "migrate_all" in command and "ensure_topics" in command
    assert command.index("migrate_all") < command.index("ensure_topics")
    assert migrate["restart"] == ONE_SHOT


def test_every_app_service_runs_the_one_image():
    images = {svc["image"] for svc in app_services().values()}
    builds = {json.dumps(svc["build"], sort_keys=True) for svc in app_services().values()}
    assert len(images) == 1 and len(builds) == 1
    build = next(iter(app_services().values()))["build"]
    assert build["context"] == "." and build.get("dockerfile", "Dockerfile") == "Dockerfile"


def test_the_api_runs_the_images_default_command_behind_the_proxy_only():
    api = services()["api"]
    assert "command" not in api, "the Dockerfile's CMD is the API"
    assert "ports" not in api, "the TLS proxy is the way in"
    assert "8000" in [str(port) for port in api["expose"]]


# ---- health and start-up order --------------------------------------------------------------


def test_every_long_running_service_has_a_health_check():
    for name, svc in services().items():
        if svc.get("restart") == ONE_SHOT:
            continue
        check = svc.get("healthcheck")
        assert check, f"{name} has no healthcheck"
        assert not check.get("disable") and check["test"] not in (["NONE"], "NONE"), name
        assert {"interval", "timeout", "retries"} <= set(check), name


def test_depends_on_waits_for_health_or_completion():
    for name, svc in services().items():
        depends_on = svc.get("depends_on") or {}
        assert isinstance(depends_on, dict), f"{name}: depends_on needs conditions"
        for dependency, spec in depends_on.items():
            target = services()[dependency]
            condition = spec["condition"]
            if condition == "service_healthy":
                assert target.get("healthcheck"), f"{name} waits for {dependency}'s health"
            elif condition == "service_completed_successfully":
                assert target.get("restart") == ONE_SHOT, f"{dependency} must run once"
            else:
                pytest.fail(f"{name} -> {dependency}: condition {condition!r} orders nothing")


def test_app_services_start_after_the_schema_and_topics_exist():
    for name in app_services():
        if name == "migrate":
            continue
        condition = services()[name]["depends_on"]["migrate"]["condition"]
        assert condition == "service_completed_successfully", name


def test_migrate_waits_for_every_database_server_and_kafka():
    depends_on = services()["migrate"]["depends_on"]
    for server in [*postgres_services(), *kafka_services()]:
        assert depends_on[server]["condition"] == "service_healthy", server


def test_workers_wait_for_the_servers_they_use():
    needs = {
        "run_scheduler": ("zookeeper", *kafka_services()),
        "run_executor": tuple(kafka_services()),
    }
    for command, servers in needs.items():
        for name in services_running(command):
            depends_on = services()[name]["depends_on"]
            for server in servers:
                assert depends_on[server]["condition"] == "service_healthy", (name, server)


def test_start_up_order_has_no_cycle():
    order: list[str] = []
    visiting: set[str] = set()

    def visit(name: str) -> None:
        if name in order:
            return
        assert name not in visiting, f"dependency cycle through {name}"
        visiting.add(name)
        for dependency in services()[name].get("depends_on") or {}:
            visit(dependency)
        visiting.discard(name)
        order.append(name)

    for name in services():
        visit(name)


# ---- images, ports, files -------------------------------------------------------------------


def test_every_image_is_pinned_to_a_version():
    for name, svc in services().items():
        if "build" in svc:
            continue  # our own image, built from the Dockerfile
        image = svc["image"]
        assert "@sha256:" in image or ":" in image.rsplit("/", 1)[-1], f"{name}: {image}"
        tag = image.split("@")[0].rsplit(":", 1)[1]
        assert tag != "latest" and PINNED_TAG.match(tag), f"{name}: {image} is not pinned"


def test_published_host_ports_are_distinct():
    published = []
    for svc in services().values():
        for port in svc.get("ports") or []:
            host_part = str(port).rsplit(":", 1)[0]
            published.append(host_part)
    assert len(published) == len(set(published)), published


def test_prometheus_is_published_on_loopback_only():
    """Prometheus has no authentication."""
    for port in services()["prometheus"]["ports"]:
        assert str(port).startswith("127.0.0.1:"), port


def test_every_bind_mounted_file_exists_in_the_repo():
    for name, svc in services().items():
        for source, _target in bind_mounts(svc):
            assert (REPO / source).exists(), f"{name} mounts missing {source}"


def test_database_servers_create_the_databases_their_health_check_names():
    for name, svc in postgres_services().items():
        databases = databases_created_by(svc)
        check = svc["healthcheck"]["test"]
        assert check[check.index("-d") + 1] in databases, name


def test_secrets_have_no_default_in_the_compose_file():
    """Each secret is `${NAME:?message}`: unset, compose refuses to start."""
    for match in interpolations(compose()):
        if re.search(r"PASSWORD|SECRET|SIGNING_KEY", match["name"]):
            assert match["op"] == ":?", f"${{{match['name']}}} needs :? and no default"


def test_every_interpolated_variable_is_documented_in_the_env_example():
    documented = set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]*)=", COMPOSE_ENV_EXAMPLE.read_text(), re.M))
    used = {match["name"] for match in interpolations(compose())}
    assert not used - documented, f"add to {COMPOSE_ENV_EXAMPLE.name}: {sorted(used - documented)}"


def test_the_env_example_leaves_every_required_value_empty():
    """The example must never carry a usable secret."""
    required = {m["name"] for m in interpolations(compose()) if m["op"] == ":?"}
    values = dict(re.findall(r"^([A-Z][A-Z0-9_]*)=(.*)$", COMPOSE_ENV_EXAMPLE.read_text(), re.M))
    for name in required:
        assert values.get(name, "") == "", f"{name} has a value in the example"


# ---- docker-compose v1, when installed --------------------------------------------------------


def test_docker_compose_config_accepts_the_file(tmp_path):
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.skip("docker-compose (v1) is not installed; the schema test above still ran")
    required = sorted({m["name"] for m in interpolations(compose()) if m["op"] == ":?"})
    env_file = tmp_path / "compose.env"
    env_file.write_text("".join(f"{name}=test-{name.lower()}-0123456789\n" for name in required))
    result = subprocess.run(
        [binary, "--file", str(COMPOSE_FILE), "--env-file", str(env_file), "config", "--quiet"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
