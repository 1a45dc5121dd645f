"""How every Kafka client of the app authenticates to the brokers, and how its long-lived
clients treat a connection that stopped answering: one place for both.

From the settings (JOBSVC_KAFKA_SECURITY_PROTOCOL, JOBSVC_KAFKA_SASL_*), as librdkafka
configuration that each producer, consumer and admin client adds to its own. Without
settings it is PLAINTEXT and empty, as the local stack runs; docker-compose.yml runs the
brokers with SASL/SCRAM and ACLs and gives each kind of process a user of its own.
"""

from __future__ import annotations


def kafka_security_config() -> dict[str, str]:
    """The librdkafka settings of this process's identity towards the brokers."""
    from django.conf import settings

    config = {"security.protocol": settings.KAFKA_SECURITY_PROTOCOL}
    if settings.KAFKA_SECURITY_PROTOCOL.startswith("SASL_"):
        config |= {
            "sasl.mechanism": settings.KAFKA_SASL_MECHANISM,
            "sasl.username": settings.KAFKA_SASL_USERNAME,
            "sasl.password": settings.KAFKA_SASL_PASSWORD,
        }
    if settings.KAFKA_SSL_CA_LOCATION:
        config["ssl.ca.location"] = settings.KAFKA_SSL_CA_LOCATION
    return config


def kafka_connection_config() -> dict[str, int]:
    """For long-lived clients (the executors' consumer, the producers): give up on a
    connection that stopped answering within seconds, and try again within one.

    A partition (packets dropped, nothing reset) leaves requests in flight on a connection
    whose TCP retransmissions back off to over ten seconds, so after the heal it carried
    on only that much later. An executor cut off from the broker rejoined its group about
    12 s after the heal, with librdkafka's defaults (a request may wait 60 s, a connection
    attempt 30 s, with up to 10 s between attempts); with these, within a second.
    """
    return {
        "socket.timeout.ms": 10_000,
        "socket.connection.setup.timeout.ms": 3_000,
        "reconnect.backoff.max.ms": 1_000,
    }
