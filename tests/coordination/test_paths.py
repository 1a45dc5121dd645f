"""Every znode path comes from ZnodePaths."""

from __future__ import annotations

import pytest

from coordination.paths import DEFAULT_ROOT, ZnodePaths


def test_the_layout_under_the_default_root():
    paths = ZnodePaths()

    assert DEFAULT_ROOT == "/jobsvc"
    assert paths.members == "/jobsvc/schedulers/members"
    assert paths.member("scheduler-1") == "/jobsvc/schedulers/members/scheduler-1"
    assert paths.shard_owner(7) == "/jobsvc/shards/7/owner"
    assert paths.executors == "/jobsvc/executors"
    assert paths.executor("executor-1") == "/jobsvc/executors/executor-1"


def test_a_configured_root_prefixes_every_path():
    paths = ZnodePaths("/test-42")

    assert paths.member("w") == "/test-42/schedulers/members/w"
    assert paths.shard_owner(0) == "/test-42/shards/0/owner"


@pytest.mark.parametrize("root", ["jobsvc", "/jobsvc/", ""])
def test_a_root_must_be_an_absolute_path_without_a_trailing_slash(root):
    with pytest.raises(ValueError):
        ZnodePaths(root)


@pytest.mark.parametrize("worker_id", ["", "a/b", ".", ".."])
def test_a_worker_id_must_be_one_znode_name(worker_id):
    with pytest.raises(ValueError):
        ZnodePaths().member(worker_id)
    with pytest.raises(ValueError):
        ZnodePaths().executor(worker_id)


def test_shard_ids_are_not_negative():
    with pytest.raises(ValueError):
        ZnodePaths().shard_owner(-1)
