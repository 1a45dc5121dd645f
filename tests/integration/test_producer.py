"""BatchProducer against a broker that never answers: every message sent is reported."""

from __future__ import annotations

import threading

from deploy.localstack.ports import free_port
from jobsvc.messaging.producer import BatchProducer


def test_messages_still_unsent_at_close_are_reported_failed():
    # Nothing listens on the port: the messages wait in librdkafka's queue for a broker
    # for longer than the close gives them (message.timeout.ms is a minute).
    producer = BatchProducer(
        bootstrap=f"127.0.0.1:{free_port()}",
        client_id="test-unsent-at-close",
        config={"message.timeout.ms": 60_000, "log_level": 0},
    )
    reported: list[list[int]] = []
    done = threading.Event()

    def on_done(failed: list[int]) -> None:
        reported.append(failed)
        done.set()

    producer.send("jobs", [(b"k", b"v")] * 3, on_done=on_done, timeout=1.0)
    producer.close(timeout=0.5)

    assert done.wait(5.0), "the batch was never reported: a counter of unacknowledged leaks"
    assert reported == [[0, 1, 2]]
