"""CreateLimiter: the per-process create-rate bucket and the cached unfinished-jobs count."""

from __future__ import annotations

import pytest

from jobsvc import errors
from jobsvc.jobs.limits import CreateLimiter, Usage, UserLimits
from tests.fake_clock import FakeClock


class Counts:
    """The unfinished jobs (and their bytes) the shards hold per user, and how often they
    were counted."""

    def __init__(self) -> None:
        self.stored: dict[int, int] = {}
        self.stored_bytes: dict[int, int] = {}
        self.calls = 0

    def __call__(self, user_id: int, stop_at: int, with_bytes: bool) -> Usage:
        self.calls += 1
        size = self.stored_bytes.get(user_id, 0) if with_bytes else 0
        return Usage(jobs=min(self.stored.get(user_id, 0), stop_at), stored_bytes=size)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1000.0)


@pytest.fixture
def counts() -> Counts:
    return Counts()


def limiter(clock, counts, *, refresh=5.0, burst_seconds=10.0, min_burst=1) -> CreateLimiter:
    return CreateLimiter(
        count_unfinished=counts,
        refresh_seconds=refresh,
        burst_seconds=burst_seconds,
        min_burst=min_burst,
        clock=clock,
    )


RATE_ONLY = UserLimits(max_unfinished=0, create_rate=2.0)
CAP_ONLY = UserLimits(max_unfinished=10, create_rate=0)


def test_a_new_user_may_spend_a_full_bucket_at_once(clock, counts):
    limits = limiter(clock, counts)  # 2 jobs/s for 10 s: 20 jobs

    limits.admit(user_id=1, limits=RATE_ONLY, jobs=20)

    with pytest.raises(errors.CreateRateLimited) as refused:
        limits.admit(user_id=1, limits=RATE_ONLY, jobs=1)
    assert refused.value.retry_after == 1
    assert "Create-rate limit" in refused.value.message


def test_the_bucket_refills_at_the_rate(clock, counts):
    limits = limiter(clock, counts)
    limits.admit(user_id=1, limits=RATE_ONLY, jobs=20)

    clock.now += 3  # 6 tokens

    limits.admit(user_id=1, limits=RATE_ONLY, jobs=6)
    with pytest.raises(errors.CreateRateLimited):
        limits.admit(user_id=1, limits=RATE_ONLY, jobs=1)


def test_retry_after_says_when_the_request_would_fit(clock, counts):
    limits = limiter(clock, counts)
    limits.admit(user_id=1, limits=RATE_ONLY, jobs=20)

    with pytest.raises(errors.CreateRateLimited) as refused:
        limits.admit(user_id=1, limits=RATE_ONLY, jobs=7)

    assert refused.value.retry_after == 4  # 7 jobs at 2 a second


def test_a_refused_request_takes_nothing(clock, counts):
    limits = limiter(clock, counts)
    limits.admit(user_id=1, limits=RATE_ONLY, jobs=15)
    with pytest.raises(errors.CreateRateLimited):
        limits.admit(user_id=1, limits=RATE_ONLY, jobs=6)

    limits.admit(user_id=1, limits=RATE_ONLY, jobs=5)


def test_a_full_bulk_always_fits_the_bucket(clock, counts):
    limits = limiter(clock, counts, min_burst=1000)

    limits.admit(user_id=1, limits=RATE_ONLY, jobs=1000)


def test_users_have_their_own_buckets(clock, counts):
    limits = limiter(clock, counts)
    limits.admit(user_id=1, limits=RATE_ONLY, jobs=20)

    limits.admit(user_id=2, limits=RATE_ONLY, jobs=20)


def test_a_rate_of_zero_is_no_limit(clock, counts):
    limits = limiter(clock, counts)
    off = UserLimits(max_unfinished=0, create_rate=0)

    for _ in range(100):
        limits.admit(user_id=1, limits=off, jobs=1000)

    assert counts.calls == 0


def test_the_unfinished_cap_counts_what_the_shards_hold_and_what_this_process_adds(clock, counts):
    counts.stored[1] = 7
    limits = limiter(clock, counts)

    limits.admit(user_id=1, limits=CAP_ONLY, jobs=2)
    limits.admit(user_id=1, limits=CAP_ONLY, jobs=1)
    with pytest.raises(errors.UnfinishedJobsLimited) as refused:
        limits.admit(user_id=1, limits=CAP_ONLY, jobs=1)

    assert "at most 10" in refused.value.message
    assert refused.value.retry_after == 5
    assert counts.calls == 1


def test_the_count_is_read_again_after_the_refresh_interval(clock, counts):
    counts.stored[1] = 10
    limits = limiter(clock, counts)
    with pytest.raises(errors.UnfinishedJobsLimited):
        limits.admit(user_id=1, limits=CAP_ONLY, jobs=1)

    counts.stored[1] = 4  # six finished
    clock.now += 5

    limits.admit(user_id=1, limits=CAP_ONLY, jobs=6)
    assert counts.calls == 2


def test_counting_stops_just_past_the_cap(clock, counts):
    counts.stored[1] = 1_000_000
    seen = []
    limits = CreateLimiter(
        count_unfinished=lambda user_id, stop_at, _: seen.append(stop_at) or Usage(stop_at),
        refresh_seconds=5,
        burst_seconds=10,
        min_burst=1,
        clock=clock,
    )

    with pytest.raises(errors.UnfinishedJobsLimited):
        limits.admit(user_id=1, limits=CAP_ONLY, jobs=1)

    assert seen == [11]


