"""Inline compaction (Hudi's ``hoodie.compact.inline``): with ``compaction.inline`` set
on an upsert table, the writer's process, right after an upsert commit publishes,
rewrites the segments that crossed a superseded-row threshold
(``compaction.max_superseded_percent``, ``compaction.max_vector_age``) without their
superseded records, in a COMPACT commit of its own — the minor compaction
auto-compaction would run for them (:func:`lamina.operations.compaction.auto.compact_superseded`).

It holds SEGMENT locks on its inputs at compaction priority, taken at once or not at
all (it never waits for another compaction's: a chunk another task holds is left to
the next commit or to the services). Upserts go on beside it; the upsert that ran it
has committed already, and a failure of the compaction never fails it.
"""

from __future__ import annotations

import logging

from lamina.core.autocompact import inline_of
from lamina.core.model import Commit, CommitAction
from lamina.errors import LaminaError
from lamina.operations.compaction.auto import compact_superseded
from lamina.operations.handle import TableHandle

log = logging.getLogger("lamina")


def after_commit(table: TableHandle, commit: Commit) -> Commit | None:
    """Run the inline compaction after ``commit`` (an upsert's, completed) when the
    table's ``compaction.inline`` property, as ``table`` knows it, is true; reads no
    catalog rows otherwise. Returns the compaction's commit, or None (nothing crossed a
    threshold, or the compaction failed: logged as a warning on the ``lamina`` logger).
    Raises nothing."""
    try:
        if not table.is_upsert or not inline_of(table.record.properties):
            return None
    except LaminaError:  # a malformed property stored by another version: no inline
        return None
    if (
        commit.action != CommitAction.UPSERT
        or commit.state != "COMPLETED"
        or commit.already_applied
    ):
        return None
    try:
        return _compact(table)
    except Exception as exc:  # noqa: BLE001 - the upsert has committed: never fail it
        log.warning(
            "inline compaction of %r after commit %d failed (the upsert committed; "
            "auto-compaction or the next upsert compacts it): %s: %s",
            table.name,
            commit.id,
            type(exc).__name__,
            exc,
        )
        return None


def _compact(table: TableHandle) -> Commit | None:
    """The compaction, on the table as the catalog has it now (its schema and
    properties: another process may have added columns or turned inline off)."""
    now, _ = table.reloaded()
    if not inline_of(now.properties):
        return None
    return compact_superseded(TableHandle(table.ctx, now), wait_s=0)
