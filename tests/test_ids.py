"""Incident ids: shape, uniqueness, and refusal of anything that could escape the root."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from pytest_selfheal.errors import EXIT_NOT_FOUND, EXIT_USAGE, NotFoundError, UsageError
from pytest_selfheal.store import ids

GOOD = [
    "incident_20260217_120000_run_abc",
    "incident_20260217_120000_a",
    "incident_20260217_120000_" + "x" * 40,
    "incident_20260217_120000_A-b_9",
    "incident_20260217_120000_-",
]
BAD = [
    "",
    "incident",
    "../x",
    "../../etc/passwd",
    "/abs",
    "/tmp/incident_20260217_120000_abc",
    "incident_..",
    "incident_20260217_120000_..",
    "incident_20260217_120000_a.b",
    "incident_20260217_120000_a/b",
    "incident_20260217_120000_a\\b",
    "incident_20260217_120000_a\x00",
    "incident_20260217_120000_abc\n",
    " incident_20260217_120000_abc",
    "incident_20260217_120000_",
    "incident_20260217_120000_" + "x" * 41,
    "incident_20260217_120000_" + "x" * 300,
    "x" * 300,
    "incident_2026021_120000_abc",
    "incident_20260217_12000_abc",
    "INCIDENT_20260217_120000_abc",
    "incident_20260217_120000_ab c",
    "incident_20260217_120000_abcé",
    "incident_٢٠٢٦٠٢١٧_120000_abc",  # non-ASCII digits
    "incident_20260217_120000_abc\u200b",
]


@pytest.mark.parametrize("text", GOOD)
def test_good_ids_validate(text: str) -> None:
    assert ids.validate_incident_id(text) == text
    assert ids.is_incident_id(text)


@pytest.mark.parametrize("text", BAD)
def test_bad_ids_are_refused_with_one_line(text: str) -> None:
    assert not ids.is_incident_id(text)
    with pytest.raises(UsageError) as info:
        ids.validate_incident_id(text)
    message = str(info.value)
    assert "\n" not in message and "\x00" not in message
    assert len(message) < 250
    assert message.startswith("invalid incident id ")
    assert info.value.exit_code == EXIT_USAGE


@pytest.mark.parametrize("value", [None, 5, b"incident_20260217_120000_abc", ["x"]])
def test_non_strings_are_refused(value: object) -> None:
    with pytest.raises(UsageError):
        ids.validate_incident_id(value)


def test_new_id_shape_and_utc() -> None:
    moment = datetime(2026, 2, 17, 12, 0, 5, tzinfo=timezone(timedelta(hours=9)))
    made = ids.new_incident_id(moment)
    assert made.startswith("incident_20260217_030005_")
    assert ids.is_incident_id(made)
    assert len(made.rsplit("_", 1)[1]) == 6


def test_naive_datetime_is_taken_as_utc() -> None:
    assert ids.new_incident_id(datetime(2026, 1, 2, 3, 4, 5), run="r").startswith("incident_20260102_030405_r")


def test_same_second_ids_differ() -> None:
    # 24 random bits: 20 ids of one second collide about once in 90,000 runs (500 did once in
    # 130); a collision on disk is the store's to resolve (tests/test_store.py, same token).
    moment = datetime(2026, 2, 17, 12, 0, 0, tzinfo=timezone.utc)
    made = {ids.new_incident_id(moment) for _ in range(20)}
    assert len(made) == 20 and all(ids.is_incident_id(i) for i in made)


@pytest.mark.parametrize(
    "run,expected",
    [("gw0", "gw0"), ("a/b c", "a-b-c"), ("../..", None), ("x" * 100, "x" * 40), ("é", None)],
)
def test_run_token_is_made_safe(run: str, expected: str) -> None:
    made = ids.new_incident_id(datetime(2026, 1, 1, tzinfo=timezone.utc), run=run)
    assert ids.is_incident_id(made)
    if expected is not None:
        assert made == f"incident_20260101_000000_{expected}"


def test_run_id_shape() -> None:
    assert ids.new_run_id(datetime(2026, 2, 17, 11, 59, 59, 123456, tzinfo=timezone.utc)) == "run_20260217_115959_123456"


def test_incident_timestamp() -> None:
    assert ids.incident_timestamp("incident_20260217_120000_a") == datetime(2026, 2, 17, 12, 0, tzinfo=timezone.utc)
    assert ids.incident_timestamp("incident_20261399_120000_a") is None
    assert ids.incident_timestamp("nope") is None


# --------------------------------------------------------------------------- references


KNOWN = ["incident_20260101_000000_aaa111", "incident_20260102_000000_bbb222", "incident_20260102_000000_bbc333"]


def test_a_full_id_is_taken_as_it_is() -> None:
    # Existence is the store's question (exit 4 there), not the reference's.
    assert ids.resolve_incident_ref("incident_20991231_235959_x", KNOWN) == "incident_20991231_235959_x"


def test_latest_is_the_newest_id() -> None:
    assert ids.resolve_incident_ref("latest", reversed(KNOWN)) == "incident_20260102_000000_bbc333"
    with pytest.raises(NotFoundError, match="no incident yet"):
        ids.resolve_incident_ref("latest", [])


def test_a_unique_prefix_names_one_incident() -> None:
    assert ids.resolve_incident_ref("incident_20260101", KNOWN) == KNOWN[0]
    assert ids.resolve_incident_ref("incident_20260102_000000_bbb", KNOWN) == KNOWN[1]  # well-formed, yet a prefix


def test_an_ambiguous_or_unknown_prefix_is_one_line() -> None:
    with pytest.raises(UsageError) as ambiguous:
        ids.resolve_incident_ref("incident_20260102", KNOWN)
    assert str(ambiguous.value) == (
        "incident id prefix 'incident_20260102' is ambiguous: incident_20260102_000000_bbb222, "
        "incident_20260102_000000_bbc333"
    )
    with pytest.raises(NotFoundError) as unknown:
        ids.resolve_incident_ref("incident_2027", KNOWN)
    assert unknown.value.exit_code == EXIT_NOT_FOUND


@pytest.mark.parametrize("text", ["../incident_2026", "incident_2026/..", "", "nope", "incident_2026x", "incident_20260101_000000_" + "a" * 41, "inc\x00"])
def test_a_malformed_reference_is_the_id_usage_error(text: str) -> None:
    with pytest.raises(UsageError, match="invalid incident id"):
        ids.resolve_incident_ref(text, KNOWN)
