"""Commands ``init``, ``create-table``, ``tables``, ``add-columns`` and ``widen-column``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table as RichTable
from rich.text import Text

import lamina
from lamina.cli import (
    CatalogOpt,
    OutputOpt,
    TableArg,
    WarehouseOpt,
    command,
    config,
    connect,
    load,
    resolved,
)
from lamina.cli.output import (
    Column,
    OutputFormat,
    console,
    count,
    done,
    emit,
    n_of,
    note,
    size,
    warn,
)
from lamina.core.interval import Granularity
from lamina.engines.files import FileFormat
from lamina.errors import CatalogNotFoundError, LaminaError


def parse_properties(items: Sequence[str], hint: str = "--property") -> dict[str, str]:
    """``KEY=VALUE`` options -> a dict; a usage error (exit 2) for anything else."""
    props = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"{item!r} is not KEY=VALUE", param_hint=hint)
        props[key.strip()] = value.strip()
    return props


@command("init")
def init(ctx: typer.Context, catalog: CatalogOpt = None, warehouse: WarehouseOpt = None) -> None:
    """Create the warehouse and the catalog (if needed), remember them in ./.lamina.toml
    for the commands run in this folder and below it, and show where they are."""
    where = resolved(ctx, catalog, warehouse)
    with connect(ctx, catalog, warehouse, create=True) as cat:
        n_tables = len(cat.list_tables())
        url = cat.engine.url.render_as_string(hide_password=True)
        location, root = cat.warehouse.location, cat.warehouse.root
    # remember what a flag named, or where nothing was remembered yet
    flagged = any(s.source.startswith("--") for s in (where.catalog, where.warehouse))
    status = None
    target = where.config
    if flagged or where.config is None:
        target = Path.cwd() / config.CONFIG_NAME
        wh = config.recorded_warehouse(where.warehouse.value or location, Path.cwd())
        cat_url = None if where.catalog.value is None else config.absolute_sqlite(url)
        status = config.write_config(target, config.config_text(wh, cat_url))
    grid = RichTable.grid(padding=(0, 2))
    grid.add_row(Text("warehouse", style="bold"), Text(location))
    grid.add_row(Text("root", style="bold"), Text(root))
    grid.add_row(Text("catalog", style="bold"), Text(url))
    grid.add_row(Text("tables", style="bold"), Text(str(n_tables)))
    if target is not None:
        grid.add_row(Text("config", style="bold"), Text(f"{target} ({status or 'found'})"))
    console().print(grid)


@command("info")
def info(
    ctx: typer.Context,
    fmt: OutputOpt = OutputFormat.table,
    catalog: CatalogOpt = None,
    warehouse: WarehouseOpt = None,
) -> None:
    """Say which catalog and warehouse the commands here use, and where each setting
    comes from (an option, the environment, a .lamina.toml, the default)."""
    where = resolved(ctx, catalog, warehouse)
    url, location, root = where.catalog.value, where.warehouse.value or "./warehouse", None
    tables: int | None = None
    missing = None
    try:
        with connect(ctx, catalog, warehouse) as cat:
            url = cat.engine.url.render_as_string(hide_password=True)
            location, root = cat.warehouse.location, cat.warehouse.root
            tables = len(cat.list_tables())
    except CatalogNotFoundError as exc:
        missing = str(exc)
    cat_source = where.catalog.source
    if cat_source == "default":
        cat_source = "default: lamina.db in the warehouse"
    data = {
        "catalog": url,
        "catalog_source": cat_source,
        "warehouse": location,
        "warehouse_root": root,
        "warehouse_source": where.warehouse.source,
        "config": None if where.config is None else str(where.config),
        "exists": missing is None,
        "tables": tables,
        "version": lamina.__version__,
    }
    if fmt is OutputFormat.json:  # one object
        print(json.dumps(data, indent=2))
        return
    if fmt is not OutputFormat.table:
        emit([Column(k) for k in data], [data], fmt)
        return
    shown_wh = location if root is None or root == location else f"{location} ({root})"
    grid = RichTable.grid(padding=(0, 2))
    for name, value, source in (
        ("catalog", url or "lamina.db in the warehouse", cat_source),
        ("warehouse", shown_wh, where.warehouse.source),
        ("config", str(where.config or "none found"), None),
        ("tables", "-" if tables is None else count(tables), None),
        ("version", lamina.__version__, None),
    ):
        grid.add_row(
            Text(name, style="bold"), Text(value), Text(f"({source})" if source else "", "dim")
        )
    console().print(grid)
    if missing is not None:
        warn(missing, label="not created")


@command("create-table")
def create_table(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Table name (letters, digits, underscores).")],
    time_column: Annotated[
        str | None,
        typer.Option("--time-column", "-t", help="Timestamp or date column; omit for none."),
    ] = None,
    granularity: Annotated[
        Granularity | None,
        typer.Option("--granularity", "-g", case_sensitive=False, help="Chunk size. Default: DAY."),
    ] = None,
    schema: Annotated[
        str | None,
        typer.Option(
            "--schema", "-s", help='Columns, e.g. "ts:timestamp\\[us, tz=UTC],k:int64,v:float64".'
        ),
    ] = None,
    like: Annotated[
        str | None,
        typer.Option("--like", help="Take the schema of a Parquet, CSV or JSON-lines file."),
    ] = None,
    fmt: Annotated[
        FileFormat | None,
        typer.Option("--format", "-f", help="Format of the --like file. Default: extension."),
    ] = None,
    prop: Annotated[
        list[str] | None,
        typer.Option("--property", "-p", help="Table property KEY=VALUE (repeatable)."),
    ] = None,
    primary_key: Annotated[
        str | None,
        typer.Option(
            "--primary-key",
            "-k",
            help="Upsert table: key column(s), comma-separated; only the latest record "
            "per key shows.",
        ),
    ] = None,
    comparison_column: Annotated[
        str | None,
        typer.Option(
            "--comparison-column", help="With --primary-key: the greatest wins (default: time)."
        ),
    ] = None,
    delete_column: Annotated[
        str | None,
        typer.Option("--delete-column", help="With --primary-key: boolean, true = delete."),
    ] = None,
    catalog: CatalogOpt = None,
    warehouse: WarehouseOpt = None,
    time_unit: Annotated[
        str | None,
        typer.Option("--time-unit", help="The time column holds epoch numbers: s, ms, us or ns."),
    ] = None,
    exist_ok: Annotated[
        bool,
        typer.Option("--exist-ok", help="An existing table of this definition is fine (a rerun)."),
    ] = False,
) -> None:
    """Create a table from a schema string (also Spark's DDL: "ts timestamp, v long") or
    from a sample file."""
    from lamina.core.schema_text import parse_schema  # loads numpy, pyarrow
    from lamina.engines.local import infer_schema  # loads numpy, pyarrow

    if (schema is None) == (like is None):
        raise typer.BadParameter("give exactly one of --schema and --like", param_hint="--schema")
    if primary_key is None and (comparison_column or delete_column):
        raise typer.BadParameter(
            "--comparison-column and --delete-column define an upsert table: give "
            "--primary-key too",
            param_hint="--primary-key",
        )
    properties = parse_properties(prop or [])
    arrow_schema = parse_schema(schema) if schema is not None else infer_schema(str(like), fmt)
    keys = None
    if primary_key is not None:  # key columns hold no nulls
        import pyarrow as pa

        keys = [k.strip() for k in primary_key.split(",") if k.strip()]
        arrow_schema = pa.schema(
            [f.with_nullable(False) if f.name in keys else f for f in arrow_schema]
        )
    with connect(ctx, catalog, warehouse, create=True) as cat:
        existed = exist_ok and name in cat.list_tables()
        table = cat.create_table(
            name,
            arrow_schema,
            time_column,
            granularity,
            properties,
            primary_key=keys,
            comparison_column=comparison_column,
            delete_column=delete_column,
            time_unit=time_unit,
            exist_ok=exist_ok,
        )
        if existed:
            console().print(Text(f"table {name} exists with this definition", "dim"))
            return
        print_table_created(table)


def print_table_created(table: lamina.Table) -> None:
    """``created table NAME (...)`` and its columns."""
    con = console()
    what = (
        f"time column {table.time_column}, {table.granularity.value} chunks"
        if table.time_column
        else "no time column"
    )
    con.print(Text.assemble(("created table ", "green"), (table.name, "bold green"), f" ({what})"))
    cols = RichTable(box=None, padding=(0, 2), show_header=True, header_style="dim")
    cols.add_column("column")
    cols.add_column("type")
    cols.add_column("")
    for f in table.schema:
        time = "time" if f.name == table.time_column else ""
        cols.add_row(Text(f.name), Text(str(f.type)), Text(time))
    con.print(cols)
    if table.properties:
        con.print(Text("properties: " + ", ".join(f"{k}={v}" for k, v in table.properties.items())))


_TABLES = [
    Column("table"),
    Column("time_column", "time column", show=lambda v: v or "-"),
    Column("granularity"),
    Column("segments", show=count, right=True),
    Column("rows", show=lambda n: "?" if n is None else count(n), right=True),
    Column("size_bytes", "size", show=size, right=True),
]


@command("tables")
def tables(
    ctx: typer.Context,
    fmt: OutputOpt = OutputFormat.table,
    catalog: CatalogOpt = None,
    warehouse: WarehouseOpt = None,
) -> None:
    """List tables with their visible segments, rows and bytes."""
    with connect(ctx, catalog, warehouse) as cat:
        rows = []
        for name in cat.list_tables():
            t = load(cat, name)
            segs = t.segments()
            try:
                shown: int | None = t.count()
            except LaminaError as exc:  # a lost file, say: the other tables still list
                shown = None
                warn(f"{name}: rows not counted: {exc}")
            rows.append(
                {
                    "table": name,
                    "time_column": t.time_column,
                    "granularity": t.granularity.value,
                    "segments": len(segs),
                    # what readers see: less the rows of segments shown in part and
                    # those deletion vectors hide
                    "rows": shown,
                    "size_bytes": sum(s.size_bytes for s in segs),
                }
            )
    emit(_TABLES, rows, fmt, empty="no tables yet; create one with `lamina create-table`")


@command("add-columns")
def add_columns(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Table name.")],
    schema: Annotated[
        str,
        typer.Option("--schema", "-s", help='The new columns, e.g. "c:float64,note:string".'),
    ],
    catalog: CatalogOpt = None,
    warehouse: WarehouseOpt = None,
) -> None:
    """Add nullable columns to a table (one commit; rows written before read nulls)."""
    from lamina.core.schema_text import parse_schema  # loads numpy, pyarrow

    fields = parse_schema(schema)
    with connect(ctx, catalog, warehouse) as cat:
        table = load(cat, name)
        commit = table.add_columns(fields)
        added = ", ".join(f"{f.name} ({f.type})" for f in fields)
        console().print(
            Text.assemble(
                ("added ", "green"),
                added,
                " to ",
                (table.name, "bold"),
                f" (version {commit.version})",
            )
        )


@command("widen-column")
def widen_column(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Table name.")],
    column: Annotated[str, typer.Argument(help="The column to widen.")],
    type_: Annotated[str, typer.Argument(metavar="TYPE", help="Its wider type, e.g. int64.")],
    catalog: CatalogOpt = None,
    warehouse: WarehouseOpt = None,
) -> None:
    """Widen a column's type (int32 to int64, float32 to float64, a decimal to more
    digits; one commit, no file rewritten)."""
    from lamina.core.schema_text import parse_type  # loads numpy, pyarrow

    new = parse_type(type_)
    with connect(ctx, catalog, warehouse) as cat:
        table = load(cat, name)
        old = table.schema.field(column).type if column in table.schema.names else None
        commit = table.widen_column(column, new)
        console().print(
            Text.assemble(
                ("widened ", "green"), f"{column} ({old} -> {new}) of ", (table.name, "bold"),
                f" (version {commit.version})",
            )
        )  # fmt: skip


# -- a table's definition: describe, drop, properties -----------------------------------------


def _counts(t: lamina.Table) -> dict[str, Any]:
    """What readers see of the table: visible segments, their bytes, rows, commits."""
    segs = t.segments()
    try:
        rows: int | None = t.count()
    except LaminaError as exc:  # a lost file, say: the definition still shows
        rows = None
        warn(f"{t.name}: rows not counted: {exc}")
    history = t.history()
    done_ = [c for c in history if c.state == "COMPLETED"]
    return {
        "rows": rows,
        "segments": len(segs),
        "size_bytes": sum(s.size_bytes for s in segs),
        "commits": len(done_),
        "last_commit": done_[-1].id if done_ else None,
    }


@command("describe")
def describe(
    ctx: typer.Context,
    name: TableArg,
    fmt: OutputOpt = OutputFormat.table,
    catalog: CatalogOpt = None,
    warehouse: WarehouseOpt = None,
) -> None:
    """Show a table's definition (schema, time column, granularity, primary key,
    properties) and what readers see of it (rows, segments, bytes, commits)."""
    with connect(ctx, catalog, warehouse) as cat:
        t = load(cat, name)
        counts = _counts(t)
        key = t.primary_key
        columns = [
            {
                "name": f.name,
                "type": str(f.type),
                "nullable": f.nullable,
                "role": "time"
                if f.name == t.time_column
                else "key"
                if key and f.name in key
                else "",
            }
            for f in t.schema
        ]
        data = {
            "table": t.name,
            "time_column": t.time_column,
            "granularity": t.granularity.value,
            "primary_key": list(key) if key else None,
            "columns": columns,
            "properties": dict(sorted(t.properties.items())),
            **counts,
        }
    if fmt is OutputFormat.json:  # one object
        print(json.dumps(data, indent=2))
        return
    if fmt is not OutputFormat.table:  # one row per column, the table's facts repeated
        facts = {k: v for k, v in data.items() if k not in ("columns", "properties")}
        facts["primary_key"] = ",".join(key) if key else None
        facts["properties"] = json.dumps(data["properties"])
        keys = [*facts, "column", "type", "nullable", "role"]
        rows = [
            {**facts, "column": c["name"], "type": c["type"], "nullable": c["nullable"],
             "role": c["role"]}
            for c in columns
        ]  # fmt: skip
        emit([Column(k) for k in keys], rows, fmt)
        return
    con = console()
    grid = RichTable.grid(padding=(0, 2))
    shown_rows = "?" if counts["rows"] is None else count(counts["rows"])
    for label, value in (
        ("table", t.name),
        ("time column", t.time_column or "- (one ALL chunk)"),
        ("granularity", t.granularity.value),
        ("primary key", ", ".join(key) if key else "- (not an upsert table)"),
        ("rows", shown_rows),
        ("segments", f"{count(counts['segments'])} visible, {size(counts['size_bytes'])}"),
        ("commits", f"{count(counts['commits'])}"
         + (f" (latest: {counts['last_commit']})" if counts["last_commit"] else "")),
    ):  # fmt: skip
        grid.add_row(Text(label, style="bold"), Text(value))
    con.print(grid)
    cols = RichTable(box=None, padding=(0, 2), header_style="bold")
    for h in ("column", "type", "nullable", ""):
        cols.add_column(h)
    for c in columns:
        cols.add_row(
            Text(c["name"]), Text(c["type"]), Text("yes" if c["nullable"] else "no"), c["role"]
        )
    con.print(cols)
    props = data["properties"]
    con.print(Text("properties: " + (", ".join(f"{k}={v}" for k, v in props.items()) or "none")))


@command("drop-table")
def drop_table(
    ctx: typer.Context,
    name: TableArg,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    catalog: CatalogOpt = None,
    warehouse: WarehouseOpt = None,
) -> None:
    """Drop a table: its catalog rows, history and files (asks first, unless --yes)."""
    with connect(ctx, catalog, warehouse) as cat:
        t = load(cat, name)
        counts = _counts(t)
        what = (
            f"table {t.name} ({n_of(counts['segments'], 'segment')}, "
            f"{'?' if counts['rows'] is None else n_of(counts['rows'], 'row')}, "
            f"{size(counts['size_bytes'])}, {n_of(counts['commits'], 'commit')})"
        )
        if not yes and not typer.confirm(f"drop {what} and delete its files?", default=False):
            warn("nothing dropped")
            raise typer.Exit(1)
        cat.drop_table(t.name)
    done(("dropped ", "bold"), what)


def _changed(t: lamina.Table, before: dict[str, str], verb: str) -> None:
    after = t.properties
    changed = sorted(k for k in {*before, *after} if before.get(k) != after.get(k))
    if not changed:
        note(f"no property of {t.name} changed")
        return
    shown = ", ".join(f"{k}={after[k]}" if k in after else f"{k} (unset)" for k in changed)
    done((f"{verb} ", "bold"), f"on {t.name}: {shown}")


@command("set-properties")
def set_properties(
    ctx: typer.Context,
    name: TableArg,
    props: Annotated[list[str], typer.Argument(metavar="KEY=VALUE...", help="Properties.")],
    catalog: CatalogOpt = None,
    warehouse: WarehouseOpt = None,
) -> None:
    """Set table properties (checked as create-table checks them; all or none change)."""
    values = parse_properties(props, hint="KEY=VALUE")
    with connect(ctx, catalog, warehouse) as cat:
        t = load(cat, name)
        before = t.properties
        t.set_properties(**values)
        _changed(t, before, "set")


@command("unset-properties")
def unset_properties(
    ctx: typer.Context,
    name: TableArg,
    keys: Annotated[list[str], typer.Argument(metavar="KEY...", help="Property names.")],
    catalog: CatalogOpt = None,
    warehouse: WarehouseOpt = None,
) -> None:
    """Remove table properties (lamina's own return to their defaults; a name the table
    does not have is ignored)."""
    with connect(ctx, catalog, warehouse) as cat:
        t = load(cat, name)
        before = t.properties
        t.unset_properties(*keys)
        _changed(t, before, "unset")
