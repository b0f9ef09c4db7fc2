"""Half-open UTC time intervals and segment granularities.

Instants are integers: microseconds since the Unix epoch, UTC. Integers keep the
timeline and the catalog exact and fast; :class:`Interval` converts at the edges.
"""

from __future__ import annotations

import datetime as dt
import enum
from dataclasses import dataclass

from lamina.errors import InvalidGranularityError, InvalidIntervalError

US_PER_SECOND = 1_000_000
US_PER_HOUR = 3600 * US_PER_SECOND
US_PER_DAY = 24 * US_PER_HOUR
US_PER_WEEK = 7 * US_PER_DAY
#: Bounds of the eternity interval used by tables without a time column.
MIN_US = -(2**62)
MAX_US = 2**62
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MONDAY_OFFSET = 4 * US_PER_DAY  # 1970-01-01 was a Thursday; 1970-01-05 a Monday
#: The instants a row may hold: years 1 to 9999, Python's datetime range (and Spark's).
FIRST_US = -719_162 * US_PER_DAY  # 0001-01-01
END_US = 2_932_897 * US_PER_DAY  # 10000-01-01, where the last chunks of 9999 end
#: The Gregorian calendar repeats every 400 years: instants past 9999 (chunk ends) are
#: computed that much earlier and shifted back.
_CYCLE_US = 146_097 * US_PER_DAY
_CYCLE_YEARS = 400

Instant = int | dt.datetime | dt.date | str


def to_us(value: Instant) -> int:
    """Convert a datetime (naive = UTC), date, ISO string or int (µs) to µs since epoch."""
    if isinstance(value, bool):
        raise InvalidIntervalError(f"not a point in time: {value!r}")
    if isinstance(value, int):
        if not MIN_US <= value <= MAX_US:
            raise InvalidIntervalError(
                f"{value} µs is past lamina's times (-2**62..2**62 µs, about 146,000 years "
                "either side of 1970); use '-inf' or 'inf' for an open end"
            )
        return value
    if isinstance(value, str):
        return _parse_instant(value)
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        delta = value - _EPOCH
        return (delta.days * 86400 + delta.seconds) * US_PER_SECOND + delta.microseconds
    if isinstance(value, dt.date):
        return (value - dt.date(1970, 1, 1)).days * US_PER_DAY
    raise InvalidIntervalError(
        f"not a point in time: {value!r}; use a datetime, date, ISO-8601 string or µs int"
    )


def _parse_instant(text: str) -> int:
    text = text.strip()
    if text in ("-inf", "-infinity"):
        return MIN_US
    if text in ("+inf", "inf", "infinity", "+infinity"):
        return MAX_US
    shift, given = 0, text
    year, dash, rest = text.lstrip("+").partition("-")
    if len(year) > 4 and year.isdigit() and dash:  # 10000-01-01, where 9999's chunks end
        cycles = (int(year) - 9600) // _CYCLE_YEARS
        text, shift = f"{int(year) - cycles * _CYCLE_YEARS:04d}-{rest}", cycles
    try:
        us = to_us(dt.datetime.fromisoformat(text.replace("Z", "+00:00"))) + shift * _CYCLE_US
    except ValueError:
        raise InvalidIntervalError(
            f"cannot read {given!r} as a time; write ISO-8601 such as 2024-01-02 or "
            "2024-01-02T03:00:00Z"
        ) from None
    if not MIN_US < us < MAX_US:
        raise InvalidIntervalError(
            f"{given!r} is too far from now to be a time lamina holds; use -inf or +inf "
            "for an open end"
        )
    return us


def from_us(us: int) -> dt.datetime:
    """µs since epoch → aware UTC datetime."""
    return _EPOCH + dt.timedelta(microseconds=us)


