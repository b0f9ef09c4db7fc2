"""Commands that write: ``ingest``, ``push`` (local engine or Spark, with progress) and
``revert``."""

from __future__ import annotations

import datetime as dt
import enum
import itertools
import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.text import Text

from lamina.cli import CatalogOpt, TableArg, WarehouseOpt, command, connect, load
from lamina.cli.coerce import app_version, app_version_text, interval_text, size_text
from lamina.cli.output import console, done, error_line, n_of, warn
from lamina.cli.tables import parse_properties, print_table_created
from lamina.core.interval import Granularity, Interval
from lamina.core.lineage import LineageState
from lamina.engines.files import FileFormat, check_inputs, format_of, input_bytes, parse_size
from lamina.errors import (
    CommitError,
    LaminaError,
    LineageEntryNotFoundError,
    LineageError,
    TableNotFoundError,
    UpsertError,
)

if TYPE_CHECKING:
    import lamina
    from lamina.core.lineage import LineageEntry


class WriteMode(enum.StrEnum):
    append = "append"
    overwrite = "overwrite"


class Engine(enum.StrEnum):
    auto = "auto"
    local = "local"
    spark = "spark"


LOCAL_MAX_ENV = "LAMINA_LOCAL_MAX_BYTES"
DEFAULT_LOCAL_MAX = "2GB"

FilesArg = Annotated[
    list[str], typer.Argument(help="Input files or folders (local paths or URIs).")
]
FormatOpt = Annotated[
    FileFormat | None,
    typer.Option("--format", "-f", help="Input format. Default: from the extension."),
]
EngineOpt = Annotated[
    Engine,
    typer.Option(
        "--engine",
        "-e",
        help="local (pyarrow), spark, or auto: local below --local-max-bytes of input.",
    ),
]
LocalMaxOpt = Annotated[
    str | None,
    typer.Option(
        "--local-max-bytes",
        parser=size_text,
        help=f"Largest input (e.g. 500MB) auto reads locally. Default: ${LOCAL_MAX_ENV}, "
        f"else {DEFAULT_LOCAL_MAX}.",
        show_default=False,
    ),
]
VerboseOpt = Annotated[
    bool, typer.Option("--verbose", "-v", help="Show Spark's log lines on stderr.")
]


def choose_engine(engine: Engine, paths: Sequence[str], local_max: str | None) -> Engine:
    """The engine to run: ``auto`` reads locally when the inputs' total size is known
    and at most ``local_max`` (else ``$LAMINA_LOCAL_MAX_BYTES``, else 2 GB).

    Raises :class:`InputFileError` for a size it cannot read.
    """
    if engine is not Engine.auto:
        return engine
    source = "--local-max-bytes" if local_max else f"${LOCAL_MAX_ENV}"
    limit = parse_size(local_max or os.environ.get(LOCAL_MAX_ENV) or DEFAULT_LOCAL_MAX, source)
    total = input_bytes(paths)
    return Engine.local if total is not None and total <= limit else Engine.spark


def _start_spark(verbose: bool) -> Any:
    """The shared Spark session, started behind a spinner, its logs quiet unless verbose."""

    from lamina.engines.spark_io import quiet_session  # loads numpy, pyarrow

    def spinner(stream: Any) -> Any:
        con = Console(file=stream, highlight=False)
        return con.status("starting Spark", spinner="dots")

    return quiet_session(verbose=verbose, spinner=spinner)


def _input_meta(via: str, fmt: FileFormat, paths: list[str], engine: Engine) -> dict[str, Any]:
    """Commit metadata recording where the rows came from."""
    return {
        "via": via,
        "engine": engine.value,
        "format": fmt.value,
        "inputs": paths[:20],
        "input_count": len(paths),
    }


