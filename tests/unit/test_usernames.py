"""Two usernames are the same name when they differ only in case or compatibility forms."""

from __future__ import annotations

import pytest

from jobsvc.accounts.usernames import username_key


@pytest.mark.parametrize(
    "alike",
    [
        ("sam", "SAM", "Sam", "\uff53am", "\uff33\uff21\uff2d"),
        ("strasse", "STRASSE", "stra\u00dfe"),
        ("file", "\ufb01le"),
        ("x1", "x\u2460", "X\u00b9"),
    ],
)
def test_names_differing_in_case_or_compatibility_forms_have_one_key(alike):
    assert len({username_key(name) for name in alike}) == 1


@pytest.mark.parametrize(("one", "other"), [("sam", "sam1"), ("sam", "sa.m"), ("\u00e9", "e")])
def test_different_names_have_different_keys(one, other):
    assert username_key(one) != username_key(other)


def test_a_key_is_its_own_key():
    for name in ("Sam", "\uff53am", "stra\u00dfe", "\u1e9e", "\u0130stanbul"):
        assert username_key(username_key(name)) == username_key(name)
