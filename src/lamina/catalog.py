"""The user-facing catalog: connect, create/load/drop tables, SQL over snapshots."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lamina.errors import InvalidGranularityError, InvalidTableNameError, WarehouseError
from lamina.interval import Granularity
from lamina.io.arrow import check_time_column
from lamina.io.warehouse import Warehouse, commit_dir
from lamina.meta.db import create_catalog_engine
from lamina.meta.schema import migrate
from lamina.meta.store import CatalogStore

if TYPE_CHECKING:
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

    # -- tables -------------------------------------------------------------------

    def create_table(
        self,
        name: str,
        schema: Any,
        time_column: str | None = None,
        segment_granularity: str | Granularity | None = None,
        properties: dict[str, Any] | None = None,
    ) -> Table:
        """Create a table. ``schema``: a pyarrow Schema or a Spark StructType."""
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
        props = {k: str(v) for k, v in (properties or {}).items()}
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
        """Run DuckDB SQL over the current snapshots of the tables the query names."""
        from lamina.engines.duckdb import run_sql

        return run_sql(self, query)

    # -- maintenance ----------------------------------------------------------------

    def _clean_commits(self, table: str, commit_ids: Sequence[int]) -> None:
        """Delete the files of aborted commits, then record that they are gone."""
        for cid in commit_ids:
            self.warehouse.delete_dir(self.warehouse.path(commit_dir(table, cid)))
        self.store.mark_cleaned(commit_ids)

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
        self.engine.dispose()

    def __enter__(self) -> Catalog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Catalog({self.engine.url.render_as_string()!r}, {self.warehouse.location!r})"


def check_table_name(name: str) -> None:
    if not isinstance(name, str) or not _NAME.match(name):
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
