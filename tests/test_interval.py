"""Tests of intervals (parsing, coercion, errors) and granularities."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lamina.core.interval import (
    ETERNITY,
    MAX_US,
    MIN_US,
    US_PER_DAY,
    US_PER_HOUR,
    Granularity,
    Interval,
    format_us,
    from_us,
    to_us,
)
from lamina.errors import InvalidGranularityError, InvalidIntervalError, LaminaError

UTC = dt.UTC


def us(text: str) -> int:
    return to_us(text)


# ---------------------------------------------------------------------------------------
# instants


def test_to_us_of_each_kind() -> None:
    expected = 1_704_067_200_000_000  # 2024-01-01T00:00:00Z
    assert to_us(expected) == expected
    assert to_us("2024-01-01") == expected
    assert to_us("2024-01-01T00:00:00Z") == expected
    assert to_us("2024-01-01T00:00:00+00:00") == expected
    assert to_us("2024-01-01T01:00:00+01:00") == expected
    assert to_us(" 2024-01-01 ") == expected
    assert to_us(dt.date(2024, 1, 1)) == expected
    assert to_us(dt.datetime(2024, 1, 1)) == expected  # naive = UTC
    assert to_us(dt.datetime(2024, 1, 1, tzinfo=UTC)) == expected
    assert to_us(dt.datetime(2023, 12, 31, 19, tzinfo=dt.timezone(dt.timedelta(hours=-5)))) == (
        expected
    )
    assert to_us("2024-01-01T00:00:00.000001Z") == expected + 1
    assert to_us("1969-12-31T23:59:59Z") == -1_000_000
    assert to_us(dt.date(1970, 1, 1)) == 0


def test_to_us_infinities() -> None:
    assert to_us("-inf") == to_us("-infinity") == MIN_US
    assert to_us("+inf") == to_us("inf") == to_us("infinity") == to_us("+infinity") == MAX_US


@pytest.mark.parametrize("bad", [True, False, 1.5, None, [2024], object()])
def test_to_us_rejects_non_instants(bad: object) -> None:
    with pytest.raises(InvalidIntervalError):
        to_us(bad)  # type: ignore[arg-type]


# a CLI hunt: digits without a dash crashed (IndexError), a year past int64 µs overflowed
@pytest.mark.parametrize(
    "bad",
    ["", "x", "2024-13-01", "2024-02-30", "yesterday", "2024/01/01", "1704067200", "12345",
     "99999999999999999999-01-01", "-99999999999999999999"],
)  # fmt: skip
def test_to_us_rejects_bad_strings(bad: str) -> None:
    with pytest.raises(InvalidIntervalError):
        to_us(bad)


def test_iso_basic_format_dates() -> None:
    assert to_us("20240101") == to_us("2024-01-01")


def test_from_us_and_format_us() -> None:
    t = us("2024-05-17T13:45:06Z")
    assert from_us(t) == dt.datetime(2024, 5, 17, 13, 45, 6, tzinfo=UTC)
    assert format_us(t) == "2024-05-17T13:45:06Z"
    assert format_us(t + 5) == "2024-05-17T13:45:06.000005Z"
    assert format_us(MIN_US) == "-inf"
    assert format_us(MAX_US) == "+inf"
    assert format_us(to_us("0900-03-04")) == "0900-03-04T00:00:00Z"


@settings(max_examples=200, deadline=None)
@given(st.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30)))
def test_instant_text_round_trip(value: dt.datetime) -> None:
    t = to_us(value)
    assert from_us(t) == value.replace(tzinfo=UTC)
    assert to_us(format_us(t)) == t


# ---------------------------------------------------------------------------------------
# intervals


def test_interval_constructor_coerces() -> None:
    iv = Interval("2024-01-01", dt.date(2024, 1, 2))
    assert iv.start == us("2024-01-01")
    assert iv.end == us("2024-01-02")
    assert iv == Interval(dt.datetime(2024, 1, 1), us("2024-01-02"))
    assert iv.end - iv.start == US_PER_DAY
    assert iv.start_dt == dt.datetime(2024, 1, 1, tzinfo=UTC)
    assert iv.end_dt == dt.datetime(2024, 1, 2, tzinfo=UTC)


@pytest.mark.parametrize(
    ("start", "end"),
    [
        ("2024-01-02", "2024-01-01"),
        ("2024-01-01", "2024-01-01"),
        (5, 5),
        (5, 4),
        ("2024-01-01T00:00:00Z", "2024-01-01T01:00:00+02:00"),  # end is 23:00 the day before
        ("+inf", "-inf"),
    ],
)
def test_interval_end_must_be_after_start(start: object, end: object) -> None:
    with pytest.raises(InvalidIntervalError, match="must be after"):
        Interval(start, end)  # type: ignore[arg-type]
    with pytest.raises(InvalidIntervalError):
        Interval.coerce((start, end))  # type: ignore[arg-type]


def test_interval_parse() -> None:
    iv = Interval.parse("2011-01-01/2011-01-10")
    assert iv == Interval("2011-01-01", "2011-01-10")
    hour = Interval.parse("2024-01-01T00:00:00Z/2024-01-01T01:00:00Z")
    assert hour.end - hour.start == US_PER_HOUR
    assert Interval.parse("2024-01-01T02:00:00+02:00/2024-01-02") == Interval(
        "2024-01-01", "2024-01-02"
    )
    assert Interval.parse("-inf/+inf") == ETERNITY
    assert Interval.parse("2024-01-01/+inf") == Interval.of(us("2024-01-01"), MAX_US)


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "2024-01-01",
        "2024-01-01/2024-01-02/2024-01-03",
        "x/y",
        "2024-01-01/",
        "/2024-01-01",
        "2024-13-01/2025-01-01",
        "2024-01-02/2024-01-01",
        "2024-01-01/2024-01-01",
        "2024-01-01--2024-01-02",
    ],
)
def test_interval_parse_rejects_bad_strings(bad: str) -> None:
    with pytest.raises(InvalidIntervalError) as info:
        Interval.parse(bad)
    assert isinstance(info.value, LaminaError)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("bad", [None, 5, ("2024-01-01",), ["2024-01-01", "2024-01-02"]])
def test_interval_parse_and_coerce_reject_non_intervals(bad: object) -> None:
    with pytest.raises(InvalidIntervalError):
        Interval.coerce(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidIntervalError):
        Interval.parse(bad)  # type: ignore[arg-type]


def test_interval_coerce() -> None:
    iv = Interval("2024-01-01", "2024-01-02")
    assert Interval.coerce(iv) is iv
    assert Interval.coerce("2024-01-01/2024-01-02") == iv
    assert Interval.coerce(("2024-01-01", "2024-01-02")) == iv
    assert Interval.coerce((dt.date(2024, 1, 1), dt.date(2024, 1, 2))) == iv
    assert Interval.coerce((iv.start, iv.end)) == iv


def test_interval_str_round_trips() -> None:
    for text in [
        "2024-01-01T00:00:00Z/2024-01-02T00:00:00Z",
        "2024-01-01T00:00:00.000001Z/2024-01-01T00:00:00.500000Z",
        "-inf/+inf",
        "-inf/2024-01-01T00:00:00Z",
        "0900-01-01T00:00:00Z/1000-01-01T00:00:00Z",
    ]:
        iv = Interval.parse(text)
        assert str(iv) == text
        assert Interval.parse(str(iv)) == iv
        assert repr(iv) == f"Interval('{text}')"


def test_interval_relations_are_half_open() -> None:
    a = Interval.of(0, 10)
    assert a.overlaps(Interval.of(9, 20))
    assert not a.overlaps(Interval.of(10, 20))
    assert not Interval.of(10, 20).overlaps(a)
    assert a.overlaps(Interval.of(2, 3))
    assert a.contains(Interval.of(0, 10))
    assert a.contains(Interval.of(2, 3))
    assert not a.contains(Interval.of(5, 11))
    assert a.contains_instant(0)
    assert a.contains_instant(9)
    assert not a.contains_instant(10)
    assert a.intersection(Interval.of(5, 15)) == Interval.of(5, 10)
    assert a.intersection(Interval.of(10, 15)) is None
    assert a.intersection(Interval.of(-5, 50)) == a


def test_interval_is_hashable_ordered_and_frozen() -> None:
    a, b = Interval.of(0, 10), Interval.of(0, 20)
    assert sorted([Interval.of(5, 6), b, a]) == [a, b, Interval.of(5, 6)]
    assert {a, Interval.of(0, 10)} == {a}
    with pytest.raises(AttributeError):
        a.start = 3  # type: ignore[misc]


def test_eternity_datetimes_are_clamped() -> None:
    assert ETERNITY.start_dt.year == 1
    assert ETERNITY.end_dt.year == 9999


# ---------------------------------------------------------------------------------------
# granularities


def test_granularity_parse() -> None:
    for g in Granularity:
        assert Granularity.parse(g) is g
        assert Granularity.parse(g.value) is g
        assert Granularity.parse(g.value.lower()) is g
        assert Granularity.parse(g.value.capitalize()) is g
    assert Granularity.parse("day") is Granularity.DAY
    assert Granularity.parse("Quarter") is Granularity.QUARTER
    assert Granularity.DAY == "DAY"


@pytest.mark.parametrize("bad", ["fortnight", "", "days", "minute", None, 5, " day"])
def test_granularity_parse_rejects_unknown(bad: object) -> None:
    with pytest.raises(InvalidGranularityError, match="unknown segment granularity") as info:
        Granularity.parse(bad)  # type: ignore[arg-type]
    assert isinstance(info.value, LaminaError)
    assert isinstance(info.value, ValueError)
    assert "HOUR" in str(info.value)


# (granularity, instant, expected floor, expected next_start)
FLOORS = [
    (Granularity.HOUR, "2024-05-17T13:45:06Z", "2024-05-17T13:00:00Z", "2024-05-17T14:00:00Z"),
    (Granularity.HOUR, "2024-05-17T13:00:00Z", "2024-05-17T13:00:00Z", "2024-05-17T14:00:00Z"),
    (Granularity.HOUR, "2024-12-31T23:59:59Z", "2024-12-31T23:00:00Z", "2025-01-01T00:00:00Z"),
    (Granularity.HOUR, "1969-12-31T23:30:00Z", "1969-12-31T23:00:00Z", "1970-01-01T00:00:00Z"),
    (Granularity.DAY, "2024-05-17T13:45:06Z", "2024-05-17", "2024-05-18"),
    (Granularity.DAY, "2024-02-28T23:00:00Z", "2024-02-28", "2024-02-29"),
    (Granularity.DAY, "1969-12-31T12:00:00Z", "1969-12-31", "1970-01-01"),
    (Granularity.WEEK, "2024-05-17T13:45:06Z", "2024-05-13", "2024-05-20"),  # Friday
    (Granularity.WEEK, "2024-05-13", "2024-05-13", "2024-05-20"),  # Monday
    (Granularity.WEEK, "2024-05-19T23:59:59Z", "2024-05-13", "2024-05-20"),  # Sunday
    (Granularity.WEEK, "1970-01-01", "1969-12-29", "1970-01-05"),  # a Thursday
    (Granularity.WEEK, "2024-12-31", "2024-12-30", "2025-01-06"),
    (Granularity.MONTH, "2024-05-17T13:45:06Z", "2024-05-01", "2024-06-01"),
    (Granularity.MONTH, "2024-02-29T12:00:00Z", "2024-02-01", "2024-03-01"),
    (Granularity.MONTH, "2024-12-31T23:59:59Z", "2024-12-01", "2025-01-01"),
    (Granularity.MONTH, "1969-12-31T23:59:59Z", "1969-12-01", "1970-01-01"),
    (Granularity.QUARTER, "2024-05-17", "2024-04-01", "2024-07-01"),
    (Granularity.QUARTER, "2024-01-01", "2024-01-01", "2024-04-01"),
    (Granularity.QUARTER, "2024-03-31T23:00:00Z", "2024-01-01", "2024-04-01"),
    (Granularity.QUARTER, "2024-11-30", "2024-10-01", "2025-01-01"),
    (Granularity.YEAR, "2024-05-17", "2024-01-01", "2025-01-01"),
    (Granularity.YEAR, "1969-06-01", "1969-01-01", "1970-01-01"),
    (Granularity.ALL, "2024-05-17", "-inf", "+inf"),
]


@pytest.mark.parametrize(("g", "instant", "floor", "nxt"), FLOORS)
def test_floor_and_next_start(g: Granularity, instant: str, floor: str, nxt: str) -> None:
    t = us(instant)
    assert g.floor(t) == us(floor)
    assert g.next_start(g.floor(t)) == us(nxt)
    assert g.chunk(t) == Interval.of(us(floor), us(nxt))
    assert g.floor(g.floor(t)) == g.floor(t)


def _expected_floor(g: Granularity, d: dt.datetime) -> dt.datetime:
    if g is Granularity.HOUR:
        return d.replace(minute=0, second=0, microsecond=0)
    day = d.replace(hour=0, minute=0, second=0, microsecond=0)
    if g is Granularity.DAY:
        return day
    if g is Granularity.WEEK:
        return day - dt.timedelta(days=d.weekday())
    if g is Granularity.MONTH:
        return day.replace(day=1)
    if g is Granularity.QUARTER:
        return day.replace(day=1, month=d.month - (d.month - 1) % 3)
    return day.replace(day=1, month=1)


@settings(max_examples=300, deadline=None)
@given(
    g=st.sampled_from([g for g in Granularity if g is not Granularity.ALL]),
    d=st.datetimes(min_value=dt.datetime(1, 1, 1), max_value=dt.datetime.max),
)
def test_floor_matches_calendar(g: Granularity, d: dt.datetime) -> None:
    t = to_us(d)
    f = g.floor(t)
    assert from_us(f) == _expected_floor(g, d).replace(tzinfo=UTC)
    nxt = g.next_start(f)
    assert f <= t < nxt
    assert g.floor(nxt) == nxt
    assert g.floor(nxt - 1) == f
    if g is Granularity.WEEK:
        assert from_us(f).weekday() == 0  # Monday


def test_the_last_chunks_of_9999_end_in_10000() -> None:
    """Datetime stops at 9999-12-31; a chunk end past it is computed 400 years (one
    Gregorian cycle) earlier, and its text parses back."""
    last = us("9999-12-31T23:59:59.999999")
    ends = {g: g.chunk(last).end for g in Granularity if g is not Granularity.ALL}
    y10k = us("9600-01-01") + 146_097 * US_PER_DAY
    assert ends == {g: y10k for g in ends} | {Granularity.WEEK: y10k + 2 * US_PER_DAY}
    assert format_us(y10k) == "10000-01-01T00:00:00Z"
    assert format_us(y10k + 1) == "10000-01-01T00:00:00.000001Z"
    assert str(Granularity.MONTH.chunk(last)) == "9999-12-01T00:00:00Z/10000-01-01T00:00:00Z"
    for text in ("10000-01-01", "10000-01-03T00:00:00Z", "12345-06-07T08:09:10.5Z"):
        assert format_us(to_us(text)).startswith(text.rstrip("Z"))
    assert Interval.parse("9999-12-01/10000-01-01") == Granularity.MONTH.chunk(last)
    for g in ends:  # and they are chunk boundaries (of the chunk after, in 10000)
        assert g.floor(ends[g]) == ends[g]
        assert g.next_start(ends[g]) > ends[g]


def test_next_start_month_lengths() -> None:
    starts = [us(f"2023-{m:02d}-01") for m in range(1, 13)] + [us("2024-01-01")]
    for a, b in zip(starts, starts[1:], strict=False):
        assert Granularity.MONTH.next_start(a) == b
    feb_2024 = us("2024-02-01")
    assert Granularity.MONTH.next_start(feb_2024) - feb_2024 == 29 * US_PER_DAY
    assert Granularity.YEAR.next_start(us("2024-01-01")) == us("2025-01-01")
    assert Granularity.QUARTER.next_start(us("2024-10-01")) == us("2025-01-01")


def test_chunks() -> None:
    day3 = Interval("2024-01-01", "2024-01-04")
    assert Granularity.DAY.chunks(day3) == [
        Interval("2024-01-01", "2024-01-02"),
        Interval("2024-01-02", "2024-01-03"),
        Interval("2024-01-03", "2024-01-04"),
    ]
    assert len(Granularity.HOUR.chunks(day3)) == 72
    assert Granularity.HOUR.chunks(day3)[5] == Interval(
        "2024-01-01T05:00:00Z", "2024-01-01T06:00:00Z"
    )
    assert Granularity.WEEK.chunks(Interval("2024-01-01", "2024-01-15")) == [
        Interval("2024-01-01", "2024-01-08"),
        Interval("2024-01-08", "2024-01-15"),
    ]
    assert Granularity.MONTH.chunks(Interval("2024-01-01", "2024-04-01")) == [
        Interval("2024-01-01", "2024-02-01"),
        Interval("2024-02-01", "2024-03-01"),
        Interval("2024-03-01", "2024-04-01"),
    ]
    assert Granularity.QUARTER.chunks(Interval("2024-01-01", "2025-01-01")) == [
        Interval("2024-01-01", "2024-04-01"),
        Interval("2024-04-01", "2024-07-01"),
        Interval("2024-07-01", "2024-10-01"),
        Interval("2024-10-01", "2025-01-01"),
    ]
    assert Granularity.YEAR.chunks(Interval("2023-01-01", "2025-01-01")) == [
        Interval("2023-01-01", "2024-01-01"),
        Interval("2024-01-01", "2025-01-01"),
    ]
    assert Granularity.ALL.chunks(ETERNITY) == [ETERNITY]
    assert Granularity.DAY.chunks(Interval("2024-01-01", "2024-01-02")) == [
        Interval("2024-01-01", "2024-01-02")
    ]


@pytest.mark.parametrize(
    ("g", "aligned", "unaligned"),
    [
        (
            Granularity.HOUR,
            "2024-01-01T05:00:00Z/2024-01-01T07:00:00Z",
            "2024-01-01T05:30:00Z/2024-01-01T07:00:00Z",
        ),
        (Granularity.DAY, "2024-01-01/2024-01-03", "2024-01-01/2024-01-02T01:00:00Z"),
        (Granularity.WEEK, "2024-01-01/2024-01-15", "2024-01-02/2024-01-09"),  # Tue..Tue
        (Granularity.MONTH, "2024-01-01/2024-03-01", "2024-01-01/2024-01-31"),
        (Granularity.QUARTER, "2024-04-01/2024-10-01", "2024-02-01/2024-05-01"),
        (Granularity.YEAR, "2023-01-01/2024-01-01", "2023-01-01/2023-07-01"),
    ],
)
def test_check_aligned(g: Granularity, aligned: str, unaligned: str) -> None:
    g.check_aligned(Interval.parse(aligned))
    with pytest.raises(InvalidIntervalError, match=f"not aligned to {g.value}"):
        g.check_aligned(Interval.parse(unaligned))
    with pytest.raises(InvalidIntervalError):
        g.chunks(Interval.parse(unaligned))


@pytest.mark.parametrize("g", [g for g in Granularity if g is not Granularity.ALL])
@pytest.mark.parametrize("text", ["-inf/+inf", "2024-01-01/+inf", "-inf/2024-01-01"])
def test_infinite_intervals_are_not_aligned_to_time_granularities(
    g: Granularity, text: str
) -> None:
    with pytest.raises(InvalidIntervalError):
        g.check_aligned(Interval.parse(text))


def test_all_granularity_needs_eternity() -> None:
    Granularity.ALL.check_aligned(ETERNITY)
    assert Granularity.ALL.floor(us("2024-01-01")) == MIN_US
    assert Granularity.ALL.next_start(MIN_US) == MAX_US
    assert Granularity.ALL.chunk(0) == ETERNITY
    with pytest.raises(InvalidIntervalError, match="no time column"):
        Granularity.ALL.check_aligned(Interval("2024-01-01", "2024-01-02"))
    with pytest.raises(InvalidIntervalError):
        Granularity.ALL.chunks(Interval("2024-01-01", "2024-01-02"))
