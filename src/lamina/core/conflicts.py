"""Optimistic concurrency: may a write publish after commits that completed since its base?

A write records the snapshot it started from (its base seq). At publish, in the
transaction that holds the table lock, every commit that completed after the base
seq — including those already pending when the write began (Hudi HUDI-3355: they
complete after the base, so they are in the set) — is checked against it here. Pure:
the catalog reads the footprints, this module decides.

Kinds of write (``Kind``): an APPEND adds segments and reads nothing; a REPLACE
(overwrite, refresh) replaces what was visible in its intervals at its base snapshot;
a DELETE removes named segments; a LINEAGE transition changes a lineage entry; a
COMPACT (minor compaction) replaces named segments by segments holding the same rows;
ROWS (a row-level delete, update or merge) read the rows of some segments and hid some
of them — by deletion vectors, or by copies without them — and may append new rows.

The rules, ``mine`` = the write publishing now, ``other`` = a commit that completed
after ``mine``'s base (see :data:`RULES`):

======== ========= ============================================================
mine     other     outcome
======== ========= ============================================================
APPEND   any       no conflict: partition ids are allocated at publish, and an
                   append into an interval a REPLACE rewrote meanwhile joins the
                   REPLACE's version (Druid's upgrade of appended segments)
REPLACE  APPEND    write-serializable (default): no conflict; the appended
                   segments inside ``mine``'s intervals are *carried*: they stay
                   visible on top of ``mine``'s version. serializable: conflict
                   if they overlap ``mine``'s intervals
REPLACE  REPLACE   conflict if the intervals overlap; else what it appended
                   outside its own intervals (a transaction that overwrites and
                   appends) counts as an APPEND's
REPLACE  DELETE    conflict if a deleted segment overlaps ``mine``'s intervals
DELETE   REPLACE   conflict if one of ``mine``'s segments overlaps its intervals
DELETE   DELETE    conflict if both removed the same segment
DELETE   APPEND    no conflict
DELETE   COMPACT   conflict if it compacted a segment ``mine`` deletes
REPLACE  COMPACT   conflict if it compacted a segment appended after ``mine``'s
                   base into ``mine``'s intervals (its rows could be neither
                   carried nor dropped); else none: its outputs hold rows ``mine``
                   replaces
COMPACT  APPEND    no conflict: a minor compaction never touches what others append
COMPACT  REPLACE   conflict if it replaced an interval where ``mine``'s inputs lie
COMPACT  DELETE    conflict if it deleted one of ``mine``'s inputs
COMPACT  COMPACT   conflict if both compacted the same segment
ROWS     APPEND    no conflict: the rows appended meanwhile were not read (Delta's
                   WriteSerializable blind appends)
ROWS     REPLACE   conflict if it replaced an interval where a segment ``mine``
                   read lies, or removed one (Delta's ConcurrentDeleteRead)
ROWS     DELETE    conflict if it deleted a segment ``mine`` read
ROWS     COMPACT   conflict if it compacted a segment ``mine`` read
ROWS     ROWS      conflict if it hid rows of, or removed, a segment ``mine`` read
APPEND   ROWS      no conflict
REPLACE  ROWS      conflict if it hid rows in ``mine``'s intervals (``mine`` would
                   put them back, or drop the rows it appended: both replace them);
                   the rows it appended are an APPEND's (carried)
DELETE   ROWS      conflict if it removed a segment ``mine`` deletes
COMPACT  ROWS      conflict if it hid rows of, or removed, one of ``mine``'s inputs
                   (Iceberg's validateNoNewDeletesForDataFiles)
LINEAGE  ROWS      no conflict
any      LINEAGE   conflict if ``other`` transitioned a lineage entry ``mine``
                   writes under (the entry ``mine`` builds on was ended or
                   reverted: never clobber an entry, Pinot #10103)
REPLACE  LINEAGE   besides: conflict if it swapped segments inside ``mine``'s
                   intervals (an end's sources, a completed entry's rollback:
                   both replace those rows); what an end only *showed* there (a
                   push's rows, written before or after ``mine``'s base) is
                   carried as an APPEND's (serializable: conflict). The same
                   holds for the batch commit that ended its push
======== ========= ============================================================

A transaction that appends (or overwrites) and also deletes segments is checked by
both its kind's rule and the DELETE rule (a replace that began before it must not
publish rows it deleted). Besides: two writes carrying the same exactly-once app id
conflict (Delta's
ConcurrentTransactionException), whatever they did. LINEAGE transitions themselves
run in one catalog transaction against the entry's current state, so they never
have a gap between base and publish to check.

``retryable``: whether publishing again on a newer base is safe — it is for an
app-id race (the retry re-reads the app's version and skips if applied), and for a
row-level change (the retry evaluates its predicate again on the newer snapshot);
never for another data conflict, where a retry would silently drop the other
writer's changes.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from lamina.core.interval import Interval
from lamina.core.model import CommitAction


class Kind(enum.StrEnum):
    """What a write does, for conflict checking."""

    APPEND = "APPEND"
    REPLACE = "REPLACE"
    DELETE = "DELETE"
    LINEAGE = "LINEAGE"
    COMPACT = "COMPACT"
    ROWS = "ROWS"

    @classmethod
    def of(cls, action: CommitAction | str) -> Kind:
        """The kind of a commit action."""
        return _KIND_OF[CommitAction(action)]


_KIND_OF = {
    CommitAction.APPEND: Kind.APPEND,
    CommitAction.OVERWRITE: Kind.REPLACE,
    CommitAction.REFRESH: Kind.REPLACE,
    CommitAction.DELETE: Kind.DELETE,
    CommitAction.START_REPLACE: Kind.LINEAGE,
    CommitAction.END_REPLACE: Kind.LINEAGE,
    CommitAction.REVERT_REPLACE: Kind.LINEAGE,
    CommitAction.COMPACT: Kind.COMPACT,
    CommitAction.UPSERT: Kind.APPEND,  # resolved by key at publish: never a conflict
    CommitAction.DELETE_ROWS: Kind.ROWS,
    CommitAction.UPDATE: Kind.ROWS,
    CommitAction.MERGE: Kind.ROWS,
    CommitAction.RESTORE: Kind.REPLACE,  # replaces the whole table
}


class Isolation(enum.StrEnum):
    """How a REPLACE treats rows appended into its intervals while it ran."""

    WRITE_SERIALIZABLE = "write_serializable"  # keep them, on top of the new version
    SERIALIZABLE = "serializable"  # refuse: the replace did not see them


@dataclass(frozen=True, slots=True)
class SegmentRef:
    """A segment by id, with its interval."""

    id: str
    interval: Interval


@dataclass(frozen=True)
class Footprint:
    """What one write did to the table (or, for the write publishing, will do).

    ``added``: segments it publishes; ``removed``: segments it deletes or its
    replace retires; ``replaced``: intervals whose visible rows it replaces;
    ``lineage``: entries it writes under or transitions; ``app_id``: its
    exactly-once application id.
    """

    commit_id: int
    kind: Kind
    added: tuple[SegmentRef, ...] = ()
    removed: tuple[SegmentRef, ...] = ()
    replaced: tuple[Interval, ...] = ()
    lineage: frozenset[str] = frozenset()
    app_id: str | None = None
    #: segments it removed and carried: removed id -> its copy (the same file)
    moved: tuple[tuple[str, SegmentRef], ...] = ()
    #: an entry's end (or the batch that ended it): the entry's segments_to, whose
    #: rows it made visible (they may have been written before the base)
    shown: tuple[SegmentRef, ...] = ()
    #: the segments whose rows a lineage transition swapped: an end's segments_from,
    #: a rollback's segments_from and segments_to
    swapped: tuple[SegmentRef, ...] = ()
    #: a row-level change (ROWS): the segments whose rows it read (mine), and those
    #: it hid rows of (vectors added, or rewritten without them)
    read: tuple[SegmentRef, ...] = ()
    changed: tuple[SegmentRef, ...] = ()


@dataclass(frozen=True)
class Conflict:
    """Why ``mine`` cannot publish after commit ``other``."""

    other: int
    reason: str
    retryable: bool = False


@dataclass(frozen=True)
class Verdict:
    """The outcome of a check: a conflict, or the segments to carry (see module)."""

    conflict: Conflict | None
    carry: tuple[SegmentRef, ...] = ()


def _overlap(a: Iterable[Interval], b: Iterable[Interval]) -> Interval | None:
    bs = list(b)
    for x in a:
        for y in bs:
            if x.overlaps(y):
                return x.intersection(y)
    return None


def _none(mine: Footprint, other: Footprint, iso: Isolation) -> str | None:
    return None


def _replace_vs_append(mine: Footprint, other: Footprint, iso: Isolation) -> str | None:
    if iso is not Isolation.SERIALIZABLE:
        return None  # carried instead
    hit = _overlap(mine.replaced, (s.interval for s in other.added))
    if hit is None:
        return None
    return f"it appended rows into {hit}, which this serializable replace did not read"


def _replace_vs_replace(mine: Footprint, other: Footprint, iso: Isolation) -> str | None:
    hit = _overlap(mine.replaced, other.replaced)
    if hit is not None:
        return f"it replaced {hit} too"
    if iso is Isolation.SERIALIZABLE:  # its appends elsewhere, as an APPEND's
        return _replace_vs_append(
            mine, Footprint(other.commit_id, Kind.APPEND, tuple(appended(other))), iso
        )
    return None


def _replace_vs_delete(mine: Footprint, other: Footprint, iso: Isolation) -> str | None:
    for seg in other.removed:
        if _overlap(mine.replaced, [seg.interval]) is not None:
            return f"it deleted segment {seg.id} inside the replaced interval"
    return None


def _removes_replaced(mine: Footprint, other: Footprint, iso: Isolation) -> str | None:
    """``mine`` removes named segments (a delete, a compaction's inputs): ``other``
    replaced the interval one of them lies in."""
    for seg in mine.removed:
        if _overlap([seg.interval], other.replaced) is not None:
            return f"it replaced {seg.interval}, where segment {seg.id} this write removes lies"
    return None


def _removes_removed(mine: Footprint, other: Footprint, iso: Isolation) -> str | None:
    """Both removed (deleted or compacted) the same segment."""
    theirs = {s.id for s in other.removed}
    same = sorted(s.id for s in mine.removed if s.id in theirs)
    return f"it removed segment {same[0]} meanwhile" if same else None


def _vs_lineage(mine: Footprint, other: Footprint, iso: Isolation) -> str | None:
    shared = sorted(mine.lineage & other.lineage)
    return f"it changed lineage entry {shared[0]}, which this write builds on" if shared else None


def _replace_vs_lineage(mine: Footprint, other: Footprint, iso: Isolation) -> str | None:
    """An entry's end or rollback swapped rows inside ``mine``'s intervals (both
    replace them: conflict); an end that only showed rows there is an APPEND's."""
    why = _vs_lineage(mine, other, iso)
    if why is not None:
        return why
    hit = _overlap(mine.replaced, (s.interval for s in other.swapped))
    if hit is not None:
        return f"its lineage transition swapped segments in {hit}, where this write replaces rows"
    if iso is Isolation.SERIALIZABLE:
        hit = _overlap(mine.replaced, (s.interval for s in other.shown))
        if hit is not None:
            return f"it showed a push's rows in {hit}, which this serializable replace did not read"
    return None


def _read_changed(mine: Footprint, other: Footprint, iso: Isolation) -> str | None:
    """``mine`` read rows (a row-level change): ``other`` removed, replaced or hid
    rows of a segment it read (Delta's ConcurrentDeleteReadException)."""
    read = {s.id: s for s in mine.read}
    for seg in (*other.removed, *other.changed):
        if seg.id in read:
            return f"it changed segment {seg.id}, whose rows this write read"
    hit = _overlap(other.replaced, (s.interval for s in mine.read))
    if hit is not None:
        return f"it replaced {hit}, whose rows this write read"
    return _vs_lineage(mine, other, iso) or _swapped_read(mine, other)


def _swapped_read(mine: Footprint, other: Footprint) -> str | None:
    read = {s.id for s in mine.read}
    hit = sorted(s.id for s in (*other.swapped, *other.shown) if s.id in read)
    return (
        f"its lineage transition moved segment {hit[0]}, whose rows this write read"
        if hit
        else None
    )


def _replace_vs_rows(mine: Footprint, other: Footprint, iso: Isolation) -> str | None:
    hit = _overlap(mine.replaced, (s.interval for s in other.changed))
    if hit is not None:
        return f"it deleted or updated rows in {hit}, which this write replaces"
    return _replace_vs_append(
        mine, Footprint(other.commit_id, Kind.APPEND, tuple(appended(other))), iso
    )


def _rows_changed_inputs(mine: Footprint, other: Footprint, iso: Isolation) -> str | None:
    """``mine`` removes named segments: ``other`` hid rows of one (or removed it)."""
    theirs = {s.id for s in (*other.changed, *other.removed)}
    same = sorted(s.id for s in mine.removed if s.id in theirs)
    return f"it deleted or updated rows of segment {same[0]} meanwhile" if same else None


Rule = Callable[[Footprint, Footprint, Isolation], str | None]

#: (mine, other) -> rule giving a reason to refuse, or None. Every pair is listed.
RULES: dict[tuple[Kind, Kind], Rule] = {
    (Kind.APPEND, Kind.APPEND): _none,
    (Kind.APPEND, Kind.REPLACE): _none,
    (Kind.APPEND, Kind.DELETE): _none,
    (Kind.REPLACE, Kind.APPEND): _replace_vs_append,
    (Kind.REPLACE, Kind.REPLACE): _replace_vs_replace,
    (Kind.REPLACE, Kind.DELETE): _replace_vs_delete,
    (Kind.DELETE, Kind.APPEND): _none,
    (Kind.DELETE, Kind.REPLACE): _removes_replaced,
    (Kind.DELETE, Kind.DELETE): _removes_removed,
    (Kind.LINEAGE, Kind.APPEND): _none,
    (Kind.LINEAGE, Kind.REPLACE): _none,
    (Kind.LINEAGE, Kind.DELETE): _none,
    (Kind.LINEAGE, Kind.COMPACT): _none,
    (Kind.APPEND, Kind.COMPACT): _none,
    (Kind.REPLACE, Kind.COMPACT): _none,  # see check(): it depends on the carry
    (Kind.DELETE, Kind.COMPACT): _removes_removed,
    (Kind.COMPACT, Kind.APPEND): _none,
    (Kind.COMPACT, Kind.REPLACE): _removes_replaced,
    (Kind.COMPACT, Kind.DELETE): _removes_removed,
    (Kind.COMPACT, Kind.COMPACT): _removes_removed,
    (Kind.ROWS, Kind.APPEND): _none,
    (Kind.ROWS, Kind.REPLACE): _read_changed,
    (Kind.ROWS, Kind.DELETE): _read_changed,
    (Kind.ROWS, Kind.COMPACT): _read_changed,
    (Kind.ROWS, Kind.ROWS): _read_changed,
    (Kind.APPEND, Kind.ROWS): _none,
    (Kind.REPLACE, Kind.ROWS): _replace_vs_rows,
    (Kind.DELETE, Kind.ROWS): _rows_changed_inputs,
    (Kind.COMPACT, Kind.ROWS): _rows_changed_inputs,
    (Kind.LINEAGE, Kind.ROWS): _none,
    **{(k, Kind.LINEAGE): _vs_lineage for k in Kind},
    (Kind.REPLACE, Kind.LINEAGE): _replace_vs_lineage,
    (Kind.ROWS, Kind.LINEAGE): _read_changed,
}


#: kinds whose commits may also delete named segments (a transaction that appends or
#: overwrites and deletes): besides their own rule, the DELETE rule applies to those
_ALSO_DELETES = (Kind.APPEND, Kind.REPLACE)


def appended(footprint: Footprint) -> list[SegmentRef]:
    """The segments a commit appended: all it added for an APPEND; for a REPLACE (a
    transaction that also appends), those outside the intervals it replaced."""
    if footprint.kind in (Kind.APPEND, Kind.ROWS):
        return list(footprint.added)
    if footprint.kind is Kind.REPLACE:
        return [s for s in footprint.added if _overlap(footprint.replaced, [s.interval]) is None]
    return []


def _follow_fresh(fresh: set[str], other: Footprint) -> None:
    """Add to ``fresh`` the segments of ``other`` holding only rows appended since the
    base: what it appended or showed, copies of fresh ones, and a compaction's outputs
    when every input was fresh (else they hold rows the base had)."""
    fresh.update(s.id for s in (*appended(other), *other.shown))
    fresh.update(new.id for old, new in other.moved if old in fresh)
    if other.kind is Kind.COMPACT and other.removed and all(s.id in fresh for s in other.removed):
        fresh.update(s.id for s in other.added)


def check(
    mine: Footprint,
    others: Sequence[Footprint],
    isolation: Isolation = Isolation.WRITE_SERIALIZABLE,
    locked: bool = False,
) -> Verdict:
    """May ``mine`` publish after ``others`` (the commits completed since its base,
    in completion order)? The first conflict found, else the segments to carry.

    ``locked``: ``mine`` holds task locks covering everything it writes, which kept
    every other locked writer out: only exactly-once app ids can conflict; what
    others appended is still carried, unless a later commit removed it."""
    carry: list[SegmentRef] = []
    fresh: set[str] = set()  # rows appended since the base, whose segments it never read
    for other in others:
        if mine.app_id is not None and mine.app_id == other.app_id:
            reason = f"it wrote for the same app id {mine.app_id!r}"
            return Verdict(Conflict(other.commit_id, reason, retryable=True))
        deletes = other.kind is Kind.DELETE or other.kind in _ALSO_DELETES
        if mine.kind is Kind.REPLACE and deletes and fresh & {s.id for s in other.removed}:
            # deleting what was appended meanwhile (a blind append) is no conflict for
            # it: Delta checks deletes against the files the transaction read
            kept = tuple(s for s in other.removed if s.id not in fresh)
            other = dataclasses.replace(other, removed=kept)
        _follow_fresh(fresh, other)
        why = None if locked else RULES[(mine.kind, other.kind)](mine, other, isolation)
        if why is None and not locked and other.removed and other.kind in _ALSO_DELETES:
            why = RULES[(mine.kind, Kind.DELETE)](mine, other, isolation)  # a transaction's
        if (
            why is None
            and not locked
            and mine.kind is Kind.REPLACE
            and other.kind is not Kind.LINEAGE
        ):
            why = _replace_vs_lineage(mine, other, isolation)  # a batch that ended its push
        if why is not None:  # a row-level change retried reads its rows again
            return Verdict(Conflict(other.commit_id, why, retryable=mine.kind is Kind.ROWS))
        if mine.kind is Kind.REPLACE and other.kind is Kind.COMPACT:
            merged = sorted({s.id for s in other.removed} & {s.id for s in carry})
            if merged:
                why = (
                    f"it compacted segment {merged[0]}, appended after this replace began, "
                    "together with rows this replace rewrites"
                )
                return Verdict(Conflict(other.commit_id, why))
        if mine.kind is Kind.REPLACE:
            moved = dict(other.moved)  # carried onward by ``other``: follow the copy
            carry = [moved.get(s.id, s) for s in carry]
            have = {s.id for s in carry}
            carry += [
                s
                for s in (*appended(other), *other.shown)
                if s.id not in have and _overlap(mine.replaced, [s.interval])
            ]
    gone = {s.id for o in others for s in o.removed}
    return Verdict(None, tuple(s for s in carry if s.id not in gone))
