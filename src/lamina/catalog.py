"""The user-facing catalog: connect, create/load/drop tables, SQL over snapshots."""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import os
import re
import threading
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import URL

from lamina.context import CatalogContext
from lamina.core.args import flag, names
from lamina.core.autocompact import check_properties
from lamina.core.interval import Granularity
from lamina.core.properties import as_text, check_reserved
from lamina.errors import (
    CatalogNotFoundError,
    CatalogUnavailableError,
    InvalidGranularityError,
    InvalidTableNameError,
    PropertyError,
    SchemaError,
    SqlError,
    TableExistsError,
    UpsertError,
    WarehouseError,
)
from lamina.failpoints import failpoint
from lamina.io.warehouse import Warehouse
from lamina.meta import tables as table_rows
from lamina.meta.db import Db, create_catalog_engine
from lamina.meta.schema import catalog_id, existing_catalog_id, migrate
from lamina.operations.handle import DEFAULT_TARGET_ROWS, TableHandle
from lamina.read import plan
from lamina.table import Table

if TYPE_CHECKING:
    import pyarrow as pa

    from lamina.core.model import TableRecord
    from lamina.engines.duckdb import SqlEngine
    from lamina.maintenance.retention import RetentionReport
    from lamina.operations.compaction.auto import AutoResult
    from lamina.table import Table

# pyarrow, DuckDB and the write and maintenance modules are imported where used: a
# command line that lists tables starts without them.

DEFAULT_WAREHOUSE = "./warehouse"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


def check_timing(writer_wait_s: float, heartbeat_s: float, stale_after_s: float) -> None:
    """Raise PropertyError unless the writers' timings are usable numbers: waits of at
    least 0 s, a heartbeat above 0 s and a staleness longer than the heartbeat."""

    for name, value in (
        ("writer_wait_s", writer_wait_s),
        ("heartbeat_s", heartbeat_s),
        ("stale_after_s", stale_after_s),
    ):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise PropertyError(f"{name} must be a number of seconds, not {value!r}")
        if not math.isfinite(value) or value < 0 or (value == 0 and name != "writer_wait_s"):
            least = "0 or more" if name == "writer_wait_s" else "above 0"
            raise PropertyError(f"{name} = {value!r}: give a finite number of seconds, {least}")
    if stale_after_s <= heartbeat_s:
        raise PropertyError(
            f"stale_after_s ({stale_after_s}) must be longer than heartbeat_s ({heartbeat_s}), "
            "by a few beats (defaults: 60 and 5): else live writers on other hosts are "
            "taken for dead between two beats"
        )


def connect(
    catalog: str | None = None,
    warehouse: str | None = None,
    *,
    writer_wait_s: float = 30.0,
    heartbeat_s: float = 5.0,
    stale_after_s: float = 60.0,
    create: bool = True,
) -> Catalog:
    """Open (creating if needed) a catalog and its warehouse.

    Defaults: warehouse ``$LAMINA_WAREHOUSE`` or ``./warehouse``; catalog
    ``$LAMINA_CATALOG`` or a SQLite file ``lamina.db`` inside the warehouse.
    ``create=False``: open only a catalog that exists, making nothing (no folder, no
    database file, no catalog tables) — a mistyped path raises CatalogNotFoundError.
    Raises WarehouseError, CatalogUnavailableError (CatalogNotFoundError).
    """
    check_timing(writer_wait_s, heartbeat_s, stale_after_s)
    if warehouse is not None and not isinstance(warehouse, str | os.PathLike):
        raise WarehouseError(f"warehouse must be a path or a URI (a string), not {warehouse!r}")
    warehouse = None if warehouse is None else os.fsdecode(warehouse)
    if warehouse is not None and not str(warehouse).strip():
        raise WarehouseError("the warehouse path is empty: give a directory or a URI")
    if catalog is not None and (not isinstance(catalog, str) or not catalog.strip()):
        raise CatalogUnavailableError(
            f"catalog must be a database URL (e.g. postgresql://host/db) or None for the "
            f"SQLite file in the warehouse, not {catalog!r}"
        )
    create = flag(create, "create")
    wh = Warehouse(warehouse or os.environ.get("LAMINA_WAREHOUSE") or DEFAULT_WAREHOUSE)
    if create:
        wh.ensure_writable()
    elif wh.local and not os.path.isdir(wh.root):
        raise CatalogNotFoundError(
            f"no warehouse at {wh.location} ({wh.root} is not a directory); check the "
            "path, or connect with create=True to make one"
        )
    url = catalog or os.environ.get("LAMINA_CATALOG")
    if not url:
        if not wh.local:
            raise WarehouseError(
                "a remote warehouse needs an explicit catalog URL (catalog=postgresql://...)"
            )

        # escaped: a '?', '%' or '#' in the warehouse path is part of the file's name
        url = URL.create("sqlite", database=f"{wh.root}/lamina.db").render_as_string()
    if not create:
        _check_exists(url)
    return Catalog(
        url, wh, writer_wait_s=writer_wait_s, heartbeat_s=heartbeat_s, stale_after_s=stale_after_s
    )


