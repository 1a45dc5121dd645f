"""How every Kafka client of the app authenticates to the brokers: one place for it.

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
