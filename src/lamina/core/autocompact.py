"""Auto-compaction: which chunks to compact under a table's policy, and why. Pure.

A policy lives in table properties (``compaction.*``). Each chunk gets a status with a
reason — Druid's compaction status, with two of its complaints fixed:

* the *compaction state* is a fingerprint of the policy settings that shape a chunk's
  data (target rows, segment granularity, sort, rollup), recorded with each
  compaction commit; a chunk whose segments all come from compactions under the
  current fingerprint is COMPLETE and never picked again (Druid #8481: intervals
  re-picked forever), and a policy change makes exactly the chunks compacted under
  another fingerprint PENDING, with that reason;
* late data trickling into a compacted chunk (segments that no compaction wrote)
  makes it PENDING for a *minor* compaction, which runs beside appends (Druid #6136).

Upsert tables: a segment whose deletion vectors supersede ``max_superseded_percent``
of its records or more makes its chunk PENDING for a minor compaction that rewrites it
without them (Pinot's upsert compaction, ``invalidRecordsThresholdPercent``), however
it was compacted before.

Chunks are considered newest first. ``skip_offset_from_latest`` is measured from the
end of the newest segment (as Druid does), not from the wall clock.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lamina.core.interval import Granularity, Interval
from lamina.core.properties import duration_us
from lamina.core.segment import Segment
from lamina.errors import CompactionError, PropertyError

PREFIX = "compaction."
KEYS = (
    "skip_offset_from_latest",
    "small_segment_rows",
    "max_segments_per_chunk",
    "target_rows_per_segment",
    "segment_granularity",
    "sort_by",
    "rollup",
    "nice",
    "max_superseded_percent",
)
#: how much lower than ingestion a minor compaction's reading and writing runs on the
#: CPU (nice units; 19: lowest)
DEFAULT_NICE = 19
#: an upsert table's segment with this share (%) of superseded records or more is
#: rewritten without them by a minor compaction
DEFAULT_MAX_SUPERSEDED_PCT = 10


@dataclass(frozen=True)
class Policy:
    """A table's compaction policy (see :func:`policy_of` for the properties)."""

    target_rows: int
    skip_offset_us: int = 0
    small_rows: int | None = None  # default: half the target
    max_segments: int = 0  # 0: no limit
    segment_granularity: Granularity | None = None
    sort_by: tuple[str, ...] = ()
    rollup: Mapping[str, Any] | None = None
    nice: int = DEFAULT_NICE  # CPU priority of the work, not of its result: no fingerprint
    max_superseded_pct: int = DEFAULT_MAX_SUPERSEDED_PCT  # upsert tables; see module doc

    @property
    def small(self) -> int:
        """A segment with fewer rows is small."""
        return self.small_rows if self.small_rows is not None else self.target_rows // 2

    @property
    def rewrites(self) -> bool:
        """Whether reaching the policy needs a major compaction (a re-partition, a
        sort or a rollup) rather than merging small segments."""
        return bool(self.segment_granularity or self.sort_by or self.rollup)

    @property
    def fingerprint(self) -> str:
        """The compaction state that segments compacted under this policy record."""
        doc = {
            "target_rows": self.target_rows,
            "segment_granularity": self.segment_granularity and self.segment_granularity.value,
            "sort_by": list(self.sort_by),
            "rollup": self.rollup,
        }
        raw = json.dumps(doc, sort_keys=True, default=str).encode()
        return hashlib.sha256(raw).hexdigest()[:16]


def _int(props: Mapping[str, str], key: str, default: int, least: int) -> int:
    raw = props.get(PREFIX + key)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = least - 1
    if value < least:
        raise PropertyError(f"{PREFIX}{key} = {raw!r}: use a whole number >= {least}")
    return value


def policy_of(props: Mapping[str, str], table_target_rows: int) -> Policy:
    """The policy in ``compaction.*`` properties: ``skip_offset_from_latest`` (a
    duration, default 0s), ``small_segment_rows`` (default: half the target),
    ``max_segments_per_chunk`` (0: none), ``target_rows_per_segment`` (default: the
    table's), ``segment_granularity``, ``sort_by`` (comma-separated), ``rollup``
    (JSON), ``nice`` (0-19, default 19: how much lower than normal the CPU priority of
    a minor compaction's reading and writing is), ``max_superseded_percent`` (1-100,
    default 10; upsert tables). Raises PropertyError."""
    unknown = sorted(
        k[len(PREFIX) :] for k in props if k.startswith(PREFIX) and k[len(PREFIX) :] not in KEYS
    )
    if unknown:
        raise PropertyError(f"unknown property {PREFIX}{unknown[0]}; known: {', '.join(KEYS)}")
    target = _int(props, "target_rows_per_segment", table_target_rows, 1)
    small = props.get(PREFIX + "small_segment_rows")
    gran = props.get(PREFIX + "segment_granularity")
    rollup = props.get(PREFIX + "rollup")
    try:
        parsed_rollup = None if not rollup else json.loads(rollup)
    except ValueError:
        raise PropertyError(f"{PREFIX}rollup = {rollup!r} is not JSON") from None
    sort_by = props.get(PREFIX + "sort_by") or ""
    return Policy(
        target_rows=target,
        skip_offset_us=duration_us(
            props.get(PREFIX + "skip_offset_from_latest", "0s"), PREFIX + "skip_offset_from_latest"
        ),  # fmt: skip
        small_rows=None if small is None else _int(props, "small_segment_rows", 0, 1),
        max_segments=_int(props, "max_segments_per_chunk", 0, 0),
        segment_granularity=None if not gran else Granularity.parse(gran),
        sort_by=tuple(c.strip() for c in sort_by.split(",") if c.strip()),
        rollup=parsed_rollup,
        nice=nice_of(props),
        max_superseded_pct=superseded_pct_of(props),
    )