def _write(
    engine: Engine,
    verbose: bool,
    fmt: FileFormat,
    paths: list[str],
    schema: Any,
    phase: str,
    write: Any,
) -> int:
    """Read the inputs with ``engine`` and hand the data to ``write(data, schema)``
    (``schema``: the table's, or None to infer). Returns the Spark tasks run (0 locally)."""
    from lamina.cli.progress import LocalProgress, SparkProgress  # loads rich

    err = console(stderr=True)
    if engine is Engine.local:
        from lamina.engines.local import read_batches  # loads numpy, pyarrow

        with LocalProgress(err, input_bytes(paths)) as progress:
            reader = read_batches(fmt, paths, schema, on_progress=progress.update)
            progress.phase(phase)
            write(reader, reader.schema)
        return 0
    from lamina.engines.spark_io import read_spark_files, spark_errors  # loads numpy, pyarrow

    spark = _start_spark(verbose)
    with SparkProgress(spark, err) as sp, spark_errors():
        sp.phase("reading")
        df = read_spark_files(spark, fmt, paths, schema)
        sp.phase(phase)
        write(df, None)
    return sp.tasks


@command("upsert")
def upsert(
    ctx: typer.Context,
    name: TableArg,
    files: FilesArg,
    fmt: FormatOpt = None,
    engine: EngineOpt = Engine.auto,
    local_max: LocalMaxOpt = None,
    verbose: VerboseOpt = False,
    catalog: CatalogOpt = None,
    warehouse: WarehouseOpt = None,
) -> None:
    """Upsert records from CSV, JSON-lines or Parquet files into a table with a primary
    key, in one commit: per key only the latest record shows."""

    with connect(ctx, catalog, warehouse) as cat:
        if load(cat, name).primary_key is None:
            raise UpsertError(
                f"table {name!r} has no primary key: create it with `lamina create-table "
                "--primary-key COLUMN`, or append with `lamina ingest`"
            )
    ctx.meta["via"] = "lamina upsert"  # what the commit metadata records
    ingest(
        ctx,
        name,
        files,
        fmt=fmt,
        engine=engine,
        local_max=local_max,
        verbose=verbose,
        catalog=catalog,
        warehouse=warehouse,
    )


