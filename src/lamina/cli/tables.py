"""Commands ``init``, ``create-table``, ``tables``, ``add-columns`` and ``widen-column``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table as RichTable
from rich.text import Text

from lamina.cli import CatalogOpt, OutputOpt, WarehouseOpt, command, connect, load
from lamina.cli.output import Column, OutputFormat, console, count, emit, size, warn
from lamina.core.interval import Granularity
from lamina.engines.files import FileFormat
from lamina.errors import LaminaError

if TYPE_CHECKING:
    import lamina


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
    """Create the warehouse and the catalog (if needed) and show where they are."""
    with connect(ctx, catalog, warehouse) as cat:
        grid = RichTable.grid(padding=(0, 2))
        grid.add_row(Text("warehouse", style="bold"), Text(cat.warehouse.location))
        grid.add_row(Text("root", style="bold"), Text(cat.warehouse.root))
        grid.add_row(
            Text("catalog", style="bold"), Text(cat.engine.url.render_as_string(hide_password=True))
        )
        grid.add_row(Text("tables", style="bold"), Text(str(len(cat.list_tables()))))
        console().print(grid)


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
) -> None:
    """Create a table from a schema string or from a sample file."""
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
    with connect(ctx, catalog, warehouse) as cat:
        table = cat.create_table(
            name,
            arrow_schema,
            time_column,
            granularity,
            properties,
            primary_key=keys,
            comparison_column=comparison_column,
            delete_column=delete_column,
        )
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
