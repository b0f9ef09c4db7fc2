"""``t.restore``: one commit that makes a table show again what an earlier version
showed (Delta's RESTORE, Iceberg's rollback), its history kept: every version stays
readable, the restore is a version of its own, and the change feed reports what it
changed. No file is written: the commit brings that version's segments back as new
segment rows on the same files (:class:`lamina.core.plans.RestorePlan`)."""

from __future__ import annotations

from typing import Any

from lamina.core.lineage import LineageState
from lamina.core.model import AsOf, Commit, CommitAction
from lamina.core.plans import RestorePlan
from lamina.errors import LineageError, RestoreError, SnapshotTooOldError
from lamina.operations.handle import TableHandle
from lamina.write import WriteTransaction


def restore(h: TableHandle, target: AsOf, metadata: dict[str, Any]) -> Commit:
    """Make the table equal to version ``target`` (a version, a Commit or a time) in
    one RESTORE commit. Raises InvalidArgumentError (a wrong type), SnapshotNotFoundError
    (no such version), SnapshotTooOldError (before the first commit, or retention
    deleted its files: names the oldest restorable version), RestoreError (an upsert
    table; rows a deletion vector hid since), LineageError (a push in progress),
    CommitConflictError (a commit completed meanwhile)."""
    if target is None:
        raise RestoreError("restore needs the version (or time) to go back to, e.g. t.restore(3)")
    try:
        version = h.snapshot(target).seq
    except SnapshotTooOldError as exc:
        raise SnapshotTooOldError(
            f"cannot restore: {exc}".replace("the earliest available", "the oldest restorable"),
            exc.earliest_version,
            exc.earliest_time,
        ) from None
    if h.is_upsert:
        raise RestoreError(
            f"table {h.name!r} is an upsert table, which restore does not take back (its key "
            "index only moves forward); overwrite it with t.to_arrow(as_of=...) instead"
        )
    busy = [e.id for e in h.lineage() if e.state == LineageState.IN_PROGRESS]
    if busy:
        raise LineageError(
            f"a push is in progress on {h.name!r} (lineage entry {busy[0]}): end or revert "
            "it first (t.end_replace / t.revert_replace); nothing changed"
        )
    meta = {**metadata, "restored_version": version}
    with WriteTransaction(h.ctx, h.record, CommitAction.RESTORE, meta, inflight=True) as txn:
        return txn.publish(RestorePlan(version=version))
