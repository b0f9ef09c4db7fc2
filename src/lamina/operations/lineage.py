"""Lineage operations (Pinot's segment replacement): start, end and revert an entry,
and delete live segments in one commit. The facade checks the arguments; these apply
them to the catalog."""

from __future__ import annotations

from lamina.core.interval import Interval
from lamina.core.model import Commit
from lamina.failpoints import failpoint
from lamina.maintenance.retention import run_retention
from lamina.meta import lineage, publish
from lamina.operations.handle import TableHandle
from lamina.operations.upsert import refuse

#: what an upsert table refuses: it keeps one record per key, not sets of segments
REPLACEMENT = "a segment replacement (lineage)"


def start_replace(
    h: TableHandle,
    segments_from: list[str],
    segments_to: list[str],
    force_cleanup: bool = False,
    replace_live: Interval | None = None,
) -> str:
    """Open an IN_PROGRESS entry (see ``Table.start_replace``); the files of entries
    its cleanup dropped are deleted. Raises LineageError, UpsertError."""
    refuse(h, REPLACEMENT)
    entry, garbage = lineage.start_replace(
        h.ctx.db, h.name, segments_from, segments_to, force_cleanup, replace_live
    )
    h.ctx.delete_files(garbage)
    failpoint("lineage.started", entry=entry)
    return entry


def end_replace(h: TableHandle, entry_id: str, segments_to: list[str] | None = None) -> None:
    """Complete an entry (idempotent). Raises LineageError, LineageEntryNotFoundError,
    UpsertError."""
    refuse(h, REPLACEMENT)
    lineage.end_replace(h.ctx.db, h.name, entry_id, segments_to)


def revert_replace(h: TableHandle, entry_id: str, force: bool = False) -> None:
    """Undo an entry. Raises LineageError, LineageEntryNotFoundError, UpsertError."""
    refuse(h, REPLACEMENT)
    lineage.revert_replace(h.ctx.db, h.name, entry_id, force)


def revert_quietly(h: TableHandle, entry_id: str) -> None:
    """Best effort after a failed push: revert its entry now, delete what it wrote
    (else the next push or retention cleans up)."""
    try:
        failpoint("lineage.revert_quietly", entry=entry_id)
        revert_replace(h, entry_id, force=True)
        run_retention(h.ctx, [h.name], lineage_only=True)
    except Exception:  # noqa: BLE001 - the next push or retention cleans up
        pass


def delete_segments(h: TableHandle, ids: list[str]) -> Commit:
    """Remove live segments in one commit. Raises SegmentNotFoundError, LineageError."""
    return publish.delete_segments(h.ctx.db, h.name, ids)
