"""What a compaction may take: the visible data segments of the latest snapshot that
no lineage entry still holds (a push in progress, or one that may be rolled back)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lamina.core.interval import Interval
from lamina.core.lineage import LineageState
from lamina.core.segment import Segment
from lamina.core.timeline import Timeline

if TYPE_CHECKING:
    from lamina.operations.handle import TableHandle


def named_ids(table: TableHandle) -> set[str]:
    """Segments a lineage entry in progress, or one that may still be rolled back,
    names: compactions leave them alone."""
    return {
        i
        for e in table.lineage()
        if e.state in (LineageState.IN_PROGRESS, LineageState.COMPLETED)
        for i in e.ids
    }


def candidates(
    table: TableHandle, interval: Interval | None, named: set[str] | None = None
) -> tuple[int, list[Segment]]:
    """(base seq, segments a minor compaction may take): the visible whole data
    segments of the latest snapshot, in chunks inside ``interval``, that no lineage
    entry still names (``named``, read unless given)."""
    seq, whole, _, _ = visible_data(table, interval, named)
    return seq, whole


def visible_data(
    table: TableHandle, interval: Interval | None, named: set[str] | None = None
) -> tuple[int, list[Segment], list[Segment], int | None]:
    """(base seq, whole, partial, end): the visible data segments of the latest
    snapshot in chunks inside ``interval`` that no lineage entry still names
    (``named``, read unless given), those of chunks a newer version hides in part
    apart; and the end of the newest visible segment, tombstones and named ones too
    (None: there is none), from which Druid counts ``skipOffsetFromLatest``."""
    snap = table.snapshot(interval=interval)
    named = named_ids(table) if named is None else named
    whole: list[Segment] = []
    partial: list[Segment] = []
    end: int | None = None
    for entry in Timeline.build(snap.segments).entries():
        if interval is not None and not interval.contains(entry.interval):
            continue
        end = entry.interval.end if end is None else max(end, entry.interval.end)
        got = [s for s in entry.segments if s.location is not None and s.id not in named]
        (partial if entry.is_partial else whole).extend(got)
    return snap.seq, whole, partial, end


def named_chunks(table: TableHandle, named: set[str]) -> set[Interval]:
    """Chunks holding live segments among ``named``: a major compaction leaves them."""
    if not named:
        return set()
    return {s.interval for s in table.snapshot(all_published=True).segments if s.id in named}
