"""Publish planning: which identities new files get, and what an overwrite hides.

Pure: the catalog reads the live segments a plan needs, calls these functions inside
its transaction and writes what they return.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from lamina.core.interval import Granularity, Interval
from lamina.core.lineage import LineageEntry, LineageState
from lamina.core.model import CompactedRun, NewSegment
from lamina.core.segment import Segment
from lamina.core.timeline import Timeline
from lamina.errors import ChunkLayoutError, CommitConflictError, UpsertError

#: A chunk of one version: where appended files land.
Target = tuple[Interval, int]


def _segment(
    table: str, f: NewSegment | None, target: Target, pid: int, ncore: int, sfx: str
) -> Segment:
    chunk, version = target
    if f is None:  # tombstone: no rows, hides what lies below
        return Segment(table, chunk, version, pid, ncore, suffix=sfx)
    return Segment(
        table,
        chunk,
        version,
        pid,
        ncore,
        f.location,
        f.row_count,
        f.size_bytes,
        f.min_time,
        f.max_time,
        suffix=sfx,
    )


def overwrite_segments(
    table: str,
    files: Sequence[NewSegment],
    chunks: Iterable[Interval],
    version: int,
    suffix: str = "",
    tombstones: bool = True,
) -> list[Segment]:
    """The new version's segments: partitions ``0..n-1`` of each chunk, complete at
    ``n``; a tombstone for each of ``chunks`` that got no file (``tombstones``)."""
    by_chunk: dict[Interval, list[NewSegment]] = {c: [] for c in chunks}
    for f in files:
        by_chunk.setdefault(f.chunk, []).append(f)
    out: list[Segment] = []
    for chunk, group in sorted(by_chunk.items()):
        if not group and tombstones:
            out.append(_segment(table, None, (chunk, version), 0, 1, suffix))
        for pid, f in enumerate(group):
            out.append(_segment(table, f, (chunk, version), pid, len(group), suffix))
    return out


def overshadowed(live: Iterable[Segment], new: Iterable[Segment]) -> list[Segment]:
    """The ``live`` segments that ``new`` hides everywhere once published."""
    live = list(live)
    timeline = Timeline.build(live)
    for seg in new:
        timeline.add(seg)
    return [s for s in live if timeline.is_overshadowed(s)]


def refuse_partial(
    live: list[Segment],
    gone: list[Segment],
    remove_ids: tuple[str, ...],
    chunks: tuple[Interval, ...],
) -> None:
    """An overwrite of an upsert table replaces whole segments: one that would show in
    part only (coarser than the overwrite's chunks, after a major compaction to a larger
    granularity) would keep records the key index counts as gone. Raises UpsertError."""
    out = {s.id for s in gone} | set(remove_ids)
    for seg in live:
        if seg.id not in out and any(seg.interval.overlaps(c) for c in chunks):
            raise UpsertError(
                f"this overwrite covers only part of segment {seg.id} ({seg.interval}); an "
                "overwrite of an upsert table replaces whole segments: "
                f"overwrite (or refresh) its whole span {seg.interval}; nothing was published"
            )


def refuse_named(gone: list[Segment], entries: Iterable[LineageEntry]) -> None:
    """A rewrite (major compaction) may not retire segments that a lineage entry in
    progress, or one that may still be rolled back, names: ending or reverting it
    would then show or hide the wrong rows. Raises CommitConflictError."""
    for e in entries:
        if e.state in (LineageState.IN_PROGRESS, LineageState.COMPLETED):
            named = sorted(e.ids & {s.id for s in gone})
            if named:
                raise CommitConflictError(
                    f"segment {named[0]} is named by lineage entry {e.id} ({e.state}); a "
                    "major compaction leaves it alone until the entry is reverted or "
                    "cleaned up by retention — compact later; nothing was published"
                )


def _single(timeline: Timeline, chunk: Interval, strict: bool) -> Target | None:
    """The one version covering exactly ``chunk`` in ``timeline``; None when nothing
    covers it (or, unless ``strict``, when several versions or another granularity do).

    Raises ChunkLayoutError (``strict``) when several versions or another granularity cover
    it: an append there would be ambiguous."""
    entries = timeline.lookup(chunk)
    if not entries:
        return None
    e = entries[0]
    if len(entries) == 1 and e.chunk_interval.contains(chunk) and e.interval == chunk:
        return (e.chunk_interval, e.version)
    if not strict:
        return None
    raise ChunkLayoutError(
        f"cannot append into {chunk}: it is covered by several versions or "
        "a chunk of another granularity; overwrite that interval instead",
        chunk,
    )


def finer_or_equal(preferred: Granularity) -> list[Granularity]:
    """``preferred`` and the granularities finer than it whose chunks nest in its
    chunks, coarsest first (no WEEK under a MONTH: a week may cross months)."""
    if preferred is Granularity.WEEK:
        return [Granularity.WEEK, Granularity.DAY, Granularity.HOUR]
    order = [Granularity.ALL, Granularity.YEAR, Granularity.QUARTER, Granularity.MONTH]
    order += [Granularity.DAY, Granularity.HOUR]
    return order[order.index(preferred) :]


def allocate(
    hour: int, pieces: Sequence[tuple[Interval, Interval]], preferred: Granularity
) -> Interval:
    """The chunk an appended row of hour ``hour`` goes to (Druid's segment allocation),
    given the visible ``pieces`` of the timeline around it, each (where it shows, its
    chunk): the chunk of the piece showing at that hour if one does; else the bucket
    of the first granularity, ``preferred`` then finer ones (see
    :func:`finer_or_equal`), that no piece overlaps. Chunks are aligned to hours, so
    the hour itself is the last resort."""
    for shown, chunk in pieces:
        if shown.start <= hour < shown.end:
            return chunk
    for g in finer_or_equal(preferred):
        start = g.floor(hour)
        bucket = Interval.of(start, g.next_start(start))
        if not any(shown.overlaps(bucket) for shown, _ in pieces):
            return bucket
    return Interval.of(hour, Granularity.HOUR.next_start(hour))  # unreachable


def append_targets(
    chunks: Iterable[Interval],
    live: Iterable[Segment],
    new_version: int,
    pending: Iterable[Segment] = (),
) -> tuple[dict[Interval, Target], bool]:
    """Where appended rows of each chunk go: the chunk's visible version; for an empty
    chunk, the version of what lineage hides there but may show again (``pending``: an
    unfinished push's segments, a completed entry's sources), so that neither hides
    the other once both show; else ``new_version`` (second value: whether it was
    used).

    Raises ChunkLayoutError when a chunk is covered by several versions or by a chunk of
    another granularity (an append there would be ambiguous).
    """
    timeline = Timeline.build(live)
    waiting: Timeline | None = None
    targets: dict[Interval, Target] = {}
    used_new = False
    for chunk in sorted(set(chunks)):
        got = _single(timeline, chunk, strict=True)
        if got is None:
            if waiting is None:
                waiting = Timeline.build(pending)
            got = _single(waiting, chunk, strict=False)  # pushes disagree: a new version
        if got is None:
            got = (chunk, new_version)
            used_new = True
        targets[chunk] = got
    return targets, used_new


def append_segments(
    table: str,
    files: Sequence[NewSegment],
    targets: Mapping[Interval, Target],
    next_pid: Mapping[Target, int],
    suffix: str = "",
) -> list[Segment]:
    """Appended files as segments: partition ids after ``next_pid`` of their target,
    in file order; no core partitions (any set of them is complete)."""
    pids = dict(next_pid)
    out = []
    for f in files:
        target = targets[f.chunk]
        pid = pids.get(target, 0)
        pids[target] = pid + 1
        out.append(_segment(table, f, target, pid, 0, suffix))
    return out


def hidden_by_newer(visible: Iterable[Segment], mine: Iterable[Segment]) -> Segment | None:
    """The first of ``mine`` that a higher version among ``visible`` would hide where
    it holds rows (between its first and last row's time: a newer version of one day
    of a MONTH chunk hides nothing of rows on other days)."""
    timeline = Timeline.build(visible)
    for seg in mine:
        timeline.add(seg)
        span = seg.interval
        if seg.min_time is not None and seg.max_time is not None:
            rows = Interval.of(seg.min_time, seg.max_time + 1)
            span = Interval.of(max(span.start, rows.start), min(span.end, rows.end))
        if any(e.version > seg.version for e in timeline.lookup(span)):
            return seg
    return None


def _row_span(seg: Segment) -> Interval | None:
    """The span of ``seg``'s time values (None: unknown)."""
    if seg.min_time is None or seg.max_time is None:
        return None
    return Interval.of(seg.min_time, seg.max_time + 1)


def carried_segments(
    table: str, carried: Sequence[Segment], new: Sequence[Segment], suffix: str = ""
) -> list[tuple[Segment, Segment]]:
    """Copies of ``carried`` (segments appended while an overwrite ran, inside its
    chunks) on the overwrite's version, so their rows stay visible on top of it —
    Druid's upgrade of concurrently appended segments. Each copy points at the same
    file and joins the ``new`` chunk containing it after that chunk's partitions, as
    an appended partition would (no core count of its own). Returns (original, copy)
    pairs.

    A segment appended into a chunk coarser than the overwrite's (after a major
    compaction to a larger granularity) joins the new chunk holding its rows — an
    append writes one file per chunk of the table's granularity — and is left as it is
    when the overwrite hides none of them. Raises CommitConflictError (retryable) when
    its rows lie in several new chunks (an overwrite finer than the table's chunks):
    the overwrite must be retried.
    """
    chunks: dict[Interval, list[Segment]] = {}
    for seg in new:
        chunks.setdefault(seg.interval, []).append(seg)
    next_pid = {c: max(s.partition_id for s in segs) + 1 for c, segs in chunks.items()}
    out = []
    for seg in sorted(carried, key=lambda s: (s.interval, s.version, s.partition_id)):
        home = next((c for c in chunks if c.contains(seg.interval)), None)
        rows = _row_span(seg)
        if home is None and rows is not None:  # appended into a coarser chunk: its rows
            home = next((c for c in chunks if c.contains(rows)), None)  # are of one
            if home is None and not any(c.overlaps(rows) for c in chunks):  # table chunk
                continue  # rows the overwrite does not hide: they stay visible as they are
        if home is None:
            raise CommitConflictError(
                f"segment {seg.id}, appended while this overwrite ran, spans more than one "
                "of its chunks; nothing was published — retry the overwrite (it will "
                "replace those rows too)",
                retryable=True,
            )
        version = chunks[home][0].version
        out.append(
            (
                seg,
                Segment(
                    table,
                    home,
                    version,
                    next_pid[home],
                    0,  # not a core partition: removing the chunk's own ones hides no copy
                    seg.location,
                    seg.row_count,
                    seg.size_bytes,
                    seg.min_time,
                    seg.max_time,
                    suffix=suffix,
                ),
            )
        )
        next_pid[home] += 1
    return out


def compacted_segments(table: str, run: CompactedRun, first_pid: int) -> list[Segment]:
    """A minor compaction run's outputs: partition ids from ``first_pid`` (later
    generations' space), one atomic update group over the run's root range."""
    return [
        Segment(
            table,
            run.chunk,
            run.version,
            first_pid + i,
            run.num_core_partitions,
            f.location,
            f.row_count,
            f.size_bytes,
            f.min_time,
            f.max_time,
            minor_version=run.minor_version,
            root_partition_range=run.root_range,
            atomic_update_group_size=len(run.files),
        )
        for i, f in enumerate(run.files)
    ]


def restored_segments(
    table: str,
    shown: Sequence[Segment],
    first_version: int,
    copies: Mapping[str, NewSegment] | None = None,
) -> tuple[list[Segment], int]:
    """Copies of the segments an earlier snapshot showed (``shown``: its live segments
    lineage did not hide; tombstones too), for a restore: the same files, intervals,
    partitions and overwrite fields, each version renumbered from ``first_version`` up
    in the same order — a timeline of the copies shows what the snapshot showed, above
    every version the table has; a file ``copies`` names (by location) replaced by its
    copy. Returns them and the highest version taken (None: none,
    ``first_version - 1``)."""
    copies = copies or {}
    order = {v: first_version + i for i, v in enumerate(sorted({s.version for s in shown}))}
    out = [
        Segment(
            table,
            s.interval,
            order[s.version],
            s.partition_id,
            s.num_core_partitions,
            *(
                (c.location, c.row_count, c.size_bytes)
                if (c := copies.get(s.location or "")) is not None
                else (s.location, s.row_count, s.size_bytes)
            ),
            s.min_time,
            s.max_time,
            suffix=s.suffix,
            minor_version=s.minor_version,
            root_partition_range=s.root_partition_range,
            atomic_update_group_size=s.atomic_update_group_size,
        )
        for s in shown
    ]
    return out, first_version + len(order) - 1
