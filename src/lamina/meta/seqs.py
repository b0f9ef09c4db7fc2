"""The cheapest catalog read: which snapshot each named table is at."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import Connection, Engine, func, select

from lamina.meta.db import run
from lamina.meta.schema import tables


def latest_seqs(engine: Engine, names: Iterable[str]) -> dict[str, tuple[int, int]]:
    """``{name: (table id, last seq)}`` of the tables among ``names`` (matched without
    regard to case, as SQL identifiers are); missing names are left out. One query.

    Raises CatalogUnavailableError when the catalog database cannot be reached.
    """
    wanted = sorted({n.lower() for n in names})
    if not wanted:
        return {}
    stmt = (
        select(tables.c.name, tables.c.id, tables.c.last_seq)
        .where(func.lower(tables.c.name).in_(wanted))
        .order_by(tables.c.name)
    )

    def txn(conn: Connection) -> dict[str, tuple[int, int]]:
        return {r[0]: (int(r[1]), int(r[2])) for r in conn.execute(stmt)}

    return run(engine, txn, write=False)
