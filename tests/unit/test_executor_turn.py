"""One executor turn's reading and claim order, with an in-memory consumer: no servers.

What users feel from these: a job published ahead of its time is read before it is due,
however the Kafka client hands messages over, and a light user's job that the fair order
puts first is claimed first, not behind claims of hundreds of another user's jobs.
"""

from __future__ import annotations

import dataclasses

import pytest
from django.db import OperationalError

from executor_worker.consumer import Received
from executor_worker.express_runner import Handover
from executor_worker.worker import ExecutorConfig, ExecutorWorker
from jobsvc.messaging.job_message import JobMessage
from tests.unit.job_messages import outcome_of, received_job

BATCH = 2000  # messages per poll
CLAIM_BATCH = 1000  # messages taken per turn
HEAD = CLAIM_BATCH // 8  # claimed apart at the head of each turn
FLOOD_USER, LIGHT_USER = 1, 2


class ClientQueue:
    """A consumer whose polls hand over at most ``hand_over`` messages, as librdkafka's
    queue often does while tens of thousands wait behind them."""

    def __init__(self, *, hand_over: int) -> None:
        self.hand_over = hand_over
        self.messages: list[Received] = []

    def pause_all(self, paused: bool) -> None:
        pass

    def poll_batch(self, *, max_messages: int, timeout: float) -> list[Received]:
        size = min(max_messages, self.hand_over)
        batch, self.messages = self.messages[:size], self.messages[size:]
        return batch

    def handled(self, *received: Received) -> None:
        pass


class NoHandlers:
    def inline_handlers(self) -> list[str]:
        return ["noop"]


def message(user: int, shard: int) -> Received:
    """A job of ``user`` on ``shard``, due a second ago."""
    return received_job(user, shard=shard)


