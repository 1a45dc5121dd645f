"""The local stack launcher: real PostgreSQL, ZooKeeper and a Kafka-protocol broker.

`python -m tools.devstack run` is `make run`; `python -m tools.devstack test` is
`make test` (see `cli`). Tests that need servers of their own use the Python API:

    from tools.devstack import KafkaBroker, free_port, new_stack_dir, start_test_stack

    broker = KafkaBroker(root=new_stack_dir(), port=free_port())
    broker.start()      # returns once the broker answers the Kafka protocol
    ...
    broker.stop()
"""

from __future__ import annotations

from .errors import LocalStackError, ServerStartError
from .kafka import KafkaBroker
from .ports import free_port
from .postgres import PostgresServer
from .stack import Stack, build_test_stack, new_stack_dir, start_test_stack
from .standby import PostgresStandby, replicated_url
from .zookeeper import ZooKeeperServer

__all__ = [
    "KafkaBroker",
    "LocalStackError",
    "PostgresServer",
    "PostgresStandby",
    "ServerStartError",
    "Stack",
    "ZooKeeperServer",
    "build_test_stack",
    "free_port",
    "new_stack_dir",
    "replicated_url",
    "start_test_stack",
]
