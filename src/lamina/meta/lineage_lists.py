"""Lineage entries as rows: their id lists (from, to, expected, decore), the entries
as they stood at a snapshot, and the segment ids they hide from its readers. The
transitions (start, end, revert) are in :mod:`lamina.meta.lineage`."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    and_,
    bindparam,
    case,
    insert,
    literal,
    or_,
    select,
    update,
)

from lamina.core.lineage import LineageEntry, LineageState
from lamina.errors import LineageEntryNotFoundError
from lamina.meta.db import Db
from lamina.meta.rows import entry_of
from lamina.meta.schema import lineage, lineage_ids


def lists(
    conn: Connection, entry_ids: list[str], roles: tuple[str, ...] = ()
) -> dict[tuple[str, str], list[str]]:
    """The id lists of the entries (only ``roles`` if given): (entry id, role) -> ids."""
    if not entry_ids:
        return {}
    stmt = select(lineage_ids).where(lineage_ids.c.entry_id.in_(entry_ids))
    if roles:
        stmt = stmt.where(lineage_ids.c.role.in_(roles))
    return {(r.entry_id, r.role): json.loads(r.ids) for r in conn.execute(stmt)}


def put_list(conn: Connection, entry_id: str, role: str, ids: list[str]) -> None:
    """Set one id list of an entry."""
    done = conn.execute(
        update(lineage_ids)
        .where(lineage_ids.c.entry_id == entry_id, lineage_ids.c.role == role)
        .values(ids=json.dumps(ids))
    ).rowcount
    if not done:
        conn.execute(insert(lineage_ids).values(entry_id=entry_id, role=role, ids=json.dumps(ids)))


_ENTRIES = (
    select(lineage).where(lineage.c.table_id == bindparam("tid")).order_by(lineage.c.started_seq)
)


#: the table's non-empty from/to lists (a push's empty from, the other roles, are not read)
_LISTS = (
    select(lineage_ids.c.entry_id, lineage_ids.c.role, lineage_ids.c.ids)
    .join(lineage, lineage.c.id == lineage_ids.c.entry_id)
    .where(
        lineage.c.table_id == bindparam("tid"),
        lineage_ids.c.role.in_(("from", "to")),
        lineage_ids.c.ids != "[]",
    )
)


def entries(conn: Connection, table_id: int, seq: int | None = None) -> list[LineageEntry]:
    """The table's entries as they stood at snapshot ``seq`` (None: now), oldest first."""
    rows = conn.execute(_ENTRIES, {"tid": table_id}).all()
    if not rows:
        return []
    got = {(r.entry_id, r.role): json.loads(r.ids) for r in conn.execute(_LISTS, {"tid": table_id})}
    return [e for r in rows if (e := entry_of(r, got, seq)) is not None]


def hidden_at(conn: Connection, table_id: int, seq: int | None = None) -> set[str]:
    """The segment ids the table's lineage hides from readers of snapshot ``seq``
    (None: now): :func:`lamina.core.lineage.hidden_by` of :func:`entries`, with the
    state of each entry at ``seq`` decided in SQL, so that only the lists that hide
    something are read (not a completed push's empty from, nor any to it shows)."""
    started: ColumnElement[bool] = literal(True)
    if seq is None:
        completed = lineage.c.state == LineageState.COMPLETED.value
    else:
        completed = and_(
            lineage.c.completed_seq <= seq,
            or_(lineage.c.reverted_seq.is_(None), lineage.c.reverted_seq > seq),
        )
        started = lineage.c.started_seq <= seq
    role = case((completed, "from"), else_="to")
    stmt = (
        select(lineage_ids.c.ids)
        .join(lineage, lineage.c.id == lineage_ids.c.entry_id)
        .where(
            lineage.c.table_id == table_id,
            started,
            lineage_ids.c.role == role,
            lineage_ids.c.ids != "[]",
        )
    )
    hidden: set[str] = set()
    for (ids,) in conn.execute(stmt):
        hidden.update(json.loads(ids))
    return hidden


def entry_row(db: Db, conn: Connection, table_id: int, entry_id: str, *cols: Any) -> Any:
    """The entry's row, locked (only ``cols`` if given). Raises LineageEntryNotFoundError."""
    stmt = select(*(cols or (lineage,))).where(
        lineage.c.id == entry_id, lineage.c.table_id == table_id
    )
    if not db.sqlite:
        stmt = stmt.with_for_update()
    row = conn.execute(stmt).first()
    if row is None:
        raise LineageEntryNotFoundError(
            f"no lineage entry {entry_id!r} in this table; list them with t.lineage()"
        )
    return row