def _check_exists(url: str) -> None:
    """Raises CatalogNotFoundError unless ``url`` holds a lamina catalog (nothing made)."""
    engine = create_catalog_engine(url)
    try:
        found = existing_catalog_id(engine)
    finally:
        engine.dispose()
    if found is None:
        shown = engine.url.render_as_string(hide_password=True)
        raise CatalogNotFoundError(
            f"no lamina catalog at {shown}; check the URL, or connect with create=True to make one"
        )


class Catalog:
    """Tables of one warehouse, recorded in one transactional catalog database."""

    def __init__(
        self,
        url: str,
        warehouse: Warehouse,
        *,
        writer_wait_s: float = 30.0,
        heartbeat_s: float = 5.0,
        stale_after_s: float = 60.0,
    ) -> None:
        check_timing(writer_wait_s, heartbeat_s, stale_after_s)
        self.url = url
        self.warehouse = warehouse
        self.writer_wait_s = writer_wait_s
        self.heartbeat_s = heartbeat_s
        self.stale_after_s = stale_after_s
        self.engine = create_catalog_engine(url)
        found = warehouse.owner()
        if found is not None and existing_catalog_id(self.engine) != found.get("catalog"):
            self.engine.dispose()
            warehouse.refuse(found)  # before anything is made in this catalog
        migrate(self.engine)
        warehouse.claim(catalog_id(self.engine), self.engine.url.render_as_string())
        self.context = CatalogContext(
            Db(self.engine, warehouse.root),
            warehouse,
            writer_wait_s=writer_wait_s,
            heartbeat_s=heartbeat_s,
            stale_after_s=stale_after_s,
        )
        self._sql: SqlEngine | None = None
        self._sql_lock = threading.Lock()

    # -- tables -------------------------------------------------------------------

    def create_table(
        self,
        name: str,
        schema: Any,
        time_column: str | None = None,
        segment_granularity: str | Granularity | None = None,
        properties: dict[str, Any] | None = None,
        ingestion_type: str = "APPEND",
        consistent_push: bool = False,
        primary_key: str | list[str] | None = None,
        comparison_column: str | None = None,
        delete_column: str | None = None,
        partial_upsert: dict[str, str] | None = None,
        *,
        time_unit: str | None = None,
        exist_ok: bool = False,
    ) -> Table:
        """Create a table. ``schema``: a pyarrow Schema, a Spark StructType, or a schema
        string (Spark's DDL, ``"ts timestamp, v long"``, or ``"ts:timestamp[us],v:int64"``;
        see :mod:`lamina.core.schema_text`).

        ``exist_ok``: a table of that name with the same definition (schema — the one
        it has or was created with —, time column, granularity, the properties and
        upsert definition given) is returned as it is (a rerun); one that differs is
        refused with TableExistsError listing the differences.
        ``time_unit`` (s, ms, us, ns): the time column holds epoch numbers of that unit
        (integers); it is stored as ``timestamp[time_unit, tz=UTC]`` and writes may give
        the numbers or timestamps (docs/concepts.md, Column types).

        Column types are stored in their Parquet-compatible form (views as large
        types, dictionaries as their values...; see Column types in docs/concepts.md).
        Raises UnsupportedTypeError for a column type lamina cannot store, SchemaError
        for another schema object, a time zone not in the time zone database, or a
        repeated or reserved column name (``_change``,
        ``_commit_id``, ``_commit_seq``: incremental reads add them), TimeColumnError,
        InvalidGranularityError, PropertyError and CompactionError for bad properties.

        ``ingestion_type`` (APPEND or REFRESH) and ``consistent_push`` are stored as
        table properties and can be changed later with ``t.set_properties``.

        ``primary_key`` makes an upsert table: per key only the latest record is
        visible (the greatest ``comparison_column``, default the time column; a true
        ``delete_column`` marks a delete). A key column given nullable (as Spark types
        most) is stored NOT NULL: every write refuses a null there. See docs/upserts.md.
        Raises UpsertError for a bad definition (unknown key column, delete column not
        boolean...), TableExistsError.
        """
        from lamina.core.definition import epoch_time_column  # loads numpy, pyarrow
        from lamina.io.arrow import check_time_column, table_schema  # loads numpy, pyarrow
        from lamina.operations.evolve import check_names  # loads numpy, pyarrow

        check_table_name(name)
        exist_ok = flag(exist_ok, "exist_ok")
        arrow_schema = table_schema(_arrow_schema(schema))
        arrow_schema = epoch_time_column(arrow_schema, time_column, time_unit)
        check_names(arrow_schema.names)
        check_time_column(arrow_schema, time_column)
        if time_column is None:
            granularity = Granularity.ALL
            if segment_granularity not in (None, "ALL", Granularity.ALL):
                raise InvalidGranularityError(
                    "a table without a time column has one ALL chunk; drop segment_granularity "
                    "or name a time_column"
                )
        else:
            granularity = Granularity.parse(
                Granularity.DAY if segment_granularity is None else segment_granularity
            )
            if granularity is Granularity.ALL:
                raise InvalidGranularityError(
                    "ALL granularity is for tables without a time column; pick HOUR, DAY, "
                    "WEEK, MONTH, QUARTER or YEAR"
                )
            import pyarrow as pa  # loads numpy, pyarrow

            is_date = pa.types.is_date(arrow_schema.field(time_column).type)
            if is_date and granularity is Granularity.HOUR:
                raise InvalidGranularityError(
                    f"time column {time_column!r} holds dates: every row would fall in the "
                    "first hour of its day; pick DAY or coarser"
                )
        props = as_text(
            {
                "ingestion_type": ingestion_type,
                "consistent_push": consistent_push,
                **as_text(properties or {}),
            }
        )
        check_reserved(props, creating=True)
        props = check_properties(props)
        if any(k.startswith("compaction.") for k in props):  # the policy, on this table
            from lamina.core.autocompact import check_policy, policy_of

            target = int(props.get("target_rows_per_segment", DEFAULT_TARGET_ROWS))
            policy = policy_of(props, target)
            check_policy(policy, arrow_schema, time_column, granularity, setting=True)
        if primary_key is not None:
            from lamina.core.comparison import cmp_dtype  # loads numpy, pyarrow
            from lamina.core.upsert import UpsertSpec  # loads numpy, pyarrow
            from lamina.core.upsert_spec import key_not_null, refuse_consistent_push

            arrow_schema = key_not_null(arrow_schema, primary_key)  # a NOT NULL constraint
            spec = UpsertSpec.parse(
                arrow_schema,
                time_column,
                primary_key,
                comparison_column,
                delete_column,
                partial_upsert,
            )
            cmp_dtype(arrow_schema.field(spec.comparison_column).type)
            refuse_consistent_push(props)
            props.update(spec.to_properties())
        elif (comparison_column, delete_column, partial_upsert) != (None, None, None):
            raise UpsertError(
                "comparison_column, delete_column and partial_upsert define an upsert "
                "table: name its primary_key too"
            )
        try:
            record = table_rows.create_table(
                self.context.db, name, arrow_schema, time_column, granularity, props
            )
        except TableExistsError:
            if not exist_ok:
                raise
            record = self._same_table(name, arrow_schema, time_column, granularity, props)
        return Table(self.context, record)

    def _same_table(
        self,
        name: str,
        schema: pa.Schema,
        time_column: str | None,
        granularity: Granularity,
        props: dict[str, str],
    ) -> TableRecord:
        """Table ``name``'s record, if it has the definition given again. Raises
        TableExistsError listing the differences."""
        from lamina.core.definition import differences  # loads numpy, pyarrow
        from lamina.meta.schemas import schema_at

        db = self.context.db
        rec = table_rows.get_table(db, name)
        created = db.read(lambda conn: schema_at(conn, rec, 0)).schema
        diff = differences(rec, created, schema, time_column, granularity, props)
        if diff:
            raise TableExistsError(
                f"table {name!r} exists with another definition: {'; '.join(diff)}; give "
                "its definition, or another name (exist_ok returns a table only as it was "
                "made)"
            )
        return rec

    def load_table(self, name: str) -> Table:
        """The table named ``name``. Raises TableNotFoundError, InvalidTableNameError."""

        return Table(self.context, table_rows.get_table(self.context.db, _a_name(name)))

    def list_tables(self) -> list[str]:
        return table_rows.list_tables(self.context.db)

    def drop_table(self, name: str) -> None:
        """Remove a table from the catalog, then its files. In a local warehouse its
        folder is moved aside inside the catalog transaction (back if that fails), so a
        table created again under the name meanwhile keeps its own files, and the
        catalog waits for no deletion. A remote one (no atomic move) deletes after the
        commit the files it listed before it: a table created again under the name
        keeps its own; files a writer added meanwhile are left to retention. Raises
        TableNotFoundError, WarehouseError."""

        name = _a_name(name)
        wh = self.warehouse
        moved: list[tuple[str, str]] = []  # (folder, where it went)
        # remote: the table's files, listed while no other table can have its name
        listed: list[str] = []
        if not wh.local:
            folder = wh.path(table_rows.get_table(self.context.db, name).name)
            listed = [i.path for i in wh.list_files(folder)]

        def move_aside(rec: TableRecord) -> None:
            src = wh.path(rec.name)
            dst = wh.path(f".dropped-{rec.name}-{uuid.uuid4().hex[:12]}")
            try:
                os.rename(src, dst)
            except FileNotFoundError:  # no files yet, or moved by an earlier try
                return
            except OSError as exc:
                raise WarehouseError(f"cannot move {src} aside to drop it: {exc}") from None
            moved.append((src, dst))

        try:
            record = table_rows.drop_table(self.context.db, name, move_aside if wh.local else None)
        except BaseException:
            for src, dst in moved:  # the rows stay: so do their files
                with contextlib.suppress(OSError):
                    os.rename(dst, src)
            raise
        # the drop is committed; the table's files are not removed yet
        failpoint("catalog.drop.before_remove_files", record=record)
        for _, dst in moved:
            wh.delete_dir(dst)
        if not wh.local:  # no atomic move: removed after the commit
            self.context.delete_files([p[len(wh.root) + 1 :] for p in listed])
        self.context.keys.forget(record.id)

    # -- SQL ----------------------------------------------------------------------

    def sql(self, query: str, as_of: Any = None) -> pa.Table:
        """Run DuckDB SQL over the current snapshots of the tables the query names.

        ``as_of`` reads past snapshots instead: ``{"t": 3}`` (per table: a version, a
        Commit or a time, as ``t.to_arrow(as_of=...)`` takes), or one value for every
        table. In the query, ``t AT (VERSION => 3)`` or ``t AT (TIMESTAMP =>
        '2024-01-02 03:00')`` (UTC unless zoned) reads that snapshot of ``t`` there.
        Raises SqlError when the query cannot be parsed or fails, or ``as_of`` names a
        table it does not read; InvalidArgumentError, SnapshotNotFoundError,
        SnapshotTooOldError as ``t.to_arrow(as_of=...)``.
        """
        if not isinstance(query, str):
            raise SqlError(f"cat.sql takes the query as a string, not {query!r}")
        return self.sql_engine().sql(query, as_of)

    def sql_engine(self) -> SqlEngine:
        """The catalog's DuckDB engine (``.run(query, fetch)`` reads results other
        than as Arrow tables)."""
        with self._sql_lock:
            if self._sql is None:
                from lamina.engines.duckdb import SqlEngine  # loads duckdb

                ctx = self.context
                self._sql = SqlEngine(
                    lambda names: table_rows.latest_seqs(ctx.db, names),
                    lambda name, as_of: plan(ctx, name, as_of),
                    filesystem=self.warehouse.fsspec(),  # remote: DuckDB reads through it
                )
            return self._sql

    # -- maintenance ----------------------------------------------------------------

    def run_retention(
        self,
        now: dt.datetime | None = None,
        tables: Sequence[str] | None = None,
        lineage_only: bool = False,
        dry_run: bool = False,
    ) -> RetentionReport:
        """Delete what lineage, overwrites and deletes left behind, and orphan files.

        Per table: segments replaced by COMPLETED entries (and segments removed by
        commits) once older than ``replaced_segments_retention``; segments written
        under REVERTED entries, and under IN_PROGRESS ones older than
        ``lineage_cleanup_retention``; files no catalog row names, older than
        ``orphan_grace_period``; the folder of a drop whose process died before it
        finished, older than ``orphan_grace_period``: deleted, or moved back into its
        table's folder if the drop never committed (in a remote warehouse, by a run
        over every table: the old files under names no table has). ``now`` lets a
        caller catch up or test. ``dry_run``: report what would be deleted (the same
        decisions, rolled back), delete nothing. Raises TableNotFoundError,
        WarehouseError.
        """
        from lamina.maintenance import retention  # loads numpy, pyroaring

        names = self._tables(tables)
        lineage_only = flag(lineage_only, "lineage_only")
        dry_run = flag(dry_run, "dry_run")
        return retention.run_retention(
            self.context, names, now, lineage_only, tables is None, dry_run
        )

    def find_orphans(
        self,
        now: dt.datetime | None = None,
        tables: Sequence[str] | None = None,
        with_grace: bool = False,
    ) -> list[str]:
        """Files under the tables' data and key index directories that no catalog
        row names (relative paths). ``with_grace``: only those older than
        ``orphan_grace_period`` — a writer that is still writing is never robbed."""
        from lamina.maintenance import retention  # loads numpy, pyroaring

        names = self._tables(tables)
        return retention.find_orphans(self.context, names, now, flag(with_grace, "with_grace"))

    def compact_auto(
        self, tables: Sequence[str] | None = None, dry_run: bool = False
    ) -> list[AutoResult]:
        """Auto-compaction: per table (default: all), each chunk's status under its
        ``compaction.*`` policy, newest first; PENDING chunks are compacted (minor
        ones in one commit, then one major compaction per interval) unless
        ``dry_run``. A chunk whose compaction met a conflict or a busy lock carries
        the error and is retried next run. Raises PropertyError, CompactionError (a
        bad policy), TableNotFoundError."""
        from lamina.operations.compaction.auto import compact_auto  # loads numpy, pyarrow

        out: list[AutoResult] = []
        dry_run = flag(dry_run, "dry_run")
        for name in self._tables(tables):
            rec = table_rows.get_table(self.context.db, _a_name(name))
            out += compact_auto(TableHandle(self.context, rec), dry_run)
        return out

    def _tables(self, tables: Sequence[str] | None) -> list[str]:
        """The tables a maintenance call names (None: all). Raises
        InvalidTableNameError (a lone string: it would be read as its characters)."""

        if tables is None:
            return self.list_tables()
        return names(tables, "tables", InvalidTableNameError)

    def clean_failed_writes(self) -> int:
        """Abort writes whose writer died, and delete every aborted write's files."""
        from lamina.maintenance import retention  # loads numpy, pyroaring

        return retention.clean_failed_writes(self.context, self.list_tables())

    def close(self) -> None:
        """Wait for the key index snapshots this process is saving; release the
        catalog's connections and its DuckDB engine."""
        self.context.keys.wait()
        if self._sql is not None:
            self._sql.close()
        self.engine.dispose()

    def __enter__(self) -> Catalog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Catalog({self.engine.url.render_as_string()!r}, {self.warehouse.location!r})"


def check_table_name(name: str) -> None:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidTableNameError(
            f"invalid table name {name!r}: use 1-128 letters, digits or underscores, "
            "not starting with a digit"
        )


def _arrow_schema(schema: Any) -> pa.Schema:
    import pyarrow as pa  # loads numpy, pyarrow

    if isinstance(schema, pa.Schema):
        return schema
    if isinstance(schema, str):
        from lamina.core.schema_text import parse_schema  # loads numpy, pyarrow

        return parse_schema(schema)
    if type(schema).__module__.startswith("pyspark."):
        from lamina.engines.spark_schema import spark_to_arrow_schema  # loads numpy, pyarrow

        return spark_to_arrow_schema(schema)

    raise SchemaError(
        f"schema must be a pyarrow.Schema, a Spark StructType or a schema string (e.g. "
        f"'ts timestamp, v long'), not {type(schema).__name__}"
    )


def _a_name(name: Any) -> str:
    """``name``, a table's name (a string). Raises InvalidTableNameError."""
    if not isinstance(name, str):
        raise InvalidTableNameError(f"a table's name is a string, not {name!r}")
    return name
