"""Where a table changed between two snapshots: each completed commit and its intervals.

Visibility at an instant changes only where a commit added or removed a segment, or
moved a lineage entry whose segments lie there; those intervals, per commit in
completion (seq) order, are all an incremental read needs to diff.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import ColumnElement, Connection, and_, or_, select

from lamina.core.changes import merge
from lamina.core.interval import Interval
from lamina.core.model import CommitAction, CommitState, TableRecord
from lamina.errors import SnapshotNotFoundError
from lamina.meta.db import Db
from lamina.meta.lineage_lists import lists
from lamina.meta.schema import commits, lineage, segments, tables
from lamina.meta.segments import rows_by_id
from lamina.meta.tables import read_table


@dataclass(frozen=True)
class ChangePoint:
    """A completed commit and the intervals where it may have changed visibility."""

    commit_id: int
    seq: int
    touched: tuple[Interval, ...]
    #: a copy-on-write upsert: the files (locations) it rewrote, each with the rows
    #: hidden there as of the commit (its copy holds the others), and its copies
    rewrote: dict[str, list[int]] = field(default_factory=dict)
    copies: tuple[str, ...] = ()


@dataclass(frozen=True)
class Changes:
    """The commits completed in ``(after_seq, until_seq]``, in seq order; ``base``:
    the commit of ``after_seq`` (None for the empty snapshot 0)."""

    table: TableRecord
    after_seq: int
    until_seq: int
    base: int | None
    points: tuple[ChangePoint, ...]


def _in(col: ColumnElement[Any], lo: int, hi: int) -> ColumnElement[bool]:
    return and_(col > lo, col <= hi)


def change_points(db: Db, name: str, after_seq: int, until_seq: int | None) -> Changes:
    """The commits after ``after_seq`` up to ``until_seq`` (None: the latest) and what
    each touched. Raises TableNotFoundError, SnapshotNotFoundError."""

    def txn(conn: Connection) -> Changes:
        rec = read_table(conn, name)
        last, purged = conn.execute(
            select(tables.c.last_seq, tables.c.purged_seq).where(tables.c.id == rec.id)
        ).one()
        until = int(last) if until_seq is None else until_seq
        if not 0 <= after_seq <= until <= int(last):
            raise SnapshotNotFoundError(
                f"no versions {after_seq}..{until} in {name!r}: versions run from 0 (the empty "
                f"table) to {last} (see Commit.version in t.history()); after_seq must not "
                "exceed until_seq"
            )
        if after_seq < int(purged):
            raise SnapshotNotFoundError(
                f"the changes after version {after_seq} of {name!r} are gone: retention "
                f"deleted segments that snapshot used. Version {purged} is the oldest left: "
                f"read it whole (t.to_arrow(as_of={purged})) in place of the changes up to "
                f"it, then read changes after version {purged} (reading only those would "
                "miss rows)"
            )
        done = conn.execute(
            select(
                commits.c.id,
                commits.c.seq,
                commits.c.action,
                commits.c.metadata,
                commits.c.footprint,
            )
            .where(
                commits.c.table_id == rec.id,
                commits.c.state == CommitState.COMPLETED.value,
                commits.c.seq >= max(after_seq, 1),
                commits.c.seq <= until,
            )
            .order_by(commits.c.seq)
        ).all()
        base = next((int(r.id) for r in done if r.seq == after_seq), None)
        touched: dict[int, list[Interval]] = defaultdict(list)
        for s, e, added, removed in conn.execute(
            select(
                segments.c.start_us, segments.c.end_us, segments.c.added_seq, segments.c.removed_seq
            ).where(
                segments.c.table_id == rec.id,
                or_(
                    _in(segments.c.added_seq, after_seq, until),
                    _in(segments.c.removed_seq, after_seq, until),
                ),
            )
        ):
            for seq in (added, removed):
                if seq is not None and after_seq < seq <= until:
                    touched[int(seq)].append(Interval.of(s, e))
        _lineage_touches(conn, rec.id, after_seq, until, touched)
        _row_touches(conn, rec.id, done, touched)
        points = tuple(
            ChangePoint(
                int(r.id),
                int(r.seq),
                () if _layout_only(r) else tuple(merge(touched.get(int(r.seq), []))),
                *_rewrites(conn, rec.id, r),
            )
            for r in done
            if r.seq > after_seq
        )
        return Changes(rec, after_seq, until, base, points)

    return db.read(txn)


def _rewrites(
    conn: Connection, table_id: int, row: Any
) -> tuple[dict[str, list[int]], tuple[str, ...]]:
    """A copy-on-write upsert's rewrites (see :class:`ChangePoint`); none for others."""
    doc = json.loads(row.footprint) if row.footprint else {}
    if not doc.get("rewrote"):
        return {}, ()
    from lamina.meta import deletes  # loads numpy, pyroaring

    copies = tuple(r.location for r in rows_by_id(conn, table_id, doc["rewrote"]) if r.location)
    inputs = [
        loc
        for (loc,) in conn.execute(
            select(segments.c.location).where(
                segments.c.table_id == table_id, segments.c.removed_commit == row.id
            )
        )
        if loc
    ]
    hidden = deletes.at(conn, table_id, int(row.seq), inputs)
    return {loc: list(hidden[loc].hidden) if loc in hidden else [] for loc in inputs}, copies


def _layout_only(row: Any) -> bool:
    """A compaction that rewrote files without changing any row (a minor one, or a
    major one without rollup): it has no changes to report."""
    if row.action == CommitAction.COMPACT.value:
        return True
    meta = json.loads(row.metadata) if row.metadata else {}
    return meta.get("compaction") == "major" and "rollup" not in meta


def _row_touches(
    conn: Connection, table_id: int, done: Sequence[Any], touched: dict[int, list[Interval]]
) -> None:
    """Add the intervals of the segments row-level changes hid rows of (by deletion
    vectors: no segment row tells)."""
    by_seq = {int(r.seq): json.loads(r.footprint).get("rows", []) for r in done if r.footprint}
    ids = sorted({i for got in by_seq.values() for i in got})
    if not ids:
        return
    spans = {
        r.segment_id: Interval.of(r.start_us, r.end_us) for r in rows_by_id(conn, table_id, ids)
    }
    for seq, got in by_seq.items():
        touched[seq] += [spans[i] for i in got if i in spans]


def _lineage_touches(
    conn: Connection, table_id: int, lo: int, hi: int, touched: dict[int, list[Interval]]
) -> None:
    """Add the intervals of lineage entries' segments at the seqs they moved."""
    rows = conn.execute(
        select(
            lineage.c.id, lineage.c.started_seq, lineage.c.completed_seq, lineage.c.reverted_seq
        ).where(
            lineage.c.table_id == table_id,
            or_(
                _in(lineage.c.started_seq, lo, hi),
                _in(lineage.c.completed_seq, lo, hi),
                _in(lineage.c.reverted_seq, lo, hi),
            ),
        )
    ).all()
    if not rows:
        return
    got = lists(conn, [r.id for r in rows])
    for r in rows:
        ids = got.get((r.id, "from"), []) + got.get((r.id, "to"), [])
        spans = [Interval.of(x.start_us, x.end_us) for x in rows_by_id(conn, table_id, ids)]
        for seq in (r.started_seq, r.completed_seq, r.reverted_seq):
            if seq is not None and lo < seq <= hi:
                touched[int(seq)] += spans