def flood(jobs: int) -> list[Received]:
    """One user's due jobs, spread over shards 0-3 in runs of 250."""
    return [message(FLOOD_USER, (i // 250) % 4) for i in range(jobs)]


@pytest.fixture
def executor():
    config = ExecutorConfig(
        topic="jobs",
        dead_letter_topic="dead",
        group_id="executors",
        batch_size=BATCH,
        concurrency=4,
        max_in_flight=BATCH,
        max_uncommitted=20000,
        lease_grace_seconds=30.0,
        drain_timeout=1.0,
        publish_timeout=1.0,
        read_ahead=40000,
        claim_batch=CLAIM_BATCH,
        read_budget=60.0,  # reading here never runs out of time, however slow the machine
    )
    worker = ExecutorWorker(
        worker_id="test",
        bootstrap="127.0.0.1:9",
        config=config,
        runner=NoHandlers(),
        producer=None,
    )
    worker.consumer = ClientQueue(hand_over=300)
    worker.claims = []  # (shard, user ids) per claim, in the order made

    def claim(shard_id, items, *, inline):
        worker.claims.append((shard_id, [m.user_id for m, _ in items]))
        return {}, [], []  # nothing claimed: every message is dropped as stale

    worker._claim = claim
    return worker


def test_a_turn_reads_on_past_polls_that_hand_over_less_than_asked(executor):
    executor.consumer.messages = flood(5000)
    executor._receive()
    assert executor.consumer.messages == []  # all read into the executor, where it is fair


def test_a_job_coming_due_does_not_stop_the_reading_before_a_whole_batch(executor):
    # A steady stream of jobs coming due: one held is due at every turn. Reading must
    # still keep up with what the schedulers publish, or the jobs published a second
    # ahead of their time queue unread in the client until after it.
    executor.consumer.hand_over = BATCH
    executor._not_due.put(0.0, (None, None))  # long due, not yet let in
    executor._release_due = lambda: 0  # keep it held: the stream goes on
    executor.consumer.messages = flood(6000)
    executor._receive()
    assert 6000 - len(executor.consumer.messages) >= BATCH


def test_a_light_users_job_is_claimed_first_and_apart_from_the_flood(executor):
    executor.consumer.messages = [*flood(3000), message(LIGHT_USER, 3)]
    executor._receive()
    executor._claim_and_start(pool=None)
    light = next(n for n, (_, users) in enumerate(executor.claims) if LIGHT_USER in users)
    # Only the small claims of the turn's head go before it (one per shard), never a
    # claim of hundreds of the flood's jobs.
    assert sum(len(users) for _, users in executor.claims[: light + 1]) <= HEAD
    assert sum(len(users) for _, users in executor.claims) == CLAIM_BATCH


def test_a_turn_over_every_shard_makes_small_claims_on_two_shards_only(executor):
    # The fair buffer takes a user's jobs in turn from each shard, so a turn's head spans
    # every shard: a small claim on each, before each shard's claim of the rest, was
    # eight claims a turn where five did.
    executor.consumer.messages = flood(3000)
    executor._receive()
    executor._claim_and_start(pool=None)
    assert sum(len(users) for _, users in executor.claims) == CLAIM_BATCH
    assert len(executor.claims) <= 4 + 2


def test_jobs_a_cut_turn_left_are_claimed_before_a_later_turns(executor):
    executor.consumer.messages = flood(1000)
    executor._receive()  # takes 1,000: 125 at the head, 875 to claim on shards 0-3
    left = {shard: list(items) for shard, items in executor._to_claim.items()}
    executor._head.clear()
    executor.consumer.messages = [message(FLOOD_USER, 0) for _ in range(500)]
    executor._receive()
    order = [shard for shard, _ in executor._to_claim.items()]
    assert order[: len(left)] == list(left)  # the earlier turn's shards first, in order
    for shard, items in left.items():  # and on each shard its jobs ahead of the later
        assert executor._to_claim[shard][: len(items)] == items


def test_turns_are_short_while_a_heavy_users_last_jobs_here_are_taken(executor):
    # Near a heavy user's run-out both executors hold copies of its last jobs (work
    # stealing), and a copy taken in the same turn as the other executor's is a turn
    # lost to that user: shorter turns let the check before each take drop more of
    # them (ExecutorWorker._drop_started_elsewhere).
    executor.consumer.messages = [
        *[message(LIGHT_USER, shard) for shard in range(4) for _ in range(1000)],
        *[
            received_job(FLOOD_USER, shard=shard, weight=4.0)
            for shard in range(4)
            for _ in range(400)
        ],
    ]
    executor._receive()  # a whole turn leaves the weight-4 user 800, two turns' worth is 1,600
    assert executor._held_to_claim() == 5600 - CLAIM_BATCH
    executor._head.clear()  # claimed
    executor._to_claim.clear()
    executor._receive()
    assert executor._held_to_claim() == 5600 - CLAIM_BATCH - CLAIM_BATCH // 4


def test_a_light_share_running_low_keeps_whole_turns(executor):
    # A user with a small share loses little to copies, and quarter turns for every user
    # running low drained a flood beside steady users slower in three pairs of three
    # (tools/bench steady_beside_flood). A fifth of the weights is under the quarter.
    executor.consumer.messages = [
        *[message(user, shard) for user in range(10, 14) for shard in range(4) for _ in range(250)],
        *[message(LIGHT_USER, shard) for shard in range(4) for _ in range(125)],
    ]
    executor._receive()  # a whole turn leaves the light user 300, two turns' worth is 400
    executor._head.clear()  # claimed
    executor._to_claim.clear()
    executor._receive()
    assert executor._held_to_claim() == 4500 - 2 * CLAIM_BATCH


def test_a_user_left_alone_is_drained_in_whole_turns(executor):
    executor.consumer.messages = flood(3000)
    executor._receive()  # 2,000 left, two turns' worth of a user alone: it runs low
    executor._head.clear()  # claimed
    executor._to_claim.clear()
    executor._receive()
    assert executor._held_to_claim() == 3000 - 2 * CLAIM_BATCH


class ExpressHandover:
    """The express runner as the loop sees it: what it handed over since the last turn."""

    def __init__(self, handover) -> None:
        self.handover = handover
        self.consumer = ClientQueue(hand_over=0)
        self.consumer.topic = "jobs.express"
        self.acknowledged = []

    def acknowledge(self, *received) -> None:
        self.acknowledged.extend(received)

    def take_handover(self):
        handover, self.handover = self.handover, Handover()
        return handover


def test_jobs_the_express_runner_started_are_charged_in_the_fair_order(executor):
    # Both users have jobs held; the runner started 10 of the light user's: the flood's
    # jobs go next until those are made up, then the two alternate again.
    executor.consumer.messages = [*flood(100), *(message(LIGHT_USER, 0) for _ in range(100))]
    executor._express_runner = ExpressHandover(Handover(started={LIGHT_USER: (1.0, 10)}))
    executor._receive()
    executor._claim_and_start(pool=None)
    taken = [user for _, users in executor.claims for user in users]
    first_light = taken.index(LIGHT_USER)
    assert first_light >= 9  # the flood's 10 go first (give or take the start's phase)
    # Of the first 100 taken, the light user's are half of 100 + 10 charged, less those 10.
    assert 44 <= taken[:100].count(LIGHT_USER) <= 46


def test_what_the_express_runner_hands_over_is_held_and_a_due_job_cuts_the_turn(executor):
    due = message(LIGHT_USER, 2)
    executor._express_runner = ExpressHandover(Handover(messages=[due]))
    assert executor._read_express()  # a due job came: the next turn takes it before reading
    assert executor._waiting.items_of(LIGHT_USER) == [(JobMessage.decode(due.value), due)]


def test_a_turn_stops_reading_after_its_budget_once_it_holds_a_claims_worth(
    executor,
):
    # Reading 4 whole batches took over a second on a busy machine, with nothing claimed
    # meanwhile: once a claim's worth is held, the reading past the first batch ends when
    # the budget is spent (here at once), and the turn claims.
    executor.config = dataclasses.replace(executor.config, read_budget=0.0)
    executor.consumer.hand_over = BATCH
    executor.consumer.messages = flood(4 * BATCH)
    executor._receive()
    assert 4 * BATCH - len(executor.consumer.messages) == BATCH


def test_a_turn_reads_on_past_its_budget_while_it_holds_less_than_a_claim(executor):
    # Jobs published ahead of their time are held apart until due, not in the fair
    # buffers: with none to claim, the turn reads on (here all 4 batches) whatever the
    # budget, so that they are read before they are due.
    executor.config = dataclasses.replace(executor.config, read_budget=0.0)
    executor.consumer.hand_over = BATCH
    executor.consumer.messages = [received_job(FLOOD_USER, due_in=60.0) for _ in range(4 * BATCH)]
    executor._receive()
    assert executor.consumer.messages == []


class StartedElsewhere:
    """A shard where the jobs in ``started`` were started by another executor."""

    def __init__(self, started: set[str]) -> None:
        self.started = started
        self.checked = 0

    def startable(self, requests):
        self.checked += len(requests)
        return {(job_id, attempt) for job_id, attempt in requests if job_id not in self.started}


def test_a_user_whose_jobs_another_executor_started_gets_its_share_of_a_few_turns(executor):
    # Near a user's run-out, work stealing leaves two executors holding copies of its
    # last jobs, and whichever claims a job second finds it started. Here every other
    # copy of the robbed user's this executor holds was started elsewhere. A copy taken
    # takes a turn and starts nothing; the turn is given back, but only from the next
    # take on. Once one was found, the user's next copies are checked before each take,
    # and those started elsewhere take no turn.
    robbed, steady = FLOOD_USER, LIGHT_USER
    robbed_jobs = [message(robbed, i % 4) for i in range(3000)]
    steady_jobs = [message(steady, i % 4) for i in range(3000)]
    elsewhere = StartedElsewhere({JobMessage.decode(r.value).job_id for r in robbed_jobs[1::2]})
    executor._store = lambda shard_id: elsewhere
    starts = {robbed: 0, steady: 0}

    def claim(shard_id, items, *, inline):
        ran = {}
        for job, _ in items:
            if job.job_id not in elsewhere.started:
                ran[job.job_id, job.attempt] = outcome_of(job)
                starts[job.user_id] += 1
        return ran, [], []

    executor._claim = claim
    pairs = zip(robbed_jobs, steady_jobs, strict=True)
    executor.consumer.messages = [job for pair in pairs for job in pair]
    for _ in range(3):
        executor._receive()
        executor._claim_and_start(pool=None)
    # Taking the copies until they fail to start, the robbed user had 42 % of the starts.
    assert starts[robbed] / (starts[robbed] + starts[steady]) == pytest.approx(0.5, abs=0.025)
    assert elsewhere.checked <= 3 * CLAIM_BATCH  # the next turn's worth, not all it holds


class ShardDown:
    def startable(self, requests):
        raise OperationalError("server closed the connection unexpectedly")


def test_copies_a_failed_check_could_not_clear_are_kept_and_claimed(executor):
    executor.consumer.messages = flood(2000)
    executor._receive()
    executor._claim_and_start(pool=None)  # every copy is dropped: the user is checked next
    executor._store = lambda shard_id: ShardDown()
    executor._receive()  # the check fails on every shard, which are backed off
    held = executor._held(executor._head) + executor._held(executor._to_claim)
    assert len(executor._waiting) + held == 1000  # none dropped without its claim
    assert not any(executor._shards.is_open(shard) for shard in range(4))  # backed off
