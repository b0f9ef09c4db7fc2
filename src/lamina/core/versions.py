"""Time travel's arguments (pure): which snapshot an ``as_of`` names.

A table's **version** is the number of the snapshot a completed commit made: its
per-table commit sequence (``Commit.version``, 1 for the first commit, one more for
each commit after). ``as_of`` takes a version, the :class:`~lamina.core.model.Commit` a
write returned, or a time — a ``datetime`` (naive: UTC), a ``date`` (its midnight, UTC)
or an ISO-8601 string — which names the latest version completed at or before it.
"""

from __future__ import annotations

import datetime as dt
import operator
from dataclasses import dataclass
from typing import Any

from lamina.core.interval import format_us, to_us
from lamina.core.model import Commit
from lamina.errors import InvalidArgumentError, InvalidIntervalError

#: what a message shows as an example of each kind
_HINT = (
    "pass a table version (an int, see Commit.version in t.history()), a Commit, or a "
    "time: a datetime (naive: UTC) or an ISO-8601 string such as '2024-01-02T03:00:00Z'"
)


@dataclass(frozen=True)
class AtTime:
    """A point in time (µs since the epoch, UTC): the latest version completed at or
    before it."""

    us: int

    def __str__(self) -> str:
        return format_us(self.us)


Travel = int | Commit | AtTime


def travel(value: Any, what: str = "as_of") -> Travel | None:
    """``value`` as a version (int), a Commit or an :class:`AtTime`; None stays None
    (the latest snapshot). Raises InvalidArgumentError for anything else (a bool, a
    float, a string that is no ISO-8601 time, a version below 0)."""
    if value is None or isinstance(value, Commit):
        return value
    if isinstance(value, dt.date):  # datetimes too (pandas' Timestamp is one)
        return AtTime(to_us(value))
    if isinstance(value, str):
        text = value.strip()
        if text.isdigit():
            raise InvalidArgumentError(
                f"{what}={value!r} is a string: pass a version as an int ({what}={int(text)}), "
                "a time as ISO-8601 (e.g. '2024-01-02T03:00:00Z')"
            )
        try:
            return AtTime(to_us(text))
        except InvalidIntervalError:
            raise InvalidArgumentError(
                f"{what}={value!r} is not an ISO-8601 time: {_HINT}"
            ) from None
    try:  # an int, or any integer type (numpy's too); not a bool, a float or a string
        if isinstance(value, bool):
            raise TypeError
        version = operator.index(value)
    except TypeError:
        raise InvalidArgumentError(
            f"{what} takes a version, a Commit or a time, not {type(value).__name__} "
            f"{value!r}: {_HINT}"
        ) from None
    if version < 0:
        raise InvalidArgumentError(f"{what}={version}: versions are numbers >= 1")
    return version


def travel_text(text: str, what: str = "--as-of") -> Travel:
    """A version or a time given as text (the command line, REST, Spark's options): all
    digits is a version, anything else an ISO-8601 time. Raises InvalidArgumentError."""
    t = text.strip()
    if t.isdigit():
        return int(t)
    got = travel(t, what)
    assert got is not None
    return got


def version_of(value: Any, what: str) -> int:
    """A version argument (a change feed's bounds) as an int: an int (numpy's too) or a
    completed Commit. Raises InvalidArgumentError."""
    if isinstance(value, Commit):
        if value.seq is None:
            raise InvalidArgumentError(
                f"{what}: commit {value.id} is {value.state} (not completed): it made no version"
            )
        return value.seq
    try:
        if isinstance(value, bool):
            raise TypeError
        return operator.index(value)
    except TypeError:
        raise InvalidArgumentError(
            f"{what} takes a table version (int) or a Commit, not {type(value).__name__} "
            f"{value!r}: see Commit.version in t.history()"
        ) from None
