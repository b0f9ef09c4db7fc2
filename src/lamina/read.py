"""The read path's planning: catalog snapshot (or manifest + changes) -> scan plan.

Small snapshots are planned from segment objects (:func:`lamina.core.scan.plan_scan`).
From :data:`COLUMNAR_AT` segments on, a plan is columnar: the segments come from the
table's newest segment manifest plus the catalog rows that changed since, and
:func:`lamina.core.columnar.plan_columns` decides visibility without an object per
segment. A plan of the whole latest snapshot that found no manifest, or
:data:`MANIFEST_EVERY` changed rows since the last one, writes a new manifest for the
next reader (best effort: a read-only warehouse only plans slower).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from lamina.context import CatalogContext
from lamina.core.interval import Interval
from lamina.core.model import AsOf, Snapshot, TableRecord
from lamina.core.properties import ROWS_CHANGED_SEQ
from lamina.core.scan import ScanPlan, plan_scan
from lamina.errors import LaminaError
from lamina.failpoints import failpoint
from lamina.meta import deltas, manifests
from lamina.meta.tables import now_us

if TYPE_CHECKING:  # columnar planning (pyarrow, numpy) is imported by big plans only
    import pyarrow as pa

#: Segments overlapping a plan from which it is planned over columns.
COLUMNAR_AT = 10_000
#: Rows changed since the newest manifest after which a whole-table plan writes one.
MANIFEST_EVERY = 10_000


def plan(
    ctx: CatalogContext, name: str, as_of: AsOf = None, interval: Interval | None = None
) -> ScanPlan:
    """The scan plan of one snapshot of ``name``, pruned to ``interval``; for an upsert
    table, or a table with row-level changes, with the rows each file hides at that
    snapshot (its deletion vectors).
    Raises TableNotFoundError, SnapshotNotFoundError, TimelineError."""
    got = _plan(ctx, name, as_of, interval)
    if got.table.is_upsert or has_row_changes(got.table, got.seq):
        # planned in one catalog read; the deletion vectors are read in another
        failpoint("read.plan.before_deletes", ctx=ctx, plan=got)
        _attach_deletes(ctx, got)
    return got


def has_row_changes(table: TableRecord, seq: int) -> bool:
    """Whether snapshot ``seq`` of a plain table may hide rows by deletion vectors (a
    row-level change committed at or before it)."""
    since = table.properties.get(ROWS_CHANGED_SEQ)
    return since is not None and seq >= int(since)


def _attach_deletes(ctx: CatalogContext, plan: ScanPlan) -> None:
    """The plan's files' deletion vectors as of its snapshot."""
    from lamina.meta import deletes  # loads numpy, pyroaring

    root = ctx.db.root + "/"
    paths = {p: p.removeprefix(root) for p, _ in plan.reads()}
    if not paths:
        return
    found = ctx.db.read(
        lambda conn: deletes.of_snapshot(conn, plan.table, plan.seq, paths.values(), ctx.vectors)
    )
    for path, rel in paths.items():
        v = found.get(rel)
        if v is not None and v.hidden:
            plan.deletes[path] = deletes.positions(v.hidden)


def _plan(ctx: CatalogContext, name: str, as_of: AsOf, interval: Interval | None) -> ScanPlan:
    got = deltas.snapshot_or_delta(ctx.db, name, as_of, interval, COLUMNAR_AT)
    if isinstance(got, Snapshot):
        return plan_scan(got, interval)
    cache = interval is None and as_of is None  # a whole latest plan may write a manifest
    try:
        segs = _segments(ctx, got, interval, cache)
    except OSError:  # retention dropped the manifest meanwhile, or it is lost or damaged
        # (DamagedManifestError): the catalog rows answer, a later plan writes a new one
        got = deltas.snapshot_or_delta(ctx.db, name, as_of, interval, COLUMNAR_AT, manifest=False)
        if isinstance(got, Snapshot):
            return plan_scan(got, interval)
        segs = _segments(ctx, got, interval, cache)
    from lamina.core.columnar import plan_columns, without  # loads numpy, pyarrow

    segs = without(segs, got.hidden)
    return plan_columns(got.table, got.seq, got.commit_id, segs, interval, ctx.db.root)


def _segments(
    ctx: CatalogContext, got: deltas.SnapshotDelta, interval: Interval | None, cache: bool
) -> pa.Table:
    """The snapshot's live segments (lineage not applied) overlapping ``interval``;
    ``cache``: write them as a new manifest if enough changed."""
    import pyarrow as pa  # loads numpy, pyarrow

    from lamina.core.columnar import SEGMENT_SCHEMA, without  # loads numpy, pyarrow
    from lamina.io.manifest import read_manifest  # loads numpy, pyarrow

    if got.manifest is None:
        segs = got.added
        changed = segs.num_rows
    else:
        base = without(read_manifest(ctx.warehouse, got.manifest, interval), got.removed)
        segs = pa.concat_tables([base, got.added.cast(SEGMENT_SCHEMA)])
        changed = got.added.num_rows + len(got.removed)
    if cache and changed >= MANIFEST_EVERY:
        # the segments are read; the manifest of them is not written yet
        failpoint("read.plan.before_manifest_write", ctx=ctx, snapshot=got)
        _write(ctx, got, segs)
    return segs


def _write(ctx: CatalogContext, got: deltas.SnapshotDelta, segs: pa.Table) -> None:
    """Record ``segs`` as the manifest of the snapshot; never fails the read."""
    import pyarrow.compute as pc  # loads numpy, pyarrow

    from lamina.io.manifest import write_manifest  # loads numpy, pyarrow

    decored = pc.sum(pc.equal(segs.column("num_core_partitions"), 0)).as_py() or 0
    rel = ""
    try:
        rel = write_manifest(ctx.warehouse, got.table.name, got.seq, segs)
        stale = manifests.register(
            ctx.db, got.table.id, got.seq, rel, segs.num_rows, decored, now_us()
        )
    except (OSError, LaminaError):
        with contextlib.suppress(OSError):
            ctx.delete_files([rel] if rel else [])
        return
    ctx.delete_files(stale)
