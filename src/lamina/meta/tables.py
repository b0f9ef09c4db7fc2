"""Table rows: create, read, list, change properties, drop, lock."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, bindparam, delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from lamina.core.interval import Granularity
from lamina.core.model import TableRecord
from lamina.errors import TableExistsError, TableNotFoundError
from lamina.failpoints import failpoint
from lamina.meta.db import Db
from lamina.meta.rows import table_record
from lamina.meta.schema import (
    app_txns,
    commits,
    deletes,
    dropped,
    key_snapshots,
    lineage,
    lineage_ids,
    locks,
    manifests,
    retired,
    schemas,
    segments,
    tables,
)

if TYPE_CHECKING:
    import pyarrow as pa


def now_us() -> int:
    """The wall clock in µs (for timestamps only: order comes from counters)."""
    return time.time_ns() // 1000


def create_table(
    db: Db,
    name: str,
    schema: pa.Schema,
    time_column: str | None,
    granularity: Granularity,
    properties: dict[str, str],
) -> TableRecord:
    """Insert a table row. Raises TableExistsError."""

    def txn(conn: Connection) -> int:
        same = select(tables.c.name).where(func.lower(tables.c.name) == name.lower())
        other = conn.execute(same).scalar()
        if other == name:
            raise TableExistsError(f"table {name!r} already exists; pick another name")
        if other is not None:  # SQL (DuckDB, Spark) would read one for the other
            raise TableExistsError(
                f"table {other!r} already exists, and SQL does not tell names apart by "
                "case; pick another name"
            )
        # a table dropped under this name: its seqs go on (a change feed's checkpoint)
        seq = select(dropped.c.last_seq).where(dropped.c.name == name.lower())
        start = int(conn.execute(seq).scalar() or 0)
        ids: dict[str, int] = {}
        if db.sqlite:  # which reuses the greatest id once its row is deleted
            top = select(func.max(tables.c.id)).scalar_subquery()
            gone = select(func.max(dropped.c.table_id)).scalar_subquery()
            both = func.max(func.coalesce(top, 0), func.coalesce(gone, 0))
            ids["id"] = 1 + int(conn.execute(select(both)).scalar_one())
        try:
            result = conn.execute(
                insert(tables).values(
                    **ids,
                    name=name,
                    schema_ipc=schema.serialize().to_pybytes(),
                    time_column=time_column,
                    granularity=granularity.value,
                    properties=json.dumps(properties, sort_keys=True),
                    created_at=now_us(),
                    next_version=1,
                    last_seq=start,
                )
            )
        except IntegrityError:
            raise TableExistsError(f"table {name!r} already exists; pick another name") from None
        pk = result.inserted_primary_key
        assert pk is not None
        if not db.sqlite:  # a drop of the name that committed while the insert waited
            later = int(conn.execute(seq).scalar() or 0)
            if later > start:
                conn.execute(update(tables).where(tables.c.id == pk[0]).values(last_seq=later))
        return int(pk[0])

    table_id = db.write(txn)
    return TableRecord(table_id, name, schema, time_column, granularity, dict(properties))


def read_table(conn: Connection, name: str) -> TableRecord:
    """The table named ``name``, inside a transaction. Raises TableNotFoundError."""
    row = conn.execute(select(tables).where(tables.c.name == name)).first()
    if row is None:
        raise TableNotFoundError(f"no table named {name!r}; list tables with cat.list_tables()")
    return table_record(row)


def get_table(db: Db, name: str) -> TableRecord:
    """The table named ``name``. Raises TableNotFoundError."""
    return db.read(lambda conn: read_table(conn, name))


def list_tables(db: Db) -> list[str]:
    return db.read(
        lambda conn: [r[0] for r in conn.execute(select(tables.c.name).order_by(tables.c.name))]
    )


def set_properties(
    db: Db, name: str, updates: dict[str, str], remove: tuple[str, ...] = ()
) -> TableRecord:
    """Merge ``updates`` into the table's properties, less those named in ``remove``.
    Raises TableNotFoundError."""

    def txn(conn: Connection) -> TableRecord:
        lock_table(db, conn, name)  # then read: a concurrent change is merged, not lost
        rec = read_table(conn, name)
        props = {k: v for k, v in {**rec.properties, **updates}.items() if k not in remove}
        conn.execute(
            update(tables)
            .where(tables.c.id == rec.id)
            .values(properties=json.dumps(props, sort_keys=True))
        )
        return rec.with_properties(props)

    return db.write(txn)


def drop_table(
    db: Db, name: str, remove_files: Callable[[TableRecord], None] | None = None
) -> TableRecord:
    """Delete the table's rows (segments, lineage, commits, deletion vectors, key index
    snapshots, exactly-once versions, locks), and call ``remove_files`` before they are
    committed: a table created again under the name waits for the commit (its row
    would clash), so its files are never the ones removed. Raises TableNotFoundError."""

    def txn(conn: Connection) -> TableRecord:
        row = lock_table(db, conn, name)
        rec = read_table(conn, name)
        conn.execute(delete(dropped).where(dropped.c.name == name.lower()))
        conn.execute(
            insert(dropped).values(name=name.lower(), last_seq=int(row.last_seq), table_id=rec.id)
        )
        entries = select(lineage.c.id).where(lineage.c.table_id == rec.id)
        conn.execute(delete(lineage_ids).where(lineage_ids.c.entry_id.in_(entries)))
        owned = (
            *(lineage, segments, retired, manifests, deletes, key_snapshots, app_txns, locks),
            schemas,
        )
        for rows in owned:
            conn.execute(delete(rows).where(rows.c.table_id == rec.id))
        conn.execute(delete(commits).where(commits.c.table_id == rec.id))
        conn.execute(delete(tables).where(tables.c.id == rec.id))
        if remove_files is not None:
            remove_files(rec)
        # the rows are deleted and the files set aside; the transaction not committed
        failpoint("tables.drop.before_commit", record=rec)
        return rec

    return db.write(txn)


# Hot statements are built once (their construction costs more than running them).
_BY_ID = select(tables).where(tables.c.id == bindparam("table"))
_BY_NAME = select(tables).where(tables.c.name == bindparam("table"))
_LOCK = {
    # NO KEY UPDATE: writers of this row wait for each other, while opening a commit
    # (a row whose foreign key names it: KEY SHARE) does not wait for a publish
    (by_id, sqlite): stmt if sqlite else stmt.with_for_update(key_share=True)
    for by_id, stmt in ((True, _BY_ID), (False, _BY_NAME))
    for sqlite in (True, False)
}


def lock_table(db: Db, conn: Connection, table: int | str) -> Any:
    """The row of the table (by id or name), locked against other writers of the
    table until the transaction ends (SQLite: the IMMEDIATE write lock is already
    held). Raises TableNotFoundError."""
    by_id = isinstance(table, int)
    row = conn.execute(_LOCK[(by_id, db.sqlite)], {"table": table}).first()
    if row is None:
        raise TableNotFoundError(
            f"table id {table} was dropped meanwhile"
            if by_id
            else f"no table named {table!r}; list tables with cat.list_tables()"
        )
    return row


_SEQS = (
    select(tables.c.name, tables.c.id, tables.c.last_seq)
    .where(func.lower(tables.c.name).in_(bindparam("names", expanding=True)))
    .order_by(tables.c.name)
)


def latest_seqs(db: Db, names: Iterable[str]) -> dict[str, tuple[int, int]]:
    """``{name: (table id, last seq)}`` of the tables among ``names`` (matched without
    regard to case, as SQL identifiers are); missing names are left out. One query.

    Raises CatalogUnavailableError when the catalog database cannot be reached.
    """
    wanted = sorted({n.lower() for n in names})
    if not wanted:
        return {}
    return db.read(
        lambda conn: {r[0]: (int(r[1]), int(r[2])) for r in conn.execute(_SEQS, {"names": wanted})}
    )
