"""The user-facing catalog: connect, create/load/drop tables, SQL over snapshots."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lamina.core.interval import Granularity, to_us
from lamina.core.properties import check_properties, setting
from lamina.errors import InvalidGranularityError, InvalidTableNameError, WarehouseError
from lamina.io.arrow import check_time_column
from lamina.io.warehouse import Warehouse, commit_dir
from lamina.meta.db import create_catalog_engine
from lamina.meta.schema import migrate
from lamina.meta.store import CatalogStore, now_us

if TYPE_CHECKING:
    from lamina.engines.duckdb import SqlEngine
    from lamina.table import Table

DEFAULT_WAREHOUSE = "./warehouse"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


def connect(
    catalog: str | None = None,
    warehouse: str | None = None,
    *,
    writer_wait_s: float = 30.0,
    heartbeat_s: float = 5.0,
    stale_after_s: float = 60.0,
) -> Catalog:
    """Open (creating if needed) a catalog and its warehouse.

    Defaults: warehouse ``$LAMINA_WAREHOUSE`` or ``./warehouse``; catalog
    ``$LAMINA_CATALOG`` or a SQLite file ``lamina.db`` inside the warehouse.
    """
    wh = Warehouse(warehouse or os.environ.get("LAMINA_WAREHOUSE") or DEFAULT_WAREHOUSE)
    wh.ensure_writable()
    url = catalog or os.environ.get("LAMINA_CATALOG")
    if not url:
        if not wh.local:
            raise WarehouseError(
                "a remote warehouse needs an explicit catalog URL (catalog=postgresql://...)"
            )
        url = f"sqlite:///{wh.root}/lamina.db"
    return Catalog(
        url, wh, writer_wait_s=writer_wait_s, heartbeat_s=heartbeat_s, stale_after_s=stale_after_s
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
        self.url = url
        self.warehouse = warehouse
        self.writer_wait_s = writer_wait_s
        self.heartbeat_s = heartbeat_s
        self.stale_after_s = stale_after_s
        self.engine = create_catalog_engine(url)
        migrate(self.engine)
        self.store = CatalogStore(self.engine, warehouse.root)
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
    ) -> Table:
        """Create a table. ``schema``: a pyarrow Schema or a Spark StructType.

        ``ingestion_type`` (APPEND or REFRESH) and ``consistent_push`` are stored as
        table properties and can be changed later with ``t.set_properties``.
        """
        from lamina.table import Table

        check_table_name(name)
        arrow_schema = _arrow_schema(schema)
        check_time_column(arrow_schema, time_column)
        if time_column is None:
            granularity = Granularity.ALL
            if segment_granularity not in (None, "ALL", Granularity.ALL):
                raise InvalidGranularityError(
                    "a table without a time column has one ALL chunk; drop segment_granularity "
                    "or name a time_column"
                )
        else:
            granularity = Granularity.parse(segment_granularity or Granularity.DAY)
            if granularity is Granularity.ALL:
                raise InvalidGranularityError(
                    "ALL granularity is for tables without a time column; pick HOUR, DAY, "
                    "WEEK, MONTH, QUARTER or YEAR"
                )
        props = {
            "ingestion_type": ingestion_type,
            "consistent_push": str(bool(consistent_push)).lower(),
            **{
                k: str(v).lower() if isinstance(v, bool) else str(v)
                for k, v in (properties or {}).items()
            },
        }
        props = check_properties(props)
        record = self.store.create_table(name, arrow_schema, time_column, granularity, props)
        return Table(self, record)

    def load_table(self, name: str) -> Table:
        from lamina.table import Table

        return Table(self, self.store.get_table(name))

    def list_tables(self) -> list[str]:
        return self.store.list_tables()

    def drop_table(self, name: str) -> None:
        """Remove a table from the catalog, then its files."""
        record = self.store.drop_table(name)
        self.warehouse.delete_dir(self.warehouse.path(record.name))

    # -- SQL ----------------------------------------------------------------------

    def sql(self, query: str) -> pa.Table:
        """Run DuckDB SQL over the current snapshots of the tables the query names.

        Raises SqlError when the query cannot be parsed or fails.
        """
        with self._sql_lock:
            if self._sql is None:
                from lamina.core.scan import plan_scan
                from lamina.engines.duckdb import SqlEngine
                from lamina.meta.seqs import latest_seqs

                self._sql = SqlEngine(
                    lambda names: latest_seqs(self.engine, names),
                    lambda name: plan_scan(self.store.snapshot(name)),
                )
        return self._sql.sql(query)

    # -- maintenance ----------------------------------------------------------------

    def _clean_commits(self, table: str, commit_ids: Sequence[int]) -> None:
        """Delete the files of aborted commits, then record that they are gone."""
        for cid in commit_ids:
            self.warehouse.delete_dir(self.warehouse.path(commit_dir(table, cid)))
        self.store.mark_cleaned(commit_ids)

    def _delete_files(self, rel_paths: Sequence[str]) -> None:
        """Delete files (relative to the warehouse root); already missing is fine."""
        for rel in rel_paths:
            with contextlib.suppress(FileNotFoundError):
                self.warehouse.fs.delete_file(self.warehouse.path(rel))

    def run_retention(
        self,
        now: dt.datetime | None = None,
        tables: Sequence[str] | None = None,
        lineage_only: bool = False,
    ) -> RetentionReport:
        """Delete what lineage, overwrites and deletes left behind, and orphan files.

        Per table: segments replaced by COMPLETED entries (and segments removed by
        commits) once older than ``replaced_segments_retention``; segments written
        under REVERTED entries, and under IN_PROGRESS ones older than
        ``lineage_cleanup_retention``; files no catalog row names, older than
        ``orphan_grace_period``. ``now`` lets a caller catch up or test.
        """
        at = now_us() if now is None else to_us(now)
        never = 2**62
        report = RetentionReport()
        for name in tables if tables is not None else self.list_tables():
            props = self.store.get_table(name).properties
            garbage = self.store.retention(
                name,
                at,
                never if lineage_only else setting(props, "replaced_segments_retention"),
                never if lineage_only else setting(props, "lineage_cleanup_retention"),
            )
            self._delete_files(garbage)
            report.segment_files += len(garbage)
            if not lineage_only:
                orphans = self.find_orphans(now=now, tables=[name], with_grace=True)
                self._delete_files(orphans)
                report.orphan_files += len(orphans)
        return report

    def find_orphans(
        self,
        now: dt.datetime | None = None,
        tables: Sequence[str] | None = None,
        with_grace: bool = False,
    ) -> list[str]:
        """Files under the tables' data directories that no catalog row names
        (relative paths). ``with_grace``: only those older than ``orphan_grace_period``
        — a writer that is still writing is never robbed."""
        at = now_us() if now is None else to_us(now)
        out: list[str] = []
        root = self.warehouse.root
        for name in tables if tables is not None else self.list_tables():
            rec = self.store.get_table(name)
            known = self.store.referenced_files(rec.id)
            grace = setting(rec.properties, "orphan_grace_period") if with_grace else 0
            for info in self.warehouse.list_files(self.warehouse.path(f"{name}/data")):
                rel = info.path[len(root) + 1 :]
                if rel in known:
                    continue
                mtime = info.mtime_ns // 1000 if info.mtime_ns is not None else 0
                if at - mtime >= grace:
                    out.append(rel)
        return sorted(out)

    def clean_failed_writes(self) -> int:
        """Abort writes whose writer died, and delete every aborted write's files."""
        count = 0
        for name in self.list_tables():
            rec = self.store.get_table(name)
            failed = self.store.failed_commits(rec.id, self.stale_after_s)
            self._clean_commits(name, failed)
            count += len(failed)
        return count

    def close(self) -> None:
        if self._sql is not None:
            self._sql.close()
        self.engine.dispose()

    def __enter__(self) -> Catalog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Catalog({self.engine.url.render_as_string()!r}, {self.warehouse.location!r})"


@dataclass
class RetentionReport:
    """What one retention run deleted."""

    segment_files: int = 0
    orphan_files: int = 0


def check_table_name(name: str) -> None:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidTableNameError(
            f"invalid table name {name!r}: use 1-128 letters, digits or underscores, "
            "not starting with a digit"
        )


def _arrow_schema(schema: Any) -> pa.Schema:
    if isinstance(schema, pa.Schema):
        return schema
    if type(schema).__module__.startswith("pyspark."):
        from lamina.engines.spark import spark_to_arrow_schema

        return spark_to_arrow_schema(schema)
    from lamina.errors import SchemaError

    raise SchemaError(
        f"schema must be a pyarrow.Schema or a Spark StructType, not {type(schema).__name__}"
    )
