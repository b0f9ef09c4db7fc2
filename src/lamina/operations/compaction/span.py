"""The interval a major compaction rewrites: the one asked for (default: all live
data), aligned to the table's chunks and the target granularity's, grown to whole
segments on an upsert table, and cut to the chunks that hold live data."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lamina.core.autocompact import nest
from lamina.core.interval import ETERNITY, Granularity, Interval
from lamina.errors import CompactionError, InvalidIntervalError

if TYPE_CHECKING:
    from lamina.operations.handle import TableHandle


def _data_span(table: TableHandle, granularity: Granularity) -> Interval | None:
    """The live data's extent, widened to whole chunks of ``granularity``."""
    segs = [s for s in table.snapshot().segments if s.location is not None]
    if not segs:
        return None
    lo = min(s.interval.start for s in segs)
    hi = max(s.interval.end for s in segs)
    return Interval.of(granularity.floor(lo), granularity.chunk(hi - 1).end)


def whole_segments(table: TableHandle, iv: Interval, granularity: Granularity) -> Interval:
    """``iv`` grown until it holds every live segment it overlaps, in whole chunks of the
    table's granularity and of ``granularity``. An upsert table's key index counts a
    record as in its file or gone: a segment a compaction hid in part (a WEEK segment
    under one day of HOUR segments) would hide the records of the part it covers,
    whose copies would not show either (they show only where the file they copy went)."""

    if not nest(table.granularity, granularity):  # no interval aligns with both
        return iv
    live = [s.interval for s in table.snapshot().segments if s.location is not None]
    while True:
        lo, hi = iv.start, iv.end
        for seg in live:
            if seg.overlaps(iv):
                lo, hi = min(lo, seg.start), max(hi, seg.end)
        for g in (table.granularity, granularity):
            lo, hi = g.floor(lo), g.chunk(hi - 1).end
        if (lo, hi) == (iv.start, iv.end):
            return iv
        iv = Interval.of(lo, hi)


def major_interval(
    table: TableHandle, interval: Interval | None, granularity: Granularity
) -> Interval | None:
    """The interval a major compaction rewrites: aligned to the table's chunks and to
    the target granularity's; on an upsert table, grown to whole segments
    (:func:`whole_segments`). Raises CompactionError."""
    if table.time_column is None:
        if granularity is not Granularity.ALL and granularity is not table.granularity:
            raise CompactionError("a table without a time column has one chunk: no granularity")
        return ETERNITY
    iv = interval if interval is not None else _data_span(table, granularity)
    if iv is None:
        return None
    if table.is_upsert:
        iv = whole_segments(table, iv, granularity)
    for g in (table.granularity, granularity):
        try:
            g.check_aligned(iv)
        except InvalidIntervalError:
            raise CompactionError(
                f"cannot rewrite {iv} into {granularity.value} segments: it must align with "
                f"both {table.granularity.value} (the table's chunks) and "
                f"{granularity.value} chunks — choose an interval (or granularity) where "
                "they nest"
            ) from None
    return _clipped(table, iv, granularity)


def _clipped(table: TableHandle, iv: Interval, granularity: Granularity) -> Interval | None:
    """``iv`` cut to the whole chunks (of both granularities) that hold its live data;
    None without any. A chunk without data needs no rewrite, and the empty segment a
    compaction leaves in each chunk it rewrites is a catalog row: 0001/9999 made
    millions of them."""

    held = [
        s.interval
        for s in table.snapshot(interval=iv).segments
        if s.location is not None and s.interval.overlaps(iv)
    ]
    if not held:
        return None
    lo, hi = min(h.start for h in held), max(h.end for h in held)
    if nest(table.granularity, granularity):
        for g in (table.granularity, granularity):
            lo, hi = g.floor(max(lo, iv.start)), g.chunk(min(hi, iv.end) - 1).end
    lo, hi = max(lo, iv.start), min(hi, iv.end)
    return Interval.of(lo, hi) if lo < hi else None
