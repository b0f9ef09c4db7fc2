"""Commands ``query``, ``retention``, ``orphans`` and ``serve``."""

from __future__ import annotations

import datetime as dt
import enum
import functools
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text

from lamina.cli import (
    CatalogOpt,
    OutputOpt,
    WarehouseOpt,
    as_of_tables,
    command,
    connect,
    load,
    not_found,
    resolved,
)
from lamina.cli.coerce import checked
from lamina.cli.output import (
    EXTENSIONS,
    Column,
    OutputFormat,
    QueryFormat,
    console,
    done,
    emit,
    emit_result,
    fetch_result,
    n_of,
    note,
    warn,
    write_result,
)
from lamina.core.interval import MAX_US, MIN_US, from_us, to_us
from lamina.errors import CatalogNotFoundError, InvalidIntervalError, SqlError

TablesOpt = Annotated[
    list[str] | None,
    typer.Option("--table", "-t", help="Only this table (repeatable). Default: all."),
]


@command("query")
def query(
    ctx: typer.Context,
    sql: Annotated[str, typer.Argument(help="DuckDB SQL over the tables ('-': read stdin).")],
    limit: Annotated[
        int | None,
        typer.Option(
            "--limit",
            "-n",
            min=0,
            help="Print at most N rows (0: all). Default: 50 for table, all otherwise.",
            show_default=False,
        ),
    ] = None,
    as_of: Annotated[
        list[str] | None,
        typer.Option(
            "--as-of",
            help="Read past snapshots: VERSION|TIME for every table, or TABLE=VERSION|TIME "
            "(repeatable). In the SQL, `t AT (VERSION => 3)` reads one reference so.",
            show_default=False,
        ),
    ] = None,
    fmt: Annotated[
        QueryFormat | None,
        typer.Option(
            "--format",
            "-f",
            help="table, csv, json, jsonl; with --output also parquet. Default: table, or "
            "--output's extension.",
            show_default=False,
        ),
    ] = None,
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            "-o",
            help="Write the whole result to this file (streamed: CSV and Parquet through "
            "Arrow's writers, JSON through DuckDB's).",
            show_default=False,
        ),
    ] = None,
    catalog: CatalogOpt = None,
    warehouse: WarehouseOpt = None,
) -> None:
    """Run SQL (DuckDB) over the latest snapshots of the tables it names (or past ones:
    --as-of, or `FROM t AT (VERSION => 3)` / `AT (TIMESTAMP => '2024-01-02')`)."""
    travel = as_of_tables(as_of)
    if output is not None:
        _export(ctx, sql, fmt, output, limit or 0, catalog, warehouse, travel)
        return
    if fmt is QueryFormat.parquet:
        raise typer.BadParameter(
            "parquet is written to a file: give --output", param_hint="--format"
        )
    shown = OutputFormat((fmt or QueryFormat.table).value)
    if sql == "-":
        sql = sys.stdin.read()
    with connect(ctx, catalog, warehouse) as cat:
        result = cat.sql_engine().run(sql, fetch_result, travel)  # plain rows: no pyarrow
    if limit is None:
        limit = 50 if shown is OutputFormat.table else 0
    emit_result(result, shown, limit)


def _export(
    ctx: typer.Context,
    sql: str,
    fmt: QueryFormat | None,
    output: str,
    limit: int,
    catalog: str | None,
    warehouse: str | None,
    travel: Any = None,
) -> None:
    """``query --output FILE``: the result written to the file, a line on stderr."""
    fmt = fmt or EXTENSIONS.get(Path(output).suffix.lower())
    if fmt is None:
        raise typer.BadParameter(
            f"cannot tell the format of {output!r} from its extension: give --format "
            "csv, json, jsonl or parquet",
            param_hint="--format",
        )
    if fmt is QueryFormat.table:
        raise typer.BadParameter("a file takes csv, json, jsonl or parquet", param_hint="--format")
    folder = Path(output).parent
    if not folder.is_dir():
        raise SqlError(f"cannot write {output}: there is no folder {folder}")
    if sql == "-":
        sql = sys.stdin.read()
    started = time.monotonic()
    with connect(ctx, catalog, warehouse) as cat:
        try:
            rows = cat.sql_engine().run(
                sql, functools.partial(write_result, fmt=fmt, path=output, limit=limit), travel
            )
        except (OSError, ValueError) as exc:
            raise SqlError(f"cannot write {output}: {exc}") from None
    note(f"wrote {n_of(rows, 'row')} to {output} ({fmt.value}, {time.monotonic() - started:.1f} s)",
         stderr=True)  # fmt: skip


def _parse_now(text: str) -> dt.datetime:
    us = to_us(text)  # InvalidIntervalError explains the format
    if not MIN_US < us < MAX_US:
        raise InvalidIntervalError(f"--now must be a point in time, not {text!r}")
    try:
        return from_us(us)
    except OverflowError:
        raise InvalidIntervalError(f"--now {text!r} is out of range") from None


