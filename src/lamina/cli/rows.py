"""Commands ``delete`` and ``update``: row-level changes by a SQL predicate
(``t.delete``, ``t.update``; docs/rowlevel.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from lamina.cli import CatalogOpt, TableArg, WarehouseOpt, command, connect, load
from lamina.cli.output import done, n_of, note
from lamina.errors import RowLevelError

if TYPE_CHECKING:
    from lamina.core.model import Commit

WhereOpt = Annotated[
    str,
    typer.Option(
        "--where",
        "-w",
        help='SQL predicate over the table\'s columns (DuckDB), e.g. "amount < 0"; '
        "TRUE for every row.",
    ),
]


def _report(table: str, commit: Commit | None, what: str) -> None:
    if commit is None:
        note(f"no row of {table} matched: nothing committed")
        return
    change = commit.metadata.get("row_change", {})
    n = int(change.get(what, 0))
    done(
        (f"commit {commit.id}", "bold"),
        (f" ({commit.action.lower()}) on {table}: {n_of(n, 'row')} {what}", ""),
    )


@command("delete")
def delete(
    ctx: typer.Context,
    table: TableArg,
    where: WhereOpt,
    catalog: CatalogOpt = None,
    warehouse: WarehouseOpt = None,
) -> None:
    """Delete the rows a predicate matches, in one commit."""
    with connect(ctx, catalog, warehouse) as cat:
        t = load(cat, table)
        _report(table, t.delete(where), "deleted")


def parse_set(items: list[str]) -> dict[str, str]:
    """``["col = expr", ...]`` as {column: SQL expression}. Raises RowLevelError."""
    out: dict[str, str] = {}
    for item in items:
        col, eq, expr = item.partition("=")
        col = col.strip().strip('"')
        if not eq or not col or not expr.strip():
            raise RowLevelError(
                f"--set {item!r}: write COLUMN = SQL expression, e.g. --set 'amount = amount * 2'"
            )
        if col in out:
            raise RowLevelError(f"--set names column {col!r} twice")
        out[col] = expr.strip()
    return out


@command("update")
def update(
    ctx: typer.Context,
    table: TableArg,
    set_: Annotated[
        list[str],
        typer.Option(
            "--set",
            "-s",
            help="COLUMN = SQL expression of the row's values (repeatable), e.g. "
            "'amount = amount * 2'.",
        ),
    ],
    where: WhereOpt,
    catalog: CatalogOpt = None,
    warehouse: WarehouseOpt = None,
) -> None:
    """Set columns of the rows a predicate matches, in one commit."""
    try:
        values = parse_set(set_)
    except RowLevelError as exc:
        raise typer.BadParameter(str(exc), param_hint="--set") from None
    with connect(ctx, catalog, warehouse) as cat:
        t = load(cat, table)
        _report(table, t.update(where, set=values), "updated")
