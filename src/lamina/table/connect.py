"""A table's Spark writes over Spark Connect: a Connect client has no JVM and no
driver filesystem of its own, so its writes go through the ``lamina`` data source
(``format("lamina")``), which runs on the Connect server; and ``foreach_batch``'s
function pickles (plain values) to run there (docs/spark.md)."""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass
from typing import Any

from lamina.context import CatalogContext
from lamina.core.args import whole_number
from lamina.core.interval import Interval
from lamina.core.model import Commit
from lamina.errors import CommitError, MetadataError, TransactionError, UnsupportedInputError
from lamina.io.arrow import is_spark_connect
from lamina.io.warehouse import Warehouse
from lamina.meta import tables as table_rows
from lamina.meta.db import Db, create_catalog_engine
from lamina.operations.handle import TableHandle
from lamina.operations.steps import aligned, applied, skipped

__all__ = ["ForeachBatch", "is_spark_connect", "refuse_connect", "write_through_source"]


def source_options(ctx: CatalogContext, table: str) -> dict[str, str]:
    """The ``format("lamina")`` options naming ``table`` of the catalog ``ctx`` opens."""
    return {
        "table": table,
        "catalog": ctx.db.engine.url.render_as_string(hide_password=False),
        "warehouse": ctx.warehouse.location,
    }


def refuse_connect(what: str) -> UnsupportedInputError:
    """The error for an entry point that cannot work over Spark Connect."""
    return UnsupportedInputError(
        f"{what} cannot run over Spark Connect (the client has no JVM, and lamina's own "
        'Spark writes need the driver\'s filesystem): use format("lamina"), e.g. '
        'spark.read.format("lamina").option("table", ...) or df.write.format("lamina"), '
        "or a classic Spark session"
    )


def write_through_source(
    h: TableHandle,
    df: Any,
    mode: str,
    metadata: dict[str, Any],
    txn: tuple[str, int] | None,
    interval: Interval | str | tuple[Any, Any] | None = None,
) -> Commit:
    """Write a Spark Connect DataFrame with ``df.write.format("lamina")`` in one commit
    (``mode``: append, upsert or overwrite; ``interval``: what an overwrite replaces),
    exactly once under ``txn`` (default: a fresh app id, so the commit is found after).
    Returns the commit, marked ``already_applied`` when ``txn`` was applied already.
    Raises MetadataError (commit metadata: not carried by the data source), UpsertError,
    and what the data source raises (through Spark's error)."""
    if metadata:
        raise MetadataError(
            f"commit metadata {sorted(metadata)} cannot go with a Spark Connect DataFrame: "
            'it is written through format("lamina"), which takes none; write without '
            "metadata, or from a classic Spark session"
        )
    if mode == "upsert":
        from lamina.operations.upsert import require  # the write path: numpy, pyarrow

        require(h)  # UpsertError: not an upsert table
    if txn is not None:
        done = applied(h, txn)
        if done is not None:
            return skipped(h, txn, done)
    use = txn if txn is not None else (f"lamina-connect-{uuid.uuid4().hex}", 1)
    options = source_options(h.ctx, h.name)
    options.update(txnAppId=use[0], txnVersion=str(use[1]))
    if mode == "overwrite" and interval is not None:
        options["interval"] = str(aligned(h, interval))
    writer = df.write.format("lamina").options(**options)
    writer.mode("overwrite" if mode == "overwrite" else "append").save()
    commit = applied(h, use)
    if commit is None:  # the data source published nothing and said nothing
        raise CommitError(
            f"the write of a Spark Connect DataFrame into {h.name!r} published no commit "
            f"under txn {use}: check the Connect server's log"
        )
    return commit


#: per process: the catalog contexts foreach_batch functions reconnected with
_CONTEXTS: dict[tuple[str, str, float, float, float], CatalogContext] = {}
_CONTEXTS_LOCK = threading.Lock()


@dataclass(frozen=True)
class ForeachBatch:
    """A ``foreachBatch`` function writing each micro-batch exactly once
    (``txn=(app_id, batch_id)``). It holds plain values only, so it pickles (Spark
    Connect runs it on the server) and opens the catalog where it runs, once per
    process; a Spark Connect micro-batch goes through ``format("lamina")``."""

    catalog: str
    warehouse: str
    writer_wait_s: float
    heartbeat_s: float
    stale_after_s: float
    table: str
    app_id: str
    mode: str

    @classmethod
    def of(cls, h: TableHandle, app_id: str, mode: str) -> ForeachBatch:
        """The function for ``h`` (its process keeps ``h``'s catalog connection)."""
        ctx = h.ctx
        fn = cls(
            ctx.db.engine.url.render_as_string(hide_password=False),
            ctx.warehouse.location,
            ctx.writer_wait_s,
            ctx.heartbeat_s,
            ctx.stale_after_s,
            h.name,
            app_id,
            mode,
        )
        with _CONTEXTS_LOCK:
            _CONTEXTS.setdefault(fn.key, ctx)
        return fn

    @property
    def key(self) -> tuple[str, str, float, float, float]:
        return (
            self.catalog,
            self.warehouse,
            self.writer_wait_s,
            self.heartbeat_s,
            self.stale_after_s,
        )

    def context(self) -> CatalogContext:
        """This process's connection to the catalog (opened at the first batch)."""
        with _CONTEXTS_LOCK:
            ctx = _CONTEXTS.get(self.key)
            if ctx is None:
                wh = Warehouse(self.warehouse)
                db = Db(create_catalog_engine(self.catalog), wh.root)
                ctx = CatalogContext(
                    db,
                    wh,
                    writer_wait_s=self.writer_wait_s,
                    heartbeat_s=self.heartbeat_s,
                    stale_after_s=self.stale_after_s,
                )
                _CONTEXTS[self.key] = ctx
            return ctx

    def __call__(self, df: Any, batch_id: int) -> None:
        from lamina.engines.spark import streaming_query_id  # loads pyarrow
        from lamina.operations.kinds import kind_of  # the write path: pyarrow, numpy
        from lamina.operations.steps import QUERY_ID_KEY, same_stream

        version = whole_number(batch_id, "batch_id", TransactionError, most=2**63 - 1)
        txn = (self.app_id, version)
        ctx = self.context()
        h = TableHandle(ctx, table_rows.get_table(ctx.db, self.table))
        if is_spark_connect(df):
            write_through_source(h, df, self.mode, {}, txn)
            return
        query = streaming_query_id(df)
        meta = {} if query is None else {QUERY_ID_KEY: query}
        if query is not None:
            same_stream(h, self.app_id, query, version)
        if self.mode == "append":
            kind_of(h).append(h, df, meta, txn, 3)
        else:
            kind_of(h).overwrite(h, df, aligned(h, None), meta, txn, 3)