@command("ingest")
def ingest(
    ctx: typer.Context,
    name: TableArg,
    files: FilesArg,
    fmt: FormatOpt = None,
    mode: Annotated[WriteMode, typer.Option("--mode", "-m", help="How to write.")] = (
        WriteMode.append
    ),
    interval: Annotated[
        str | None,
        typer.Option(
            "--interval",
            "-i",
            parser=interval_text,
            help="Overwrite exactly START/END (aligned to chunks); default: the chunks "
            "the data touches.",
        ),
    ] = None,
    create: Annotated[
        bool, typer.Option("--create", help="Create the table from the data if missing.")
    ] = False,
    time_column: Annotated[
        str | None, typer.Option("--time-column", "-t", help="With --create: time column.")
    ] = None,
    granularity: Annotated[
        Granularity | None,
        typer.Option(
            "--granularity", "-g", case_sensitive=False, help="With --create: chunk size."
        ),
    ] = None,
    prop: Annotated[
        list[str] | None,
        typer.Option("--property", "-p", help="With --create: table property KEY=VALUE."),
    ] = None,
    engine: EngineOpt = Engine.auto,
    local_max: LocalMaxOpt = None,
    verbose: VerboseOpt = False,
    txn: Annotated[
        str | None,
        typer.Option(
            "--txn",
            metavar="APP:VERSION",
            parser=app_version_text,
            help="Exactly once: skip the write if application APP already wrote VERSION "
            "or a later one on this table (e.g. a retried cron job: --txn nightly:20240601).",
            show_default=False,
        ),
    ] = None,
    catalog: CatalogOpt = None,
    warehouse: WarehouseOpt = None,
    evolve: Annotated[
        bool,
        typer.Option(
            "--evolve",
            help="Add the inputs' columns the table lacks (nullable) in the same commit.",
        ),
    ] = False,
) -> None:
    """Load CSV, JSON-lines or Parquet files into a table, in one commit.

    Small inputs are read locally with pyarrow; large ones (or --engine spark) with Spark.
    An input without rows commits nothing (and creates no table), except an overwrite
    of an explicit --interval, which empties it.
    """
    if interval is not None and mode is not WriteMode.overwrite:
        raise typer.BadParameter("only applies with --mode overwrite", param_hint="--interval")
    if not create and (time_column or granularity or prop):
        raise typer.BadParameter(
            "--time-column, --granularity and --property only apply with --create",
            param_hint="--create",
        )
    properties = parse_properties(prop or [])
    paths = check_inputs(files)
    fmt = fmt or format_of(paths)
    use = choose_engine(engine, paths, local_max)
    started = time.monotonic()
    since = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
    with connect(ctx, catalog, warehouse, create=create) as cat:
        table: lamina.Table | None
        try:
            table = cat.load_table(name)
            if create:
                _note_existing(table, time_column, granularity, properties)
        except TableNotFoundError:
            if not create:
                raise TableNotFoundError(
                    f"no table named {name!r}; create it with `lamina create-table` or pass "
                    "--create --time-column COLUMN"
                ) from None
            table = None
        created = False
        commits: list[lamina.Commit] = []
        exactly_once = None if txn is None else app_version(txn)

        def write(data: Any, schema: Any) -> None:
            nonlocal table, created
            empties = mode is WriteMode.overwrite and interval is not None
            data = data if empties else with_rows(data)
            if data is None:
                return  # no rows: no commit, no table
            if table is None:  # timestamps as lamina infers them: µs, UTC
                from lamina.engines.spark_schema import inferred_spark_or_arrow

                table = cat.create_table(
                    name, inferred_spark_or_arrow(schema if schema is not None else data.schema),
                    time_column, granularity, properties,
                )  # fmt: skip
                created = True
                _warn_untimed(table)
            if mode is WriteMode.append:
                commits.append(table.append(data, metadata=meta, txn=exactly_once, evolve=evolve))
            else:
                commits.append(
                    table.overwrite(
                        data, interval=interval, metadata=meta, txn=exactly_once, evolve=evolve
                    )
                )

        meta = _input_meta(ctx.meta.get("via", "lamina ingest"), fmt, paths, use)
        try:
            tasks = _write(
                use, verbose, fmt, paths, None if table is None else table.schema, "writing", write
            )
        except BaseException as exc:
            published = table is not None and any(c.state == "COMPLETED" for c in table.history())
            if created and not published:
                cat.drop_table(name)  # nothing published: no table made either
            if isinstance(exc, KeyboardInterrupt):
                _interrupted(table if published else None, meta, since)
            raise
        if not commits:
            made = "" if table is not None else f"; table {name} not created"
            warn(f"no rows in {', '.join(paths)}: nothing ingested (no commit{made})")
            return
        assert table is not None
        commit = commits[0]
        if commit.already_applied and exactly_once is not None:
            app, version = exactly_once
            done(
                ("skipped", "bold"),
                f": {app} already wrote version {version} or a later one on {table.name} "
                f"(table version {commit.version}); nothing written",
            )
            return
        _print_commit(table, commit, created, time.monotonic() - started, use, tasks)


def with_rows(data: Any) -> Any:
    """``data`` (an Arrow record batch reader, or a Spark DataFrame), or None if it has
    no rows. A reader's batches are read up to the first with rows."""
    if hasattr(data, "isEmpty"):  # a Spark DataFrame: one small job
        return None if data.isEmpty() else data
    import pyarrow as pa  # loads numpy, pyarrow

    batches = iter(data)
    for batch in batches:
        if batch.num_rows:
            return pa.RecordBatchReader.from_batches(data.schema, itertools.chain([batch], batches))
    return None


