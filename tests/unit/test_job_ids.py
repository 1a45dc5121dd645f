"""Job ids are KSUIDs whose payload names the shard; the shard is a pure function of the id."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from ksuid import Ksuid

from jobsvc.sharding.ids import (
    JOB_ID_LENGTH,
    MAX_SHARDS,
    InvalidJobId,
    created_at_of,
    is_job_id,
    new_job_id,
    shard_of,
)

BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
LARGEST_KSUID = "aWgEPTl1tmebfsQzFP4bxwgy80V"  # 2**160 - 1, the largest 20-byte value

shards = st.integers(min_value=0, max_value=MAX_SHARDS - 1)
# KSUID seconds count from 2014-05-13 and fit 32 bits; stay well inside that range.
times = st.datetimes(
    min_value=datetime(2015, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)


@given(shard_id=shards)
def test_a_new_id_names_the_shard_it_was_made_for(shard_id):
    assert shard_of(new_job_id(shard_id=shard_id)) == shard_id


@given(shard_id=shards, at=times)
def test_an_id_is_27_base62_characters(shard_id, at):
    job_id = new_job_id(shard_id=shard_id, at=at)

    assert len(job_id) == JOB_ID_LENGTH == 27
    assert re.fullmatch(r"[0-9A-Za-z]{27}", job_id)
    assert is_job_id(job_id)


@pytest.mark.parametrize("shard_id", [-1, MAX_SHARDS, MAX_SHARDS + 1])
def test_a_shard_number_that_does_not_fit_two_bytes_is_refused(shard_id):
    with pytest.raises(ValueError):
        new_job_id(shard_id=shard_id)


def test_ids_made_in_the_same_second_on_one_shard_are_distinct():
    at = datetime(2030, 1, 1, tzinfo=UTC)

    ids = {new_job_id(shard_id=7, at=at) for _ in range(1000)}

    assert len(ids) == 1000


@given(earlier=times, later=times, shard_a=shards, shard_b=shards)
def test_an_id_made_in_a_later_second_sorts_after_as_a_string(earlier, later, shard_a, shard_b):
    if int(earlier.timestamp()) >= int(later.timestamp()):
        earlier, later = later - timedelta(seconds=1), earlier
    first = new_job_id(shard_id=shard_a, at=earlier)
    second = new_job_id(shard_id=shard_b, at=later)

    assert first < second
    assert first.encode("ascii") < second.encode("ascii")


@given(shard_id=shards, at=times)
def test_created_at_of_is_the_creation_second(shard_id, at):
    created = created_at_of(new_job_id(shard_id=shard_id, at=at))

    assert created == at.replace(microsecond=0)
    assert created.utcoffset() == timedelta(0)


@given(text=st.text())
@example(text="")
@example(text="z" * 27)
@example(text="0" * 26)
@example(text="0" * 28)
@example(text="0" * 26 + "-")
@example(text="0" * 26 + "\n")
@example(text="\u0661" * 27)  # ARABIC-INDIC DIGIT ONE: a digit, but not base62
@example(text="\u00b2" * 27)  # SUPERSCRIPT TWO
def test_malformed_text_raises_invalid_job_id_and_nothing_else(text):
    try:
        shard_id = shard_of(text)
    except InvalidJobId:
        assert not is_job_id(text)
    else:
        assert 0 <= shard_id < MAX_SHARDS
        assert re.fullmatch(r"[0-9A-Za-z]{27}", text)


@given(text=st.text(alphabet=BASE62, min_size=27, max_size=27))
def test_27_base62_characters_are_an_id_exactly_when_they_fit_20_bytes(text):
    fits = int_of_base62(text) < 2**160

    assert is_job_id(text) == fits
    if not fits:
        with pytest.raises(InvalidJobId):
            shard_of(text)


def test_a_value_above_the_largest_ksuid_is_invalid():
    assert shard_of(LARGEST_KSUID) == 0xFFFF
    with pytest.raises(InvalidJobId, match="out of range"):
        shard_of("aWgEPTl1tmebfsQzFP4bxwgy80W")
    with pytest.raises(InvalidJobId):
        shard_of("z" * 27)
    with pytest.raises(InvalidJobId):
        created_at_of("z" * 27)


@pytest.mark.parametrize("value", [None, 42, b"0" * 27, ["0" * 27]])
def test_a_non_string_is_an_invalid_job_id(value):
    with pytest.raises(InvalidJobId):
        shard_of(value)


@given(shard_id=shards, rest=st.binary(min_size=14, max_size=14), at=times)
def test_an_id_from_the_ksuid_library_decodes_to_the_shard_in_its_payload(shard_id, rest, at):
    ksuid = Ksuid(datetime=at, payload=shard_id.to_bytes(2, "big") + rest)

    assert shard_of(str(ksuid)) == shard_id
    assert created_at_of(str(ksuid)) == ksuid.datetime


@given(shard_id=shards, at=times)
def test_the_ksuid_library_reads_our_ids(shard_id, at):
    job_id = new_job_id(shard_id=shard_id, at=at)
    ksuid = Ksuid.from_base62(job_id)

    assert str(ksuid) == job_id
    assert ksuid.payload[:2] == shard_id.to_bytes(2, "big")
    assert ksuid.datetime == at.replace(microsecond=0)


def int_of_base62(text: str) -> int:
    value = 0
    for char in text:
        value = value * 62 + BASE62.index(char)
    return value
