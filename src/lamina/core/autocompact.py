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
  makes it PENDING for a *minor* compaction, which runs beside appends (Druid #6136);
  only small segments a minor compaction cannot merge (not adjacent) make it a major
  one, and only when rewriting the chunk leaves fewer segments.

Upsert tables: a segment whose deletion vectors supersede ``max_superseded_percent``
of its records or more makes its chunk PENDING for a minor compaction that rewrites it
without them (Pinot's upsert compaction, ``invalidRecordsThresholdPercent``), however
it was compacted before; so does, with ``max_vector_age`` set, a segment holding a
record superseded at least that long ago (Hudi's merge-on-read compaction by time).

Chunks are considered newest first. ``skip_offset_from_latest`` is measured from the
end of the newest segment (as Druid does; with a target granularity, from the end of
its bucket there), not from the wall clock.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lamina.core.compaction import plan_minor
from lamina.core.interval import MIN_US, Granularity, Interval
from lamina.core.properties import (
    COMPACTION_KEYS,
    COMPACTION_PREFIX,
    DEFAULTS,
    WRITE_MODE,
    check_names,
    duration_us,
    write_mode,
)
from lamina.core.segment import Segment
from lamina.errors import CompactionError, PropertyError

if TYPE_CHECKING:
    import pyarrow as pa

PREFIX = COMPACTION_PREFIX
KEYS = COMPACTION_KEYS
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
    #: upsert tables: a segment whose oldest superseding vector is this old (µs) or
    #: older is rewritten without its superseded records, whatever their share (None: off)
    max_vector_age_us: int | None = None
    #: the granularity the policy names, even the table's own (``segment_granularity``
    #: is None then): a chunk of another length is re-partitioned to it
    chunk_granularity: Granularity | None = None

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
    def state(self) -> dict[str, Any]:
        """The compaction state segments compacted under this policy record: the
        settings that shape their data (JSON)."""
        doc = {
            "target_rows": self.target_rows,
            "segment_granularity": self.segment_granularity and self.segment_granularity.value,
            "sort_by": list(self.sort_by),
            "rollup": self.rollup,
        }
        normal: dict[str, Any] = json.loads(json.dumps(doc, sort_keys=True, default=str))
        return normal

    @property
    def fingerprint(self) -> str:
        """A digest of :attr:`state`."""
        return fingerprint_of(self.state)

    def met_by(self, state: Mapping[str, Any]) -> bool:
        """Whether segments compacted with ``state`` (a commit's; an older commit
        holds only its ``fingerprint``) are as this policy wants them, as Druid decides:
        the target size always counts; a sort order and a rollup only when the policy
        names one (a policy without them accepts any). Granularity is read off the
        chunk itself (:func:`statuses`)."""
        if "target_rows" not in state:
            return state.get("fingerprint") == self.fingerprint
        mine = self.state
        return (
            state["target_rows"] == mine["target_rows"]
            and (not self.sort_by or state.get("sort_by") == mine["sort_by"])
            and (self.rollup is None or state.get("rollup") == mine["rollup"])
        )


def fingerprint_of(state: Mapping[str, Any]) -> str:
    """A digest of a compaction state (:attr:`Policy.state`)."""
    raw = json.dumps(state, sort_keys=True, default=str).encode()
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
    default 10; upsert tables), ``max_vector_age`` (a duration; unset: off; upsert
    tables), ``inline`` (true or false, default false; upsert tables).
    Raises PropertyError."""
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
    inline_of(props)  # checked here; read by lamina.operations.compaction.inline
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
        max_vector_age_us=vector_age_of(props),
    )


def check_properties(props: dict[str, str]) -> dict[str, str]:
    """Validate the properties lamina interprets (``compaction.*`` by
    :func:`policy_of`'s rules); return them normalized. Raises PropertyError."""
    check_names(list(props))
    out = dict(props)
    for key in DEFAULTS:
        if key in out:
            duration_us(out[key], key)
    if "ingestion_type" in out:
        value = out["ingestion_type"].upper()
        if value not in ("APPEND", "REFRESH"):
            raise PropertyError(
                f"ingestion_type = {out['ingestion_type']!r}; use APPEND or REFRESH"
            )
        out["ingestion_type"] = value
    if "consistent_push" in out:
        value = out["consistent_push"].lower()
        if value not in ("true", "false"):
            raise PropertyError(f"consistent_push = {out['consistent_push']!r}; use true or false")
        out["consistent_push"] = value
    if "target_rows_per_segment" in out:
        try:
            ok = int(out["target_rows_per_segment"]) > 0
        except ValueError:
            ok = False
        if not ok:
            raise PropertyError("target_rows_per_segment must be a positive whole number")
    if WRITE_MODE in out:
        out[WRITE_MODE] = write_mode(out)
    if any(k.startswith(PREFIX) for k in out):
        policy_of(out, 1)
    if INLINE in out:
        out[INLINE] = str(inline_of(out)).lower()
    return out


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


def vector_age_of(props: Mapping[str, str]) -> int | None:
    """``compaction.max_vector_age`` in µs (a duration such as ``1h``; None: unset, the
    rule is off). Raises PropertyError."""
    raw = props.get(PREFIX + "max_vector_age")
    return None if raw is None else duration_us(raw, PREFIX + "max_vector_age")


#: the property that makes an upsert's writer compact right after its commit
INLINE = PREFIX + "inline"


def inline_of(props: Mapping[str, str]) -> bool:
    """``compaction.inline``: true or false (default false). Raises PropertyError."""
    raw = props.get(INLINE)
    if raw is None:
        return False
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise PropertyError(f"{INLINE} = {raw!r}; use true or false")
    return value == "true"


def to_age_out(oldest: Mapping[str, int], max_age_us: int | None, now_us: int) -> frozenset[str]:
    """The segments (ids) whose oldest superseding vector completed ``max_age_us`` or
    more before ``now_us`` (``oldest``: segment id -> that vector's commit's completion
    time, µs; only segments with superseded records). None: the rule is off."""
    if max_age_us is None:
        return frozenset()
    return frozenset(i for i, at in oldest.items() if now_us - at >= max_age_us)


def duration_text(us: int) -> str:
    """µs as the largest whole unit of a duration property (``90s``, ``2h``, ``7d``)."""
    for unit, secs in (("d", 86400), ("h", 3600), ("m", 60)):
        if us and us % (secs * 1_000_000) == 0:
            return f"{us // (secs * 1_000_000)}{unit}"
    return f"{us / 1_000_000:g}s"


def _purge_reason(stale: Sequence[str], aged: frozenset[str], policy: Policy) -> str:
    """Why ``stale`` segments are rewritten without their superseded records: their
    share (``max_superseded_percent``), or, for ``aged`` ones under it, their age."""
    by_age = sum(1 for i in stale if i in aged)
    parts = []
    if len(stale) > by_age:
        parts.append(
            f"{len(stale) - by_age} segment(s) with >= {policy.max_superseded_pct}% of their "
            "records superseded by newer ones"
        )
    if by_age:
        age = duration_text(policy.max_vector_age_us or 0)
        parts.append(
            f"{by_age} segment(s) with records superseded {age} ago or more "
            f"(max_vector_age {age}), under {policy.max_superseded_pct}%"
        )
    return "; ".join(parts)


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
    compacted: Mapping[int, Mapping[str, Any]],
    policy: Policy,
    purge: frozenset[str] = frozenset(),
    newest: int | None = None,
    partial: Sequence[Segment] = (),
    kept: Mapping[str, int] | None = None,
    aged: frozenset[str] = frozenset(),
) -> list[ChunkStatus]:
    """Each chunk's status, newest first. ``visible``: the table's visible data
    segments (whole chunks); ``compacted``: commit id -> compaction state of the
    table's compaction commits (:attr:`Policy.state`, or ``{"fingerprint": ...}``);
    ``purge``: segments to rewrite without their superseded records
    (:func:`to_purge`); ``newest``: the end of the table's newest data (default:
    ``visible``'s), from which ``skip_offset_from_latest`` counts, as in Druid — with
    a target granularity, from the end of the bucket holding the newest data (Druid
    buckets the timeline by it first), back to the start of the bucket there, so that
    no bucket reaching into the offset is rewritten. ``partial``: segments of chunks a
    newer version of other chunks hides in part (a minor compaction leaves them; a
    policy that re-partitions, sorts or rolls up rewrites them, as Druid does);
    ``kept``: rows each segment keeps (:func:`lamina.core.compaction.plan_minor`);
    ``aged``: those of ``purge`` only there for their age (:func:`to_age_out`), under
    the percent."""
    by_chunk: dict[Interval, list[Segment]] = {}
    for s in (*visible, *partial):
        by_chunk.setdefault(s.interval, []).append(s)
    hidden_in_part = {s.interval for s in partial}
    if not by_chunk:
        return []
    newest = max(c.end for c in by_chunk) if newest is None else newest
    gran = policy.chunk_granularity
    if policy.skip_offset_us and gran is not None:  # Druid buckets the timeline first
        newest = gran.chunk(newest - 1).end
    horizon = newest - policy.skip_offset_us
    if policy.skip_offset_us and gran is not None:
        horizon = gran.floor(horizon)
    out = []
    for chunk in sorted(by_chunk, key=lambda c: (c.end, c.start), reverse=True):
        segs = by_chunk[chunk]
        small = sum(1 for s in segs if s.row_count < policy.small)
        if chunk in hidden_in_part:
            state, action, reason = _decide_partial(
                chunk, segs, compacted, policy, horizon, purge, aged
            )
        else:
            state, action, reason = _decide(
                chunk, segs, small, compacted, policy, horizon, purge, kept, aged
            )
        out.append(ChunkStatus(chunk, state, action, reason, len(segs), small))
    return out


def in_the_way(
    lock: tuple[Interval, int, bool], interval: Interval, action: str, priority: int
) -> bool:
    """Whether a granted lock (interval, priority, is it an APPEND lock) keeps a
    compaction of ``priority`` out of ``interval``: one of equal or higher priority
    overlapping it — not an APPEND lock, which coexists with a minor compaction's
    SEGMENT locks, and with a major one's REPLACE lock when it lies inside (Druid's
    concurrent locks: the appended segments are carried onto the new version)."""
    iv, p, append = lock
    if p < priority or not iv.overlaps(interval):
        return False
    return not (append and (action == "minor" or interval.contains(iv)))


def skip_locked(
    found: Sequence[ChunkStatus], locked: Sequence[tuple[Interval, int, bool]], priority: int
) -> list[ChunkStatus]:
    """``found`` with each PENDING chunk that a granted lock of ``priority`` or more
    keeps out (``locked``: interval, priority, is it an APPEND lock; see
    :func:`in_the_way`) SKIPPED instead, as Druid's coordinator skips the intervals
    tasks of equal or higher priority lock: a held lock stalls compaction of its
    chunks only, never of the others."""
    out = []
    for st in found:
        by = [lk[1] for lk in locked if in_the_way(lk, st.chunk, st.action, priority)]
        if st.status == "PENDING" and by:
            why = f"a task lock of priority {max(by)} holds it (compacted once it ends)"
            st = ChunkStatus(st.chunk, "SKIPPED", "none", why, st.segments, st.small)
        out.append(st)
    return out


def _decide(
    chunk: Interval,
    segs: Sequence[Segment],
    small: int,
    compacted: Mapping[int, Mapping[str, Any]],
    policy: Policy,
    horizon: int,
    purge: frozenset[str] = frozenset(),
    kept: Mapping[str, int] | None = None,
    aged: frozenset[str] = frozenset(),
) -> tuple[str, str, str]:
    """(status, action, reason) of one chunk."""
    n = len(segs)
    if policy.skip_offset_us and chunk.end > horizon:
        return "SKIPPED", "none", "within skip_offset_from_latest of the newest segment"
    stale = [s.id for s in segs if s.id in purge]
    if stale and not policy.rewrites:
        return "PENDING", "minor", _purge_reason(stale, aged, policy)
    # a carried copy (suffix) holds rows appended during a compaction, not its output
    states = [None if s.suffix else compacted.get(s.commit_id or -1) for s in segs]
    late = sum(1 for st in states if st is None)
    other = sum(1 for st in states if st is not None and not policy.met_by(st))
    gran = policy.chunk_granularity
    if gran is not None and chunk.start > MIN_US and chunk != gran.chunk(chunk.start):
        why = _why(n, late, n - late)  # compacted into other chunks: another policy
        return "PENDING", "major", f"{why}; the policy re-partitions into {gran.value} chunks"
    if (policy.sort_by or policy.rollup is not None) and (late or other):
        return "PENDING", "major", f"{_why(n, late, other)}; the policy sorts or rolls up"
    if small >= 2 and plan_minor(segs, policy.target_rows, policy.small, purge, kept):
        return "PENDING", "minor", f"{_why(n, late, other, small)}"
    fewer = -(-sum(s.row_count for s in segs) // policy.target_rows) < n
    if small >= 2 and late and fewer:  # a minor compaction could never merge them
        why = f"{_why(n, late, other, small)}, which no minor compaction merges: rewritten"
        return "PENDING", "major", why
    if other:  # another target size, say: rewritten to this one (as Druid does)
        return "PENDING", "major", _why(n, late, other)
    if not late:
        return "COMPLETE", "none", "compacted under this policy"
    if policy.max_segments and n > policy.max_segments:
        why = f"{n} segments > max_segments_per_chunk {policy.max_segments}, too few small"
        return "PENDING", "major", why
    if small >= 2:
        return "COMPLETE", "none", f"{small} small segments, which no compaction would reduce"
    return "COMPLETE", "none", "no small segments to merge"


def _decide_partial(
    chunk: Interval,
    segs: Sequence[Segment],
    compacted: Mapping[int, Mapping[str, Any]],
    policy: Policy,
    horizon: int,
    purge: frozenset[str] = frozenset(),
    aged: frozenset[str] = frozenset(),
) -> tuple[str, str, str]:
    """(status, action, reason) of a chunk a newer version hides in part: rewritten
    when the policy re-partitions, sorts or rolls up and it is not as the policy asks,
    or when it holds superseded records to purge; else left as it is (its visible
    rows are not a whole segment to merge)."""
    if policy.skip_offset_us and chunk.end > horizon:
        return "SKIPPED", "none", "within skip_offset_from_latest of the newest segment"
    n = len(segs)
    states = [None if s.suffix else compacted.get(s.commit_id or -1) for s in segs]
    late = sum(1 for st in states if st is None)
    other = sum(1 for st in states if st is not None and not policy.met_by(st))
    gran = policy.chunk_granularity
    hidden = "partly hidden by a newer version"
    stale = [s.id for s in segs if s.id in purge]
    if stale:  # no minor compaction takes it: rewritten without its superseded records
        return "PENDING", "major", f"{hidden}, {_purge_reason(stale, aged, policy)}"
    if gran is not None and chunk.start > MIN_US and chunk != gran.chunk(chunk.start):
        return "PENDING", "major", f"{hidden}; the policy re-partitions into {gran.value} chunks"
    if (policy.sort_by or policy.rollup is not None) and (late or other):
        return "PENDING", "major", f"{hidden}, {_why(n, late, other)}; the policy sorts or rolls up"
    return "COMPLETE", "none", f"{hidden}: no whole segments to merge"


def _why(n: int, late: int, other: int, small: int = 0) -> str:
    """Why a chunk is PENDING: ``late`` of its ``n`` segments never compacted, ``other``
    compacted under another policy, ``small`` small."""
    if late == n:
        what = f"{small} small segments" if small else "never compacted"
    elif other and not late:
        what = "compacted under another policy"
    elif not late:
        what = "compacted under this policy"
    else:
        what = f"{late} segment(s) written since its compaction"
    return what + (f", {small} small" if small and late != n else "")


#: (finer, coarser) granularities whose chunks nest: every boundary of the coarser is
#: one of the finer (a week can span two months: WEEK nests in none of the calendar ones)


def nest(a: Granularity, b: Granularity) -> bool:
    """Whether chunks of ``a`` and ``b`` nest, one inside the other."""
    return a.nests_in(b) or b.nests_in(a)


def check_sort_by(schema: pa.Schema, columns: Sequence[str], what: str = "sort_by") -> None:
    """Raises CompactionError for a column the schema lacks or cannot sort by (a list,
    struct or map has no order)."""
    import pyarrow as pa  # loads numpy, pyarrow

    for col in columns:
        if col not in schema.names:
            raise CompactionError(
                f"{what} names {col!r}, not a column of the table "
                f"(columns: {', '.join(schema.names)})"
            )
        t = schema.field(col).type
        if pa.types.is_nested(t):
            raise CompactionError(
                f"{what} names {col!r} of type {t}, which has no order: sort by scalar columns"
            )


def check_policy(
    policy: Policy,
    schema: pa.Schema,
    time_column: str | None = None,
    granularity: Granularity | None = None,
    setting: bool = False,
) -> None:
    """Raises CompactionError when the policy names unknown columns or sorts by a
    column without an order, or asks for a segment granularity the table's chunks
    (``granularity``; a table without ``time_column`` has one chunk) do not nest with.
    ``setting``: the policy is being set, and ALL chunks on a time column are refused
    too (a policy stored by an earlier version fails its chunks, not the whole run)."""
    target = policy.segment_granularity
    if setting and target is Granularity.ALL and time_column is not None:
        raise CompactionError(
            f"{PREFIX}segment_granularity = ALL is for tables without a time column; pick "
            "HOUR, DAY, WEEK, MONTH, QUARTER or YEAR"
        )
    if target is not None and granularity is not None and target is not granularity:
        if time_column is None and target is not Granularity.ALL:
            raise CompactionError(
                f"{PREFIX}segment_granularity = {target.value}: the table has no time column, "
                "so one chunk; remove the setting"
            )
        if not nest(target, granularity):
            raise CompactionError(
                f"{PREFIX}segment_granularity = {target.value}: its chunks and the table's "
                f"{granularity.value} chunks do not nest (a week can span two months); "
                "choose a granularity they nest with"
            )
    check_sort_by(schema, policy.sort_by, f"{PREFIX}sort_by")
    if policy.rollup is not None and granularity is not None:
        from lamina.core.rollup import Rollup, check_query_granularity  # loads numpy, pyarrow

        spec = Rollup.parse(policy.rollup, schema, time_column)
        check_query_granularity(spec.query_granularity, target or granularity)