def _warn_untimed(table: lamina.Table) -> None:
    """A table created without a time column although the data has a time: say so."""
    import pyarrow as pa  # loads numpy, pyarrow

    if table.time_column is not None:
        return
    timed = [
        f.name for f in table.schema if pa.types.is_timestamp(f.type) or pa.types.is_date(f.type)
    ]
    if timed:
        warn(
            f"column {timed[0]} holds times, but no --time-column was given: {table.name} "
            "has one ALL chunk (no time partitioning, no --interval overwrites). To "
            f"partition by time: `lamina drop-table {table.name} --yes`, then ingest again "
            f"with --create --time-column {timed[0]}",
            label="warning",
        )


def _interrupted(table: lamina.Table | None, meta: dict[str, Any], since: dt.datetime) -> NoReturn:
    """Ctrl-C during a write: say whether its commit was published; exit 130."""
    mine = [
        c
        for c in (table.history() if table is not None else [])
        if c.state == "COMPLETED"
        and c.started_at >= since
        and {k: c.metadata.get(k) for k in meta} == meta
    ]
    if mine and table is not None:
        error_line(f"interrupted after commit {mine[-1].id} was published on {table.name}")
    else:
        error_line(
            "interrupted: nothing was published (readers see the table as it was; the "
            "files written so far are removed)"
        )
    raise typer.Exit(130)


def _note_existing(
    table: lamina.Table,
    time_column: str | None,
    granularity: Granularity | None,
    properties: dict[str, str],
) -> None:
    """--create on an existing table writes into it as it is; say so if that differs."""
    differs = (
        (time_column is not None and time_column != table.time_column)
        or (granularity is not None and granularity is not table.granularity)
        or any(table.properties.get(k) != v for k, v in properties.items())
    )
    if differs:
        warn(
            f"table {table.name} exists (time column {table.time_column}, "
            f"{table.granularity.value} chunks); --create options are not applied to it"
        )


def _print_commit(
    table: lamina.Table,
    commit: lamina.Commit,
    created: bool,
    elapsed: float,
    engine: Engine,
    tasks: int,
) -> None:
    segs = [s for s in table.segments(all=True, as_of=commit) if s.commit_id == commit.id]
    data = [s for s in segs if s.location is not None]
    tombstones = len(segs) - len(data)
    removed = len(commit.removed)
    if created:  # what was inferred: the schema, the time column and chunks
        print_table_created(table)
    parts = [n_of(sum(s.row_count for s in data), "row"), n_of(len(data), "segment") + " added"]
    if removed:
        parts.append(f"{removed:,} replaced")
    if tombstones:
        parts.append(n_of(tombstones, "chunk") + " emptied")
    how = n_of(tasks, "Spark task") if engine is Engine.spark else "local engine"
    done(
        (f"version {commit.version}", "bold"),
        (f" ({commit.action.lower()}) on {table.name}: " + ", ".join(parts), ""),
        (f" · {elapsed:.1f} s, {how}", "dim"),
    )


# -- segment lineage: push, revert -----------------------------------------------------------


def _find_entry(t: lamina.Table, entry_id: str) -> LineageEntry:
    for e in t.lineage():
        if e.id == entry_id:
            return e
    raise LineageEntryNotFoundError(
        f"no lineage entry {entry_id!r} in table {t.name}; `lamina lineage {t.name}` lists them"
    )


