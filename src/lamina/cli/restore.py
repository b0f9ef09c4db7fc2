"""Command ``restore``: make a table show again what an earlier version showed."""

from __future__ import annotations

from typing import Annotated

import typer

from lamina.cli import CatalogOpt, TableArg, WarehouseOpt, as_of_arg, command, connect, load
from lamina.cli.output import done, n_of


@command("restore")
def restore(
    ctx: typer.Context,
    name: TableArg,
    target: Annotated[
        str,
        typer.Argument(
            metavar="VERSION|TIME",
            help="A version (a number, see `lamina history`) or a time (ISO-8601, UTC "
            "unless it has an offset): the latest version completed then.",
        ),
    ],
    catalog: CatalogOpt = None,
    warehouse: WarehouseOpt = None,
) -> None:
    """Restore a table to an earlier version, in one commit (files whose rows a delete hid since
    copied, others reused); every version stays readable (the restore is a version of its own)."""
    at = as_of_arg(target, "VERSION|TIME")
    with connect(ctx, catalog, warehouse) as cat:
        commit = load(cat, name).restore(at)
    was = commit.metadata.get("restored_version")
    done(
        (f"version {commit.version}", "bold"),
        f" (restore) on {name}: as of version {was}; "
        f"{n_of(len(commit.added), 'segment')} shown again, {len(commit.removed):,} hidden",
    )
