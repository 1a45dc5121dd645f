"""Which claimed jobs go to the express topic (scheduler_worker.express_lane)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from jobsvc.jobs.due_now import users_notified
from scheduler_worker.express_lane import EXPRESS_IN_FLIGHT, express_jobs, express_quotas
from scheduler_worker.shard_store import ClaimedJob

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


def job(job_id: str, user: int, *, due_in: float = 0.0, priority: int = 0) -> ClaimedJob:
    due = NOW + timedelta(seconds=due_in)
    return ClaimedJob(job_id, user, 0, due, NOW, priority=priority)


def ids(jobs: list[ClaimedJob]) -> list[str]:
    return sorted(j.job_id for j in jobs)


def test_a_users_jobs_go_express_up_to_the_few_it_may_have_in_flight():
    claimed = [job(f"a{i}", 1) for i in range(EXPRESS_IN_FLIGHT + 3)] + [job("b", 2)]
    chosen = express_jobs(claimed, in_flight={1: 1, 2: 0})
    assert ids(chosen) == [*ids(claimed[: EXPRESS_IN_FLIGHT - 1]), "b"]


def test_users_with_enough_in_flight_or_not_counted_get_none():
    claimed = [job("a", 1), job("b", 2)]
    assert express_jobs(claimed, in_flight={1: EXPRESS_IN_FLIGHT}) == []


def test_a_users_first_jobs_are_its_most_urgent_then_its_earliest_due():
    claimed = [
        job("late", 1, due_in=5.0),
        job("early", 1, due_in=1.0),
        job("urgent", 1, due_in=9.0, priority=5),
    ]
    taking_one = {1: EXPRESS_IN_FLIGHT - 1}
    assert [j.job_id for j in express_jobs(claimed, in_flight=taking_one)] == ["urgent"]
    assert [j.job_id for j in express_jobs(claimed[:2], in_flight=taking_one)] == ["early"]


def test_a_claim_of_express_jobs_alone_takes_what_each_user_has_to_spare():
    in_flight = {1: 0, 2: EXPRESS_IN_FLIGHT - 1, 3: EXPRESS_IN_FLIGHT, 4: 500}
    assert express_quotas(in_flight, room=100) == {1: EXPRESS_IN_FLIGHT, 2: 1}
    assert express_quotas(in_flight, room=float("inf")) == {1: EXPRESS_IN_FLIGHT, 2: 1}


def test_a_claim_of_express_jobs_alone_stays_within_the_shards_in_flight_limit():
    in_flight = {1: 0, 2: 0, 3: EXPRESS_IN_FLIGHT - 1}
    assert express_quotas(in_flight, room=EXPRESS_IN_FLIGHT + 1) == {1: EXPRESS_IN_FLIGHT, 2: 1}
    # At the limit only users with nothing in flight get a job each, as a round gives them.
    assert express_quotas(in_flight, room=0) == {1: 1, 2: 1}


def test_due_notifications_name_users_and_anything_else_is_ignored():
    assert users_notified(["7", "7", "12", "", "x; DROP TABLE jobs", "3.5"]) == {7, 12}