@command("revert")
def revert(
    ctx: typer.Context,
    name: TableArg,
    entry_id: Annotated[str, typer.Argument(help="Lineage entry id (`lamina lineage TABLE`).")],
    force: Annotated[
        bool,
        typer.Option("--force", help="Also revert an entry still IN_PROGRESS (a running push)."),
    ] = False,
    catalog: CatalogOpt = None,
    warehouse: WarehouseOpt = None,
) -> None:
    """Roll back a push: readers see the segments its lineage entry replaced again."""

    with connect(ctx, catalog, warehouse) as cat:
        t = load(cat, name)
        entry = _find_entry(t, entry_id)
        if entry.state == LineageState.REVERTED:
            console().print(
                Text(f"lineage entry {entry_id} on {t.name} is already reverted", "dim")
            )
            return
        if entry.state == LineageState.IN_PROGRESS and not force:
            raise LineageError(
                f"lineage entry {entry_id} is still IN_PROGRESS (a push may still be running); "
                "pass --force to revert it anyway"
            )
        t.revert_replace(entry_id, force=force)
    what = (
        f"{n_of(len(entry.segments_from), 'segment')} visible again, "
        f"{n_of(len(entry.segments_to), 'segment')} hidden"
        if entry.state == LineageState.COMPLETED
        else f"its {n_of(len(entry.segments_to), 'segment')} will never be visible"
    )
    done(
        ("reverted ", "bold"),
        (f"lineage entry {entry_id} on {t.name} (was {entry.state.lower()}): {what}", ""),
    )


@command("push")
def push(
    ctx: typer.Context,
    name: TableArg,
    files: FilesArg,
    fmt: FormatOpt = None,
    interval: Annotated[
        str | None,
        typer.Option(
            "--interval",
            "-i",
            parser=interval_text,
            help="Replace only START/END (aligned to chunks); default: all the table's data.",
        ),
    ] = None,
    engine: EngineOpt = Engine.auto,
    local_max: LocalMaxOpt = None,
    verbose: VerboseOpt = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="Push to a table whose pushes cannot be reverted (no lineage)."
        ),
    ] = False,
    catalog: CatalogOpt = None,
    warehouse: WarehouseOpt = None,
) -> None:
    """Replace a table's data with files in one consistent, revertible push.

    Readers see the old data until the push completes, then only the new. On a table
    with consistent_push=true the push is a lineage entry that `lamina revert` rolls back;
    on any other table (upsert tables too) it cannot be undone: pass --force.
    """
    window = Interval.parse(interval) if interval is not None else None
    paths = check_inputs(files)
    fmt = fmt or format_of(paths)
    use = choose_engine(engine, paths, local_max)
    started = time.monotonic()
    since = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
    with connect(ctx, catalog, warehouse) as cat:
        t = load(cat, name)
        if window is not None:
            t.granularity.check_aligned(window)
        if not t.consistent_push and not force:
            why = (
                "is an upsert table (no lineage: a rollback would revive records later "
                "upserts replaced)"
                if t.primary_key is not None
                else f"has consistent_push=false (`lamina set-properties {t.name} "
                "consistent_push=true` makes later pushes revertible)"
            )
            raise LineageError(
                f"table {t.name} {why}: this push would replace its data in one atomic "
                "commit that cannot be reverted; pass --force to push anyway"
            )
        meta = _input_meta("lamina push", fmt, paths, use)
        commits: list[lamina.Commit] = []
        try:
            tasks = _write(
                use,
                verbose,
                fmt,
                paths,
                t.schema,
                "pushing",
                lambda data, _schema: commits.append(
                    t.refresh(data, interval=window, metadata=meta)
                ),
            )
        except LaminaError as exc:
            raise CommitError(
                f"push failed, nothing was published (readers still see the previous data): {exc}"
            ) from None
        except KeyboardInterrupt:
            _interrupted(t, meta, since)
        commit = commits[0]
        _print_commit(t, commit, False, time.monotonic() - started, use, tasks)
        eid = commit.metadata.get("lineage_entry") if t.consistent_push else None
        entry = next((e for e in t.lineage() if e.id == eid), None) if eid else None
        if entry is not None:
            console().print(
                Text.assemble(
                    "  lineage entry ",
                    (entry.id, "bold"),
                    f" ({entry.state.lower()}): replaced "
                    f"{n_of(len(entry.segments_from), 'segment')}; undo with ",
                    (f"lamina revert {t.name} {entry.id}", "bold"),
                )
            )