def format_us(us: int) -> str:
    """Compact ISO-8601 text of an instant (``-inf``/``+inf`` at the eternity bounds)."""
    if us <= MIN_US:
        return "-inf"
    if us >= MAX_US:
        return "+inf"
    cycles = max(0, (us - FIRST_US) // _CYCLE_US - 23)  # 0 up to year 9600
    d = from_us(us - cycles * _CYCLE_US)
    year = d.year + cycles * _CYCLE_YEARS
    # %Y is not zero-padded below year 1000 on glibc; ISO-8601 (and parsing) needs 4 digits
    if d.microsecond:
        return f"{year:04d}" + d.strftime("-%m-%dT%H:%M:%S.%fZ")
    return f"{year:04d}" + d.strftime("-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True, order=True)
class Interval:
    """A half-open interval ``[start, end)`` of UTC instants in µs since epoch."""

    start: int
    end: int

    def __init__(self, start: Instant, end: Instant) -> None:
        s, e = to_us(start), to_us(end)
        if e <= s:
            raise InvalidIntervalError(
                f"interval end {format_us(e)} must be after its start {format_us(s)}"
            )
        object.__setattr__(self, "start", s)
        object.__setattr__(self, "end", e)

    @classmethod
    def of(cls, start: int, end: int) -> Interval:
        """Fast constructor from µs integers (no conversion; caller guarantees start < end)."""
        iv = object.__new__(cls)
        object.__setattr__(iv, "start", start)
        object.__setattr__(iv, "end", end)
        return iv

    @classmethod
    def parse(cls, text: str) -> Interval:
        """Parse ``"start/end"`` in ISO-8601, e.g. ``"2011-01-01/2011-01-10"``."""
        if not isinstance(text, str) or text.count("/") != 1:
            raise InvalidIntervalError(
                f"cannot read interval {text!r}; write it as START/END, e.g. 2024-01-01/2024-01-02"
            )
        start, end = text.split("/")
        return cls(start, end)

    @classmethod
    def coerce(cls, value: Interval | str | tuple[Instant, Instant]) -> Interval:
        """Accept an Interval, a ``"start/end"`` string or a ``(start, end)`` pair."""
        if isinstance(value, Interval):
            return value
        if isinstance(value, str):
            return cls.parse(value)
        if isinstance(value, tuple) and len(value) == 2:
            return cls(value[0], value[1])
        raise InvalidIntervalError(
            f"not an interval: {value!r}; pass lamina.Interval, 'START/END' or (start, end)"
        )

    @property
    def start_dt(self) -> dt.datetime:
        return from_us(max(self.start, to_us(dt.datetime.min)))

    @property
    def end_dt(self) -> dt.datetime:
        return from_us(min(self.end, to_us(dt.datetime(9999, 12, 31))))

    def overlaps(self, other: Interval) -> bool:
        return self.start < other.end and other.start < self.end

    def contains(self, other: Interval) -> bool:
        return self.start <= other.start and other.end <= self.end

    def contains_instant(self, us: int) -> bool:
        return self.start <= us < self.end

    def intersection(self, other: Interval) -> Interval | None:
        s, e = max(self.start, other.start), min(self.end, other.end)
        return Interval.of(s, e) if s < e else None

    def __str__(self) -> str:
        return f"{format_us(self.start)}/{format_us(self.end)}"

    def __repr__(self) -> str:
        return f"Interval('{self}')"


ETERNITY = Interval.of(MIN_US, MAX_US)


class Granularity(enum.StrEnum):
    """How a table's time axis is cut into chunks; each segment lies in one chunk."""

    HOUR = "HOUR"
    DAY = "DAY"
    WEEK = "WEEK"
    MONTH = "MONTH"
    QUARTER = "QUARTER"
    YEAR = "YEAR"
    ALL = "ALL"

    @classmethod
    def parse(cls, value: str | Granularity) -> Granularity:
        if isinstance(value, Granularity):
            return value
        try:
            return cls(str(value).upper())
        except ValueError:
            names = ", ".join(g.value for g in cls)
            raise InvalidGranularityError(
                f"unknown segment granularity {value!r}; use one of {names}"
            ) from None

    @property
    def fixed_width(self) -> int | None:
        """Chunk length in µs for HOUR, DAY and WEEK; None for calendar units and ALL."""
        return {
            Granularity.HOUR: US_PER_HOUR,
            Granularity.DAY: US_PER_DAY,
            Granularity.WEEK: US_PER_WEEK,
        }.get(self)

    def nests_in(self, other: Granularity) -> bool:
        """Whether each chunk of this granularity lies inside one chunk of ``other``
        (a day in a month; not a week in a month: a week can span two)."""
        return self is other or other is Granularity.ALL or (self, other) in _NESTS

    def floor(self, us: int) -> int:
        """Start of the chunk holding instant ``us``."""
        if self is Granularity.ALL:
            return MIN_US
        if self is Granularity.HOUR:
            return us - us % US_PER_HOUR
        if self is Granularity.DAY:
            return us - us % US_PER_DAY
        if self is Granularity.WEEK:
            return us - (us - _MONDAY_OFFSET) % US_PER_WEEK
        if us >= END_US:
            return self.floor(us - _CYCLE_US) + _CYCLE_US
        d = from_us(us)
        month = {Granularity.MONTH: d.month, Granularity.QUARTER: d.month - (d.month - 1) % 3}
        m = month.get(self, 1)
        return to_us(dt.datetime(d.year, m, 1, tzinfo=dt.UTC))

    def next_start(self, start: int) -> int:
        """End of the chunk that begins at ``start`` (which must be aligned)."""
        if self is Granularity.ALL:
            return MAX_US
        fixed = {
            Granularity.HOUR: US_PER_HOUR,
            Granularity.DAY: US_PER_DAY,
            Granularity.WEEK: US_PER_WEEK,
        }
        if self in fixed:
            return start + fixed[self]
        if start >= END_US - US_PER_DAY * 366:  # the last chunks of 9999 end past it
            return self.next_start(start - _CYCLE_US) + _CYCLE_US
        d = from_us(start)
        months = {Granularity.MONTH: 1, Granularity.QUARTER: 3, Granularity.YEAR: 12}[self]
        total = d.year * 12 + d.month - 1 + months
        return to_us(dt.datetime(total // 12, total % 12 + 1, 1, tzinfo=dt.UTC))

    def chunk(self, us: int) -> Interval:
        """The chunk interval holding instant ``us``."""
        start = self.floor(us)
        return Interval.of(start, self.next_start(start))

    def chunks(self, interval: Interval) -> list[Interval]:
        """The chunks covering ``interval`` (which must be aligned to this granularity)."""
        self.check_aligned(interval)
        out = []
        s = interval.start
        while s < interval.end:
            e = self.next_start(s)
            out.append(Interval.of(s, e))
            s = e
        return out

    def check_aligned(self, interval: Interval) -> None:
        if self is Granularity.ALL:
            if interval != ETERNITY:
                raise InvalidIntervalError(
                    "this table has no time column (granularity ALL); omit the interval"
                )
            return
        for edge in (interval.start, interval.end):
            try:
                aligned = self.floor(edge) == edge
            except OverflowError:  # calendar granularities at ±inf: outside datetime's range
                aligned = False
            if not aligned:
                raise InvalidIntervalError(
                    f"interval {interval} is not aligned to {self.value} chunks; "
                    f"{format_us(edge)} is not a {self.value.lower()} boundary"
                )


#: (finer, coarser) granularities whose chunks nest
_NESTS = {
    (Granularity.HOUR, Granularity.DAY), (Granularity.HOUR, Granularity.WEEK),
    (Granularity.DAY, Granularity.WEEK),
    *((fine, coarse) for fine in (Granularity.HOUR, Granularity.DAY, Granularity.MONTH,
                                  Granularity.QUARTER)
      for coarse in (Granularity.MONTH, Granularity.QUARTER, Granularity.YEAR)
      if fine is not coarse and not (fine is Granularity.QUARTER and coarse is not
                                     Granularity.YEAR)),
}  # fmt: skip
