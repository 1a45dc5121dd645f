"""Kafka adapters shared by the service and the workers.

The only code that imports confluent_kafka.
"""
