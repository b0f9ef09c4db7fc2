"""The ``lamina`` command line: create tables, ingest files, look inside.

Every command takes ``--catalog`` / ``--warehouse`` (also accepted before the command
name), else reads ``$LAMINA_CATALOG`` / ``$LAMINA_WAREHOUSE``, else the ``.lamina.toml``
that ``lamina init`` wrote in the working directory or a parent (:mod:`lamina.cli.config`).
Only ``init``, ``create-table`` and ``ingest --create`` create a warehouse and catalog;
every other command refuses a path where none exists. Errors lamina raises for bad input
print one red line and exit with status 1; usage errors exit with 2; Ctrl-C exits 130.

Start-up stays fast: this package imports typer and rich only; the catalog (SQLAlchemy,
pyarrow), DuckDB, Spark, pandas and the REST server are imported by the commands that
use them, and the modules defining the commands when they are needed (running one
command imports only its own module).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import importlib
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, ParamSpec, TypeVar

import typer

import lamina
from lamina.cli import coerce, config
from lamina.cli.output import OutputFormat, error_line
from lamina.errors import (
    CatalogNotFoundError,
    LaminaError,
    SnapshotNotFoundError,
    TableNotFoundError,
)

if TYPE_CHECKING:
    from typer.models import CommandInfo

    from lamina.cli.config import Locations
    from lamina.core.model import Snapshot

coerce.install()

P = ParamSpec("P")
R = TypeVar("R")

#: The module (in ``lamina.cli``) defining each command.
COMMANDS = {
    **dict.fromkeys(("init", "info", "create-table", "tables", "add-columns"), "tables"),
    **dict.fromkeys(("widen-column", "describe", "drop-table"), "tables"),
    **dict.fromkeys(("set-properties", "unset-properties"), "tables"),
    **dict.fromkeys(("segments", "timeline", "history", "lineage", "locks", "keys"), "inspect"),
    **dict.fromkeys(("ingest", "upsert", "revert", "push"), "write"),
    **dict.fromkeys(("query", "retention", "orphans", "serve"), "admin"),
    **dict.fromkeys(("compact", "services"), "services"),
    **dict.fromkeys(("delete", "update"), "rows"),
    "restore": "restore",
}
_MODULES = (
    "tables",
    "inspect",
    "write",
    "rows",
    "admin",
    "services",
    "restore",
)  # their commands in this order in --help


def _command_name(argv: Sequence[str]) -> str | None:
    """The command a command line names after the global options, if any."""
    args = iter(argv)
    for arg in args:
        if arg in ("--catalog", "--warehouse"):
            next(args, None)
        elif not arg.startswith(("--catalog=", "--warehouse=")):
            return None if arg.startswith("-") else arg
    return None


class _Lamina(typer.Typer):
    """The app; the modules defining its commands are imported when its commands are
    first read: all of them, or while a command line runs (``app()``) that names a
    known command, only the module defining that command."""

    _only: str | None = None
    _loading = False
    program = False  # run(): this process is the lamina program

    @property
    def registered_commands(self) -> list[CommandInfo]:
        if not self._loading:
            self._loading = True  # the modules register their commands meanwhile
            try:
                for name in (self._only,) if self._only else _MODULES:
                    importlib.import_module(f"lamina.cli.{name}")
            finally:
                self._loading = False
            order = {f"lamina.cli.{name}": i for i, name in enumerate(_MODULES)}
            self._commands.sort(key=lambda c: order.get(getattr(c.callback, "__module__", ""), 0))
        return self._commands

    @registered_commands.setter
    def registered_commands(self, commands: list[CommandInfo]) -> None:
        self._commands = commands

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        argv = args[0] if args else kwargs.get("args", sys.argv[1:])
        name = _command_name(argv) if isinstance(argv, list | tuple) else None
        self._only = COMMANDS.get(name or "")
        try:
            return super().__call__(*args, **kwargs)
        finally:
            self._only = None


app = _Lamina(
    name="lamina",
    help="Time-partitioned tables of immutable Parquet segments on a transactional catalog.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)


def _handle_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn a :class:`LaminaError` into one red line on stderr and exit status 1."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except LaminaError as exc:
            error_line(cli_words(str(exc)))
            raise typer.Exit(1) from None
        except KeyboardInterrupt:  # a command that writes says what was published
            error_line("interrupted")
            raise typer.Exit(130) from None
        except BrokenPipeError:  # `lamina query ... | head`
            with contextlib.suppress(OSError):
                sys.stderr.close()
            raise typer.Exit(0) from None

    return wrapper


#: How the Python API's advice reads on the command line (whole phrases only: a bare
#: ``segment_granularity`` may be the property ``compaction.segment_granularity``).
_CLI_WORDS = (
    (
        "segment_granularity, sort_by and rollup rewrite whole chunks: use mode='major'",
        "--granularity and --sort-by rewrite whole chunks: use --mode major",
    ),
    ("segment_granularity: ", "--granularity: "),
    (
        "drop segment_granularity or name a time_column",
        "drop --granularity or name a --time-column",
    ),
    ("pass force=True", "pass --force"),
    ("t.segments(all=True)", "`lamina segments TABLE --all`"),
    ("t.segments()", "`lamina segments TABLE`"),
    ("t.lineage()", "`lamina lineage TABLE`"),
    ("t.history()", "`lamina history TABLE`"),
)


def cli_words(message: str) -> str:
    """``message`` with the Python API's advice in the command line's words."""
    for python, cli in _CLI_WORDS:
        message = message.replace(python, cli)
    return message


def command(name: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Register a command whose LaminaErrors become one-line messages."""

    def register(fn: Callable[P, R]) -> Callable[P, R]:
        wrapped = _handle_errors(fn)
        app.command(name)(wrapped)
        return wrapped

    return register