@command("retention")
def retention(
    ctx: typer.Context,
    table: TablesOpt = None,
    now: Annotated[
        str | None,
        typer.Option(
            "--now",
            parser=checked(_parse_now),
            help="Act as if it were this time (ISO-8601, naive = UTC), e.g. to catch up.",
            show_default=False,
        ),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="List what would be deleted; delete nothing."),
    ] = False,
    catalog: CatalogOpt = None,
    warehouse: WarehouseOpt = None,
) -> None:
    """Delete what pushes, rollbacks, overwrites and deletes left behind, and orphan files
    (each after its retention period: table properties replaced_segments_retention,
    lineage_cleanup_retention, orphan_grace_period)."""
    at = _parse_now(now) if now is not None else None
    with connect(ctx, catalog, warehouse) as cat:
        names = list(dict.fromkeys(load(cat, n).name for n in table)) if table else None
        report = cat.run_retention(now=at, tables=names, dry_run=dry_run)
    if dry_run:
        _would_delete(report.segment_paths, report.orphan_paths, names)
        return
    done(
        f"retention on {n_of(len(names), 'table') if names else 'all tables'}: deleted "
        f"{n_of(report.segment_files, 'segment file')} and "
        f"{n_of(report.orphan_files, 'orphan file')}"
        + _drops(report.drop_folders_deleted, report.drop_folders_restored),
    )


def _would_delete(segment_files: list[str], orphans: list[str], names: list[str] | None) -> None:
    """A dry run's report: each file retention would delete, then the counts."""
    for kind, paths in (("segment", segment_files), ("orphan", orphans)):
        for rel in paths:
            console().print(Text.assemble((f"{kind:8}", "dim"), rel), soft_wrap=True)
    note(
        f"dry run on {n_of(len(names), 'table') if names else 'all tables'}: would delete "
        f"{n_of(len(segment_files), 'segment file')} and {n_of(len(orphans), 'orphan file')}; "
        "nothing was deleted"
    )


def _drops(deleted: int, restored: int) -> str:
    """The report's words for folders of unfinished drops (none when there were none)."""
    parts = [f"deleted {n_of(deleted, 'folder')} of finished drops"] if deleted else []
    if restored:
        parts.append(f"moved {n_of(restored, 'folder')} of unfinished drops back")
    return "; " + " and ".join(parts) if parts else ""


_ORPHANS = [Column("path", "")]


@command("orphans")
def orphans(
    ctx: typer.Context,
    table: TablesOpt = None,
    fmt: OutputOpt = OutputFormat.table,
    catalog: CatalogOpt = None,
    warehouse: WarehouseOpt = None,
) -> None:
    """List files in the tables' data folders that no catalog row names (relative to the
    warehouse root; one per line). `lamina retention` deletes those past the grace period."""
    with connect(ctx, catalog, warehouse) as cat:
        names = [load(cat, n).name for n in table] if table else None
        found = cat.find_orphans(tables=names)
    emit(_ORPHANS, [{"path": rel} for rel in found], fmt)
    if fmt is OutputFormat.table:
        note(n_of(len(found), "orphan file"), stderr=True)


_LOOPBACK = ("127.0.0.1", "::1", "localhost")


class LogLevel(enum.StrEnum):
    """uvicorn's log levels."""

    critical = "critical"
    error = "error"
    warning = "warning"
    info = "info"
    debug = "debug"
    trace = "trace"


@command("serve")
def serve(
    ctx: typer.Context,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", help="Port to listen on.", min=0, max=65535)
    ] = 8080,
    log_level: Annotated[
        LogLevel, typer.Option("--log-level", help="uvicorn log level.", case_sensitive=False)
    ] = LogLevel.info,
    open_reads: Annotated[
        bool,
        typer.Option(
            "--open-reads",
            help="With $LAMINA_API_TOKEN set, let anyone read (GET) without it; actions "
            "still need it. Also $LAMINA_OPEN_READS=1.",
        ),
    ] = False,
    catalog: CatalogOpt = None,
    warehouse: WarehouseOpt = None,
) -> None:
    """Serve the REST API (tables, segments, lineage; start/end/revertReplaceSegments)
    and the web console at / (docs/console.md).

    With $LAMINA_API_TOKEN set, every call needs `Authorization: Bearer <token>` (the
    console signs in with it), reads too unless --open-reads.
    OpenAPI at /openapi.json, docs at /docs (a page of its own: nothing from the
    internet), GET /health for probes. --port 0 picks a free port.
    """
    from lamina import (
        rest as server,  # loads fastapi, pydantic, sortedcontainers, sqlalchemy, starlette
    )

    if not os.environ.get(server.TOKEN_ENV) and host not in _LOOPBACK:
        warn(
            f"listening on {host} without ${server.TOKEN_ENV}: anyone who can "
            "reach it can replace and revert segments",
            label="warning",
        )
    where = resolved(ctx, catalog, warehouse)
    reads_open = server.reads_opened(open_reads or None)

    def listening(url: str) -> None:
        done(
            ("serving ", "bold"), f"{url}  (API docs {url}/docs, health {url}/health; Ctrl-C stops)"
        )
        if os.environ.get(server.TOKEN_ENV) and not reads_open:
            done(f"reads need the token too: the console signs in at {url}/console/login")

    try:
        server.serve(
            host, port, catalog=where.catalog.value, warehouse=where.warehouse.value,
            log_level=log_level.value, create=False, on_listen=listening,
            open_reads=reads_open,
        )  # fmt: skip
    except CatalogNotFoundError as exc:
        raise CatalogNotFoundError(not_found(exc, where)) from None
