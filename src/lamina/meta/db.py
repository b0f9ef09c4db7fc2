"""Catalog database access: one engine, short transactions, retries on contention.

SQLite: WAL journal, and every write transaction starts with ``BEGIN IMMEDIATE`` so
it takes the write lock up front (a deferred transaction that later upgrades gets
SQLITE_BUSY without waiting). PostgreSQL: writes run READ COMMITTED plus row locks
(``SELECT ... FOR UPDATE`` on the table row) and a retry on serialization failures
and deadlocks; reads run REPEATABLE READ, so that every statement of a read sees the
same snapshot (as a SQLite transaction does). Nothing relies on an in-process lock.
"""

from __future__ import annotations

import os
import random
import sqlite3
import time
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import (
    ArgumentError,
    DatabaseError,
    DBAPIError,
    DisconnectionError,
    OperationalError,
)

from lamina.errors import CatalogUnavailableError
from lamina.failpoints import failpoint

T = TypeVar("T")

_RETRYABLE_PG = {"40001", "40P01", "55P03"}  # serialization failure, deadlock, lock n/a


def normalize_url(url: str) -> str:
    """Map plain ``postgresql://`` to the psycopg 3 driver lamina depends on."""
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def create_catalog_engine(url: str) -> Engine:
    """Create the engine for a catalog URL (``sqlite:///path`` or ``postgresql://...``)."""
    url = normalize_url(url)
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise CatalogUnavailableError(
            f"cannot read catalog URL {url!r}; use sqlite:///path/to/lamina.db or "
            "postgresql://user@host:5432/db"
        ) from None
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        engine = create_engine(url, connect_args={"timeout": 60, "check_same_thread": False})
        _configure_sqlite(engine)
    elif backend == "postgresql":
        engine = create_engine(url, connect_args={"connect_timeout": 5}, pool_size=4)
        _ping_when_idle(engine, float(os.environ.get("LAMINA_PG_PING_IDLE_S", "5")))
    else:
        raise CatalogUnavailableError(
            f"unsupported catalog backend {backend!r}; use sqlite or postgresql"
        )
    return engine


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute(f"PRAGMA busy_timeout={_SQLITE_READ_BUSY_MS}")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        if conn.get_execution_options().get("lamina_write", False):
            _begin_immediate(conn.connection.dbapi_connection)
        else:
            conn.exec_driver_sql("BEGIN")


#: SQLite's own busy handler sleeps 1, 2, 5, 10, 15, 20, 25 ... ms between tries, so a
#: writer waiting for the write lock often sleeps on long after it was released (most
#: of the append latency tail under a concurrent compaction). Writers poll for the
#: lock themselves, every 0.1-1 ms; reads (which WAL rarely blocks) keep the handler.
_SQLITE_READ_BUSY_MS = 60_000
_SQLITE_WRITE_WAIT_S = 60.0


def _begin_immediate(dbapi_conn: Any) -> None:
    """``BEGIN IMMEDIATE``, polling for the write lock (see above) for up to a minute;
    then the last SQLITE_BUSY error is raised (retried by :func:`run`)."""

    dbapi_conn.execute("PRAGMA busy_timeout=0")
    try:
        deadline = time.monotonic() + _SQLITE_WRITE_WAIT_S
        pause = 0.0001
        while True:
            try:
                dbapi_conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
                if time.monotonic() > deadline:  # as SQLAlchemy reports it: run() retries
                    raise OperationalError("BEGIN IMMEDIATE", None, exc) from exc
            time.sleep(pause * (0.5 + random.random()))
            pause = min(pause * 1.5, 0.001)
    finally:
        dbapi_conn.execute(f"PRAGMA busy_timeout={_SQLITE_READ_BUSY_MS}")


