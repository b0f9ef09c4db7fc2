"""Retention of replaced segments, orphan files and failed writes."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field

from lamina.context import CatalogContext
from lamina.core.interval import to_us
from lamina.core.properties import setting
from lamina.io.warehouse import commit_dir
from lamina.maintenance.drops import settle_drops
from lamina.meta import retention as rows
from lamina.meta import tables, writers
from lamina.meta.tables import now_us


@dataclass
class RetentionReport:
    """What one retention run deleted (a dry run: would delete)."""

    segment_files: int = 0
    orphan_files: int = 0
    #: folders of drops that a dying process left: deleted (the drop had committed) or
    #: moved back into their table's folder (it had not); a dry run settles none
    drop_folders_deleted: int = 0
    drop_folders_restored: int = 0
    #: the files (relative to the warehouse root) deleted, or that a dry run would delete
    segment_paths: list[str] = field(default_factory=list)
    orphan_paths: list[str] = field(default_factory=list)
    dry_run: bool = False


def run_retention(
    ctx: CatalogContext,
    names: Sequence[str],
    now: dt.datetime | None = None,
    lineage_only: bool = False,
    every_name: bool = False,
    dry_run: bool = False,
) -> RetentionReport:
    """Delete what lineage, overwrites and deletes left behind, and orphan files, in
    the tables ``names`` (see ``Catalog.run_retention``), and settle the folders of
    their unfinished drops (``every_name``: of any name, a table's or not).
    ``dry_run``: decide the same, in transactions rolled back, and delete nothing (nor
    settle drops). Raises TableNotFoundError, WarehouseError."""

    at = now_us() if now is None else to_us(now)
    never = 2**62
    report = RetentionReport(dry_run=dry_run)
    props_of = {name: tables.get_table(ctx.db, name).properties for name in names}
    if not lineage_only and not dry_run:  # first: files moved back are seen below
        drops = settle_drops(ctx, None if every_name else names, at)
        report.drop_folders_deleted = drops.deleted
        report.drop_folders_restored = drops.restored
    for name in names:
        props = props_of[name]
        garbage = rows.retention(
            ctx.db,
            name,
            at,
            never if lineage_only else setting(props, "replaced_segments_retention"),
            never if lineage_only else setting(props, "lineage_cleanup_retention"),
            ctx.stale_after_s,
            dry_run,
        )
        if not dry_run:
            ctx.delete_files(garbage)
        report.segment_files += len(garbage)
        report.segment_paths += garbage
        if not lineage_only:
            orphans = find_orphans(ctx, [name], now=now, with_grace=True)
            if not dry_run:
                ctx.delete_files(orphans)
            report.orphan_files += len(orphans)
            report.orphan_paths += orphans
    return report


def find_orphans(
    ctx: CatalogContext,
    names: Sequence[str],
    now: dt.datetime | None = None,
    with_grace: bool = False,
) -> list[str]:
    """Files under the tables' data, key index (``_keys``) and manifest (``_manifests``)
    directories that no catalog row names (relative paths): files of writes that died,
    snapshots of the key index and segment manifests a process wrote but did not
    register (or whose row was dropped). ``with_grace``: only those older than
    ``orphan_grace_period`` and outside the directories of commits still open — a
    writer that is still writing is never robbed, however long it writes (one found
    dead is aborted, then cleaned: :func:`clean_failed_writes`). Raises
    TableNotFoundError."""
    at = now_us() if now is None else to_us(now)
    out: list[str] = []
    wh = ctx.warehouse
    for name in names:
        rec = tables.get_table(ctx.db, name)
        grace = setting(rec.properties, "orphan_grace_period") if with_grace else 0
        listed = [
            info
            for sub in ("data", "_keys", "_manifests")
            for info in wh.list_files(wh.path(f"{name}/{sub}"))
        ]
        # read after listing, open commits first: a file listed is either in a commit
        # open then, or of one settled before, which the rows read next name if it won
        writing = (
            tuple(commit_dir(name, c) + "/" for c in writers.open_commits(ctx.db, rec.id))
            if with_grace
            else ()
        )
        known = rows.referenced_files(ctx.db, name)
        for info in listed:
            rel = info.path[len(wh.root) + 1 :]
            if rel in known or rel.startswith(writing):
                continue
            mtime = info.mtime_ns // 1000 if info.mtime_ns is not None else 0
            if at - mtime >= grace:
                out.append(rel)
    return sorted(out)


def clean_failed_writes(ctx: CatalogContext, names: Sequence[str]) -> int:
    """Abort writes whose writer died, and delete every aborted write's files."""
    count = 0
    for name in names:
        rec = tables.get_table(ctx.db, name)
        failed = writers.failed_commits(ctx.db, rec.id, ctx.stale_after_s)
        ctx.clean_commits(name, failed)
        count += len(failed)
    return count
