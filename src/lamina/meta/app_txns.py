"""Exactly-once writes: the latest version each application recorded on a table.

Checked and moved inside the publishing transaction (under the table lock), so two
writers carrying one application's version can never both publish.
"""

from __future__ import annotations

from sqlalchemy import ColumnElement, Connection, insert, select, update

from lamina.errors import AlreadyAppliedError
from lamina.meta.db import Db
from lamina.meta.schema import app_txns
from lamina.meta.tables import now_us


def _where(table_id: int, app_id: str) -> tuple[ColumnElement[bool], ColumnElement[bool]]:
    return (app_txns.c.table_id == table_id, app_txns.c.app_id == app_id)


def recorded(conn: Connection, table_id: int, app_id: str) -> tuple[int, int] | None:
    """(version, commit id) the application last recorded, or None."""
    row = conn.execute(
        select(app_txns.c.version, app_txns.c.commit_id).where(*_where(table_id, app_id))
    ).first()
    return None if row is None else (int(row[0]), int(row[1]))


def latest(db: Db, table_id: int, app_id: str) -> tuple[int, int] | None:
    """:func:`recorded`, in a transaction of its own."""
    return db.read(lambda conn: recorded(conn, table_id, app_id))


def check(conn: Connection, table_id: int, app_id: str, version: int) -> None:
    """Raises AlreadyAppliedError unless ``version`` is above the recorded one."""
    got = recorded(conn, table_id, app_id)
    if got is not None and version <= got[0]:
        raise AlreadyAppliedError(
            f"application {app_id!r} already wrote version {got[0]} (commit {got[1]}); "
            f"version {version} is skipped",
            got[1],
        )


def record(conn: Connection, table_id: int, app_id: str, version: int, commit_id: int) -> None:
    """Set the application's version (in the transaction that records the commit)."""
    values = {"version": version, "commit_id": commit_id, "updated_at": now_us()}
    done = conn.execute(update(app_txns).where(*_where(table_id, app_id)).values(values))
    if not done.rowcount:
        conn.execute(insert(app_txns).values(table_id=table_id, app_id=app_id, **values))