# -- options shared by the commands ---------------------------------------------------------


@dataclass
class _Globals:
    catalog: str | None = None
    warehouse: str | None = None


_CATALOG_HELP = (
    "Catalog URL (sqlite:///..., postgresql://...). Default: $LAMINA_CATALOG, else "
    ".lamina.toml's (`lamina info`), else lamina.db inside the warehouse."
)
_WAREHOUSE_HELP = (
    "Warehouse path or URI. Default: $LAMINA_WAREHOUSE, else .lamina.toml's "
    "(`lamina info`), else ./warehouse."
)
CatalogOpt = Annotated[
    str | None, typer.Option("--catalog", help=_CATALOG_HELP, show_default=False)
]
WarehouseOpt = Annotated[
    str | None, typer.Option("--warehouse", help=_WAREHOUSE_HELP, show_default=False)
]
OutputOpt = Annotated[
    OutputFormat,
    typer.Option("--format", "-f", help="Output format: table, csv, json or jsonl."),
]
TableArg = Annotated[str, typer.Argument(help="Table name.")]
AsOfOpt = Annotated[
    str | None,
    typer.Option(
        "--as-of",
        help="Read the table as of a version (a number, see `lamina history`) or a time "
        "(ISO-8601, UTC unless it has an offset): the latest version completed then.",
        show_default=False,
    ),
]


def as_of_arg(text: str | None, what: str = "--as-of") -> int | str | None:
    """A version (digits) or an ISO-8601 time given on the command line; a usage
    error (exit 2) for anything else."""
    if text is None:
        return None
    from lamina.core.versions import AtTime, travel_text  # loads nothing heavy

    try:
        got = travel_text(text, what)
    except LaminaError:
        raise typer.BadParameter(
            f"{text!r} is neither a version (a number, see `lamina history TABLE`) nor an "
            "ISO-8601 time such as 2024-01-02T03:00:00Z",
            param_hint=what,
        ) from None
    return text.strip() if isinstance(got, AtTime) else int(got)  # type: ignore[arg-type]


def _version(value: bool) -> None:
    if value:
        print(f"lamina {lamina.__version__}")
        raise typer.Exit(0)


@app.callback()
def main(
    ctx: typer.Context,
    catalog: Annotated[
        str | None,
        typer.Option("--catalog", help=_CATALOG_HELP, show_default=False),
    ] = None,
    warehouse: Annotated[
        str | None,
        typer.Option("--warehouse", help=_WAREHOUSE_HELP, show_default=False),
    ] = None,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print lamina's version."),
    ] = False,
) -> None:
    """Time-partitioned tables of immutable Parquet segments on a transactional catalog."""
    ctx.obj = _Globals(catalog, warehouse)