def superseded_pct_of(props: Mapping[str, str]) -> int:
    """``compaction.max_superseded_percent``: 1 to 100. Raises PropertyError."""
    value = _int(props, "max_superseded_percent", DEFAULT_MAX_SUPERSEDED_PCT, 1)
    if value > 100:
        raise PropertyError(
            f"{PREFIX}max_superseded_percent = {props[PREFIX + 'max_superseded_percent']!r}: "
            "use 1 to 100"
        )
    return value


def to_purge(visible: Sequence[Segment], superseded: Mapping[str, int], pct: int) -> frozenset[str]:
    """The segments (ids) with ``pct`` % or more of their records superseded
    (``superseded``: segment id -> superseded records)."""
    return frozenset(
        s.id for s in visible if s.row_count and superseded.get(s.id, 0) * 100 >= pct * s.row_count
    )


def nice_of(props: Mapping[str, str]) -> int:
    """``compaction.nice``: 0 (normal priority) to 19 (lowest). Raises PropertyError."""
    value = _int(props, "nice", DEFAULT_NICE, 0)
    if value > 19:
        raise PropertyError(f"{PREFIX}nice = {props[PREFIX + 'nice']!r}: use 0 to 19")
    return value


@dataclass(frozen=True)
class ChunkStatus:
    """What auto-compaction does with one chunk: ``action`` minor, major or none."""

    chunk: Interval
    status: str  # PENDING, COMPLETE or SKIPPED
    action: str  # "minor", "major" or "none"
    reason: str
    segments: int = 0
    small: int = 0
    inputs: tuple[str, ...] = field(default=(), repr=False)


def statuses(
    visible: Sequence[Segment],
    compacted: Mapping[int, str],
    policy: Policy,
    purge: frozenset[str] = frozenset(),
) -> list[ChunkStatus]:
    """Each chunk's status, newest first. ``visible``: the table's visible data
    segments (whole chunks); ``compacted``: commit id -> fingerprint of the table's
    compaction commits; ``purge``: segments to rewrite without their superseded
    records (:func:`to_purge`)."""
    by_chunk: dict[Interval, list[Segment]] = {}
    for s in visible:
        by_chunk.setdefault(s.interval, []).append(s)
    if not by_chunk:
        return []
    newest = max(c.end for c in by_chunk)
    horizon = newest - policy.skip_offset_us
    out = []
    for chunk in sorted(by_chunk, key=lambda c: (c.end, c.start), reverse=True):
        segs = by_chunk[chunk]
        small = sum(1 for s in segs if s.row_count < policy.small)
        state, action, reason = _decide(chunk, segs, small, compacted, policy, horizon, purge)
        out.append(ChunkStatus(chunk, state, action, reason, len(segs), small))
    return out


def _decide(
    chunk: Interval,
    segs: Sequence[Segment],
    small: int,
    compacted: Mapping[int, str],
    policy: Policy,
    horizon: int,
    purge: frozenset[str] = frozenset(),
) -> tuple[str, str, str]:
    """(status, action, reason) of one chunk."""
    n = len(segs)
    if policy.skip_offset_us and chunk.end > horizon:
        return "SKIPPED", "none", "within skip_offset_from_latest of the newest data"
    stale = sum(1 for s in segs if s.id in purge)
    if stale and not policy.rewrites:
        why = f">= {policy.max_superseded_pct}% of their records superseded by newer ones"
        return "PENDING", "minor", f"{stale} segment(s) with {why}"
    # a carried copy (suffix) holds rows appended during a compaction, not its output
    prints = {None if s.suffix else compacted.get(s.commit_id or -1) for s in segs}
    late = sum(1 for s in segs if s.suffix or (s.commit_id or -1) not in compacted)
    if policy.rewrites and prints != {policy.fingerprint}:
        if prints <= {None}:
            why = "never compacted"
        elif None not in prints:
            why = "compacted under another policy"
        else:
            why = f"{late} segment(s) written since its compaction"
        return "PENDING", "major", f"{why}; the policy re-partitions, sorts or rolls up"
    if small >= 2:
        if late == n:
            return "PENDING", "minor", f"{small} small segments (< {policy.small:,} rows)"
        return "PENDING", "minor", f"{late} segment(s) written since its compaction, {small} small"
    if prints == {policy.fingerprint}:
        return "COMPLETE", "none", "compacted under this policy"
    if policy.max_segments and n > policy.max_segments:
        why = f"{n} segments > max_segments_per_chunk {policy.max_segments}, too few small"
        return "PENDING", "major", why
    return "COMPLETE", "none", "no small segments to merge"


def check_policy(policy: Policy, schema_names: Sequence[str]) -> None:
    """Raises CompactionError when the policy names unknown columns."""
    for col in policy.sort_by:
        if col not in schema_names:
            raise CompactionError(f"{PREFIX}sort_by names {col!r}, not a column of the table")
