"""Schema evolution in the catalog: a change of a table's schema is one commit (action
ALTER, no files; or the major compaction whose rollup adds a count column) that keeps
the schema it replaced for the older snapshots."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING

from sqlalchemy import Connection, insert, select, update

from lamina.core.interval import from_us
from lamina.core.model import Commit, CommitAction, CommitState, TableRecord
from lamina.core.plans import AlterPlan
from lamina.core.properties import SCHEMA_CHANGED_SEQ
from lamina.meta.commits import record_commit
from lamina.meta.db import Db
from lamina.meta.rows import table_record
from lamina.meta.schema import schemas, tables
from lamina.meta.tables import lock_table, read_table

if TYPE_CHECKING:
    import pyarrow as pa


def change_schema(
    db: Db,
    name: str,
    change: Callable[[TableRecord], tuple[pa.Schema, dict[str, object]]],
) -> tuple[TableRecord, Commit]:
    """Replace the schema of table ``name`` by what ``change`` makes of its locked
    record (the new schema and the commit's metadata), in one commit. Raises what
    ``change`` raises (nothing is changed then) and TableNotFoundError."""

    def txn(conn: Connection) -> tuple[TableRecord, Commit]:
        trow = lock_table(db, conn, name)
        rec = read_table(conn, name)
        schema, meta = change(rec)
        from lamina.meta.publish_checks import check  # the first schema change's import

        check(db, conn, trow, AlterPlan())  # nothing applies: no segment changes
        done = record_commit(conn, trow, CommitAction.ALTER, meta)
        changed = record_schema(conn, rec, bytes(trow.schema_ipc), done.seq, schema)
        when = from_us(done.at_us)
        commit = Commit(
            done.id,
            CommitAction.ALTER,
            CommitState.COMPLETED,
            when,
            when,
            name,
            metadata=meta,
            seq=done.seq,
            inflight_at=when,
        )
        return changed, commit

    return db.write(txn)


def record_schema(
    conn: Connection, rec: TableRecord, old_ipc: bytes, seq: int, schema: pa.Schema
) -> TableRecord:
    """Make ``schema`` the table's from the commit of ``seq`` on (recorded in this
    transaction, under the table's lock), keeping the one it replaces (``old_ipc``) for
    the older snapshots; returns ``rec`` with it."""
    conn.execute(insert(schemas).values(table_id=rec.id, before_seq=seq, schema_ipc=old_ipc))
    props = {**rec.properties, SCHEMA_CHANGED_SEQ: str(seq)}
    conn.execute(
        update(tables)
        .where(tables.c.id == rec.id)
        .values(
            schema_ipc=schema.serialize().to_pybytes(),
            properties=json.dumps(props, sort_keys=True),
        )
    )
    return rec.with_schema(schema).with_properties(props)


def add_at(
    conn: Connection, table_id: int, old_ipc: bytes, seq: int, fields: tuple[pa.Field, ...]
) -> None:
    """Add ``fields`` at the end of the table's schema from the commit of ``seq`` on (a
    major compaction's rollup count columns, a write's new columns: checked at publish,
    under the table's lock); those the schema has by now (the same, another write's)
    are left as they are."""
    import pyarrow as pa  # loads numpy, pyarrow

    rec = table_record(conn.execute(select(tables).where(tables.c.id == table_id)).one())
    new = [f for f in fields if f.name not in rec.schema.names]
    if new:
        record_schema(conn, rec, old_ipc, seq, pa.schema([*rec.schema, *new]))


def schema_at(conn: Connection, rec: TableRecord, seq: int) -> TableRecord:
    """``rec`` with the schema its snapshot ``seq`` reads with: the one it had then."""
    changed = rec.properties.get(SCHEMA_CHANGED_SEQ)
    if changed is None or seq >= int(changed):
        return rec  # no change since: the current schema (no catalog read)
    row = conn.execute(
        select(schemas.c.schema_ipc)
        .where(schemas.c.table_id == rec.id, schemas.c.before_seq > seq)
        .order_by(schemas.c.before_seq)
        .limit(1)
    ).first()
    return rec if row is None else rec.with_schema(bytes(row[0]))