def resolved(ctx: typer.Context, catalog: str | None, warehouse: str | None) -> Locations:
    """Where the catalog and warehouse come from: the command's options, else the
    global ones, else the environment, else ``.lamina.toml``, else the defaults
    (:mod:`lamina.cli.config`). Raises ConfigError."""
    glob = ctx.find_object(_Globals) or _Globals()
    return config.resolve(catalog or glob.catalog, warehouse or glob.warehouse)


def locations(
    ctx: typer.Context, catalog: str | None, warehouse: str | None
) -> tuple[str | None, str | None]:
    """The catalog and warehouse to use (None: the default), as :func:`resolved`."""
    where = resolved(ctx, catalog, warehouse)
    return where.catalog.value, where.warehouse.value


@contextlib.contextmanager
def connect(
    ctx: typer.Context, catalog: str | None, warehouse: str | None, create: bool = False
) -> Iterator[lamina.Catalog]:
    """The catalog the command's options, the global ones, the environment or
    ``.lamina.toml`` name. ``create``: make the warehouse and catalog if missing
    (``init``, ``create-table``, ``ingest --create``); otherwise a path where none
    exists raises CatalogNotFoundError saying how to make one."""
    from lamina.catalog import connect as open_catalog  # loads sortedcontainers, sqlalchemy

    if app.program:
        # The catalog's imports (SQLAlchemy) made most of the objects this short
        # process holds: leave them out of garbage collections, the one at exit
        # included (tens of ms). Before DuckDB is imported: its bindings report
        # objects that the collection at exit did not free.
        gc.freeze()
    where = resolved(ctx, catalog, warehouse)
    try:
        cat = open_catalog(
            catalog=where.catalog.value, warehouse=where.warehouse.value, create=create
        )
    except CatalogNotFoundError as exc:
        raise CatalogNotFoundError(not_found(exc, where)) from None
    try:
        yield cat
    finally:
        cat.close()


def not_found(exc: CatalogNotFoundError, where: Locations) -> str:
    """A missing catalog's message in the command line's words: what was looked for,
    where that setting came from, and the command that makes one."""
    why = str(exc).split("; ")[0]

    def said(source: str) -> str:
        return "the default" if source == "default" else source

    wh = where.warehouse.value or config.DEFAULT_WAREHOUSE
    init = f"lamina init --warehouse {wh}"
    if where.catalog.value is not None:
        init += f" --catalog {where.catalog.value}"
    return (
        f"{why} — the warehouse setting came from {said(where.warehouse.source)}, the "
        f"catalog's from {said(where.catalog.source)}; check the path, or create it with `{init}`"
    )


def load(cat: lamina.Catalog, name: str) -> lamina.Table:
    """The table ``name``; TableNotFoundError saying how to list the tables."""
    try:
        return cat.load_table(name)
    except TableNotFoundError:
        raise TableNotFoundError(
            f"no table named {name!r}; `lamina tables` lists the tables"
        ) from None


def as_of_tables(values: Sequence[str] | None) -> Any:
    """``--as-of`` of a query: ``VERSION|TIME`` for every table, or ``TABLE=VERSION|TIME``
    (repeatable): what ``cat.sql(as_of=...)`` takes. A usage error for anything else."""
    if not values:
        return None
    per: dict[str, int | str | None] = {}
    every: list[int | str | None] = []
    for text in values:
        name, eq, value = text.partition("=")
        if eq:
            per[name.strip()] = as_of_arg(value)
        else:
            every.append(as_of_arg(text))
    if every and (per or len(every) > 1):
        raise typer.BadParameter(
            "give one VERSION|TIME for every table, or TABLE=VERSION|TIME for each",
            param_hint="--as-of",
        )
    return every[0] if every else per


def snapshot(t: lamina.Table, as_of: int | str | None, all_published: bool) -> Snapshot:
    """The table's snapshot; SnapshotNotFoundError's advice names the table's history."""
    try:
        return t.snapshot(as_of, all_published=all_published)
    except SnapshotNotFoundError as exc:  # its type (and attributes) kept
        exc.args = (str(exc).replace("t.history()", f"`lamina history {t.name}`"),)
        raise


def run() -> None:
    """The ``lamina`` program (console script, ``python -m lamina.cli``)."""
    app.program = True
    app()


__all__ = ["COMMANDS", "app", "command", "connect", "load", "resolved", "run"]

if __name__ == "__main__":
    run()