def test_a_changed_cap_counts_again(clock, counts):
    counts.stored[1] = 10
    limits = limiter(clock, counts)
    with pytest.raises(errors.UnfinishedJobsLimited):
        limits.admit(user_id=1, limits=CAP_ONLY, jobs=1)

    limits.admit(user_id=1, limits=UserLimits(max_unfinished=20, create_rate=0), jobs=10)

    assert counts.calls == 2


def test_a_job_refused_for_its_rate_does_not_count_as_unfinished(clock, counts):
    limits = limiter(clock, counts)
    both = UserLimits(max_unfinished=25, create_rate=2.0)
    limits.admit(user_id=1, limits=both, jobs=20)
    with pytest.raises(errors.CreateRateLimited):
        limits.admit(user_id=1, limits=both, jobs=5)

    clock.now += 2.5  # 5 tokens; the count (20) is still fresh

    limits.admit(user_id=1, limits=both, jobs=5)


def test_a_slow_count_is_reused_for_longer(clock, counts):
    def slow_count(user_id: int, stop_at: int, with_bytes: bool) -> Usage:
        clock.now += 1.0  # a count that takes a second
        return counts(user_id, stop_at, with_bytes)

    limits = CreateLimiter(
        count_unfinished=slow_count, refresh_seconds=5, burst_seconds=10, min_burst=1, clock=clock
    )
    limits.admit(user_id=1, limits=CAP_ONLY, jobs=1)

    clock.now += 10  # past the refresh interval, within 20 x the count's time
    limits.admit(user_id=1, limits=CAP_ONLY, jobs=1)
    assert counts.calls == 1

    clock.now += 10
    limits.admit(user_id=1, limits=CAP_ONLY, jobs=1)
    assert counts.calls == 2


BYTES_ONLY = UserLimits(max_unfinished=0, create_rate=0, max_stored_bytes=1000)


def test_the_byte_limit_counts_what_the_shards_hold_and_what_this_process_adds(clock, counts):
    counts.stored[1], counts.stored_bytes[1] = 3, 600
    limits = limiter(clock, counts)

    limits.admit(user_id=1, limits=BYTES_ONLY, jobs=1, stored_bytes=300)
    with pytest.raises(errors.StoredBytesLimited) as refused:
        limits.admit(user_id=1, limits=BYTES_ONLY, jobs=1, stored_bytes=101)

    assert "at most 1,000" in refused.value.message
    limits.admit(user_id=1, limits=BYTES_ONLY, jobs=1, stored_bytes=100)


def test_without_a_job_cap_bytes_are_counted_up_to_a_fixed_number_of_rows(clock):
    seen = []
    limits = CreateLimiter(
        count_unfinished=lambda user_id, stop_at, with_bytes: (
            seen.append((stop_at, with_bytes)) or Usage(0)
        ),
        refresh_seconds=5,
        burst_seconds=10,
        min_burst=1,
        clock=clock,
    )

    limits.admit(user_id=1, limits=BYTES_ONLY, jobs=1, stored_bytes=1)

    assert seen == [(1_000_000, True)]


def test_rate_units_apart_from_jobs_take_from_the_rate_only(clock, counts):
    limits = limiter(clock, counts)  # 20 tokens
    both = UserLimits(max_unfinished=5, create_rate=2.0)

    for _ in range(20):  # a reschedule: one unit of rate, no new unfinished job
        limits.admit(user_id=1, limits=both, jobs=0, rate_units=1)
    with pytest.raises(errors.CreateRateLimited):
        limits.admit(user_id=1, limits=both, jobs=0, rate_units=1)


def test_a_refusal_reports_every_applying_limit_as_quota_states(clock, counts):
    counts.stored[1], counts.stored_bytes[1] = 10, 500
    limits = limiter(clock, counts)
    every = UserLimits(max_unfinished=10, create_rate=2.0, max_stored_bytes=1000)

    with pytest.raises(errors.UnfinishedJobsLimited) as refused:
        limits.admit(user_id=1, limits=every, jobs=1, stored_bytes=1)

    states = {state.policy: state for state in refused.value.quotas}
    assert states["create-rate"].quota == 20
    assert states["create-rate"].window == 10
    assert states["create-rate"].remaining == 20
    assert states["unfinished-jobs"].quota == 10
    assert states["unfinished-jobs"].remaining == 0
    assert states["stored-bytes"].remaining == 500
    assert states["stored-bytes"].unit == "content-bytes"


def test_a_request_larger_than_the_burst_is_refused_as_invalid_not_told_to_wait(clock, counts):
    limits = limiter(clock, counts)  # 2 jobs/s for 10 s: a burst of 20

    with pytest.raises(errors.InvalidInput) as refused:
        limits.admit(user_id=1, limits=RATE_ONLY, jobs=21)

    assert "at most 20 can be scheduled at once" in refused.value.message
    limits.admit(user_id=1, limits=RATE_ONLY, jobs=20)


def test_the_unfinished_count_shown_to_a_user_is_the_one_creates_are_judged_by(clock, counts):
    limits = limiter(clock, counts, refresh=5.0)
    counts.stored[1] = 4

    assert limits.usage(user_id=1, limits=CAP_ONLY).jobs == 4
    limits.admit(user_id=1, limits=CAP_ONLY, jobs=3)  # counted already: not again
    assert limits.usage(user_id=1, limits=CAP_ONLY).jobs == 7
    assert counts.calls == 1
    clock.now += 5.0
    assert limits.usage(user_id=1, limits=CAP_ONLY).jobs == 4  # counted again: the shards say 4


def test_the_burst_is_the_buckets_size_in_whole_jobs(clock, counts):
    rate = UserLimits(max_unfinished=0, create_rate=2.5)
    assert limiter(clock, counts, burst_seconds=10.0).burst(rate) == 25
    assert limiter(clock, counts, burst_seconds=10.0, min_burst=1000).burst(rate) == 1000
