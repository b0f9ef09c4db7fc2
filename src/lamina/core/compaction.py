"""Minor compaction planning: which small segments of a chunk merge, and into what.

Pure, no I/O. A minor compaction rewrites some segments of one chunk at the *same*
major version, with a higher minor version, so that appends into the chunk carry on
while it runs (seed 001). Each output records the union of its inputs' root partition
ranges; the outputs of one run form one atomic update group. Three rules keep those
ranges consecutive, so that overshadowing is decided from two numbers (the seed's
restrictions):

1. first-generation segments compact together only when their partition ids are
   adjacent;
2. later generations compact only with segments from adjacent roots;
3. all segments created from the same first-generation segments compact together.

In terms of root ranges: the inputs' ranges, grouped into *units* of equal range,
must tile one consecutive range, and every visible segment of the chunk whose range
lies inside it must be an input.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import groupby

from lamina.core.interval import Interval
from lamina.core.segment import Segment
from lamina.errors import CompactionError


@dataclass(frozen=True)
class MinorRun:
    """Segments of one chunk and major version merged into ``outputs`` segments.

    ``root_range`` is the union of the inputs' root ranges, ``minor_version`` one
    above the highest input's: the outputs overshadow exactly the inputs.
    """

    chunk: Interval
    version: int
    inputs: tuple[Segment, ...]
    root_range: tuple[int, int]
    minor_version: int
    outputs: int

    @property
    def rows(self) -> int:
        return sum(s.row_count for s in self.inputs)


def _units(segments: Iterable[Segment]) -> list[list[Segment]]:
    """Segments grouped by equal root range, in root order."""
    ordered = sorted(segments, key=lambda s: (s.root_range, s.partition_id))
    return [list(g) for _, g in groupby(ordered, key=lambda s: s.root_range)]


def _name(unit: list[Segment]) -> str:
    lo, hi = unit[0].root_range
    return f"P{lo}" if hi == lo + 1 else f"the segments from P{lo}..P{hi - 1}"


def check_inputs(inputs: Sequence[Segment], visible: Sequence[Segment]) -> tuple[int, int]:
    """The root range the inputs cover, once they obey the three rules; ``visible``:
    the chunk's visible segments of that version. Raises CompactionError."""
    if not inputs:
        raise CompactionError("nothing to compact: pass at least one segment")
    first = inputs[0]
    if any((s.interval, s.version) != (first.interval, first.version) for s in inputs):
        raise CompactionError(
            "a minor compaction merges segments of one chunk and version; "
            f"{sorted({(str(s.interval), s.version) for s in inputs})} were given"
        )
    shown = {s.id for s in visible}
    hidden = sorted(s.id for s in inputs if s.id not in shown or s.is_tombstone)
    if hidden:
        raise CompactionError(
            f"segment {hidden[0]} is not visible (overshadowed, removed or a tombstone): "
            "compact only visible segments"
        )
    units = _units(inputs)
    for a, b in zip(units, units[1:], strict=False):
        if a[0].root_range[1] != b[0].root_range[0]:
            gen = "partitions" if a[0].minor_version == b[0].minor_version == 0 else "roots"
            raise CompactionError(
                f"{_name(a)} and {_name(b)} are not adjacent {gen}: a minor compaction "
                "merges consecutive partitions only (compact what lies between too, or "
                "run a major compaction)"
            )
    lo, hi = units[0][0].root_range[0], units[-1][0].root_range[1]
    ids = {s.id for s in inputs}
    left = sorted(
        s.id
        for s in visible
        if s.id not in ids
        and (s.interval, s.version) == (first.interval, first.version)
        and lo < s.root_range[1]
        and s.root_range[0] < hi
    )
    if left:
        raise CompactionError(
            f"segment {left[0]} was created from the same first-generation segments as "
            "the inputs: segments from the same roots compact together — include it"
        )
    return lo, hi


def minor_run(
    inputs: Sequence[Segment],
    visible: Sequence[Segment],
    target_rows: int,
    kept: Mapping[str, int] | None = None,
) -> MinorRun:
    """The run merging ``inputs`` (see :func:`check_inputs`) into segments of about
    ``target_rows`` rows; ``kept``: the rows a segment keeps when they are fewer than
    it holds (an upsert table's, less its superseded records). Raises CompactionError."""
    lo, hi = check_inputs(inputs, visible)
    rows = sum(_rows(s, kept) for s in inputs)
    first = inputs[0]
    return MinorRun(
        chunk=first.interval,
        version=first.version,
        inputs=tuple(sorted(inputs, key=lambda s: (s.root_range, s.partition_id))),
        root_range=(lo, hi),
        minor_version=max(s.minor_version for s in inputs) + 1,
        outputs=max(1, -(-rows // target_rows)),
    )


def _rows(s: Segment, kept: Mapping[str, int] | None) -> int:
    return s.row_count if not kept else kept.get(s.id, s.row_count)


def plan_minor(
    visible: Iterable[Segment],
    target_rows: int,
    small_rows: int | None = None,
    purge: Collection[str] = frozenset(),
    kept: Mapping[str, int] | None = None,
) -> list[MinorRun]:
    """Runs of adjacent small segments to merge, per chunk and version, from a
    snapshot's visible (whole) segments: consecutive units whose rows stay within
    ``target_rows`` in all, each run holding at least two segments. A unit of
    ``small_rows`` or more (default: half the target), a gap in the roots, or a
    tombstone ends a run. A unit holding a segment of ``purge`` (an upsert table's,
    to rewrite without its superseded records) counts as small, and makes a run of
    itself alone. Sizes count the rows each segment keeps (``kept``, default all), as
    Pinot sizes its merges by valid records."""
    if target_rows < 1:
        raise CompactionError(f"target_rows_per_segment={target_rows}: pass a number >= 1")
    small_rows = -(-target_rows // 2) if small_rows is None else small_rows
    by_chunk: dict[tuple[Interval, int], list[Segment]] = {}
    for s in visible:
        by_chunk.setdefault((s.interval, s.version), []).append(s)
    runs: list[MinorRun] = []
    for key in sorted(by_chunk):
        segs = by_chunk[key]
        groups: list[list[list[Segment]]] = [[]]  # runs of units; the last one is open
        open_rows = 0  # rows of the open run
        for unit in _units(segs):
            rows = sum(_rows(s, kept) for s in unit)
            stale = any(s.id in purge for s in unit)
            small = (rows < small_rows or stale) and not any(s.is_tombstone for s in unit)
            current = groups[-1]
            if current and (
                not small
                or current[-1][0].root_range[1] != unit[0].root_range[0]
                or open_rows + rows > target_rows
            ):
                groups.append([])
                open_rows = 0
            if small:
                groups[-1].append(unit)
                open_rows += rows
        for group in groups:
            inputs = [s for unit in group for s in unit]
            if len(inputs) >= 2 or any(s.id in purge for s in inputs):
                runs.append(minor_run(inputs, segs, target_rows, kept))
    return runs