def _ping_when_idle(engine: Engine, idle_s: float) -> None:
    """Check a pooled connection before use only when it sat idle for ``idle_s``: a
    server restart or an idle timeout is caught there (the pool then opens a fresh
    connection), while back-to-back transactions pay no extra round trip."""

    @event.listens_for(engine, "checkin")
    def _on_checkin(_dbapi_conn: Any, record: Any) -> None:
        record.info["lamina_idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        since = record.info.get("lamina_idle_since")
        if since is None or time.monotonic() - since < idle_s:
            return
        try:
            cur = dbapi_conn.cursor()
            cur.execute("SELECT 1")
            cur.close()
            dbapi_conn.rollback()  # the ping opened a transaction: the next use sets modes
        except Exception as exc:  # noqa: BLE001 - any failure: take a new connection
            raise DisconnectionError(f"idle catalog connection is gone: {exc}") from exc


def is_sqlite(engine: Engine) -> bool:
    return engine.dialect.name == "sqlite"


def _retryable(exc: DBAPIError) -> bool:
    orig = exc.orig
    code = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if code in _RETRYABLE_PG:
        return True
    text = str(orig).lower()
    return "database is locked" in text or "database is busy" in text


def run(
    engine: Engine,
    fn: Callable[[Connection], T],
    *,
    write: bool,
    attempts: int = 30,
    single: bool = False,
) -> T:
    """Run ``fn`` in one transaction; retry it whole on lock contention.

    ``single``: ``fn`` runs one statement, which PostgreSQL then runs in autocommit
    mode (no BEGIN/COMMIT round trips; one statement is atomic by itself).
    A read (not ``write``) sees one snapshot of the database throughout: PostgreSQL
    REPEATABLE READ (psycopg sends it with the BEGIN); a SQLite transaction always
    does. Under READ COMMITTED a read's statements would each see the commits done by
    then: a snapshot's segment rows read after a lineage cleanup deleted some that its
    purge check, one statement earlier, still let it read.
    """
    delay = 0.005
    lost = 0  # connections found dropped (a failover, a pooler restart)
    for attempt in range(attempts):
        ran = False  # fn returned: an error now came from the COMMIT (its outcome unknown)
        try:
            with engine.connect() as conn:
                if single and not is_sqlite(engine):
                    return fn(conn.execution_options(isolation_level="AUTOCOMMIT"))
                if write:
                    conn = conn.execution_options(lamina_write=True)
                elif not is_sqlite(engine):
                    conn = conn.execution_options(isolation_level="REPEATABLE READ")
                with conn.begin():
                    out = fn(conn)
                    ran = True
                return out
        except DBAPIError as exc:
            # a connection that dropped before the COMMIT was sent rolled back: run again
            # on a fresh one (the pool replaces it), a few times. (A single autocommitted
            # statement whose answer alone was lost runs twice: lamina's open a commit,
            # mark it INFLIGHT or beat, where that costs at most a failed write.)
            dropped = exc.connection_invalidated and not ran and lost < 3
            if (_retryable(exc) or dropped) and attempt < attempts - 1:
                lost += dropped
                time.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 0.5)
                continue
            code = getattr(exc.orig, "sqlstate", None) or getattr(exc.orig, "pgcode", None)
            if code == "57014":  # query_canceled
                raise CatalogUnavailableError(
                    f"a catalog statement was cancelled: {exc.orig}; the server's "
                    "statement_timeout (or an operator) stopped it — raise the timeout for "
                    "lamina's catalog user"
                ) from exc
            if isinstance(exc, OperationalError):
                raise CatalogUnavailableError(
                    f"catalog database error: {exc.orig}; check the catalog URL and that "
                    "the database is running and reachable"
                ) from exc
            if type(exc) is DatabaseError:  # not its subclasses: SQLite's "not a database"
                raise CatalogUnavailableError(
                    f"catalog database error: {exc.orig}; the catalog URL must name a "
                    "lamina catalog (a SQLite file it made, or a PostgreSQL database)"
                ) from exc
            raise
    raise AssertionError("unreachable")


class Db:
    """One catalog database: its engine and the warehouse root that locations are
    relative to. Every public function of the ``lamina.meta`` modules takes one."""

    def __init__(self, engine: Engine, root: str) -> None:
        self.engine = engine
        self.root = root.rstrip("/")
        self.sqlite = is_sqlite(engine)

    def read(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn`` in one read transaction, on one snapshot of the database
        throughout (see :func:`run`)."""
        return run(self.engine, fn, write=False)

    def write(self, fn: Callable[[Connection], T], *, single: bool = False) -> T:
        """Run ``fn`` in one write transaction (retried whole on contention);
        ``single``: ``fn`` is one statement (autocommitted on PostgreSQL)."""
        if single:
            failpoint("db.write.single", db=self, fn=fn)
        return run(self.engine, fn, write=True, single=single)
