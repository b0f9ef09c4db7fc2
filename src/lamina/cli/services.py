"""Commands ``compact`` and ``services`` (table services: compaction, retention,
cleaning of failed writes)."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from lamina.cli import CatalogOpt, OutputOpt, WarehouseOpt, command, connect, load
from lamina.cli.coerce import interval_text
from lamina.cli.output import Column, OutputFormat, console, done, emit, n_of, note, warn
from lamina.errors import CompactionError

#: errors of a chunk's compaction that the next run retries (autocompaction's _attempt)
_RETRIED = ("CommitConflictError:", "LockTimeoutError:", "LockRevokedError:")

_STATES = {"PENDING": "yellow", "COMPLETE": "green", "SKIPPED": "dim"}
_AUTO = [
    Column("table"),
    Column("chunk"),
    Column("status"),
    Column("action"),
    Column("segments", right=True, show=str),
    Column("small", right=True, show=str),
    Column("reason"),
    Column("version", right=True, show=lambda v: "" if v is None else str(v)),
    Column("error", show=lambda v: v or ""),
]


@command("compact")
def compact(
    ctx: typer.Context,
    name: Annotated[str | None, typer.Argument(help="Table name (omit with --auto).")] = None,
    interval: Annotated[
        str | None,
        typer.Option(
            "--interval",
            parser=interval_text,
            help="START/END (ISO-8601); default: the whole table.",
        ),
    ] = None,
    mode: Annotated[str | None, typer.Option("--mode", help="minor (default) or major.")] = None,
    granularity: Annotated[
        str | None, typer.Option("--granularity", help="Major: new segment granularity.")
    ] = None,
    sort_by: Annotated[
        list[str] | None, typer.Option("--sort-by", help="Major: sort by this column (repeatable).")
    ] = None,
    target_rows: Annotated[
        int | None, typer.Option("--target-rows", min=1, help="Rows per compacted segment.")
    ] = None,
    auto: Annotated[
        bool, typer.Option("--auto", help="Compact every table by its compaction policy.")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="With --auto: list each chunk's status only.")
    ] = False,
    fmt: OutputOpt = OutputFormat.table,
    catalog: CatalogOpt = None,
    warehouse: WarehouseOpt = None,
) -> None:
    """Merge small segments (minor), rewrite chunks (major), or run auto-compaction."""
    if auto:
        given = {
            "--interval": interval,
            "--mode": mode,
            "--granularity": granularity,
            "--sort-by": sort_by,
            "--target-rows": target_rows,
        }
        extra = [opt for opt, value in given.items() if value]
        if extra:
            raise CompactionError(
                f"{', '.join(extra)} cannot go with --auto, which follows each table's "
                "compaction policy (its compaction.* properties); drop them, or compact "
                "one table without --auto"
            )
        with connect(ctx, catalog, warehouse) as cat:
            if name is not None:
                load(cat, name)  # an unknown name: the CLI's message
            results = cat.compact_auto([name] if name else None, dry_run=dry_run)
        rows = [
            {
                "table": r.table,
                "chunk": str(r.status.chunk),
                # what the run did; the chunk's status before it is what --dry-run shows
                "status": "COMPACTED" if r.commit is not None else r.status.status,
                "action": r.status.action,
                "segments": r.status.segments,
                "small": r.status.small,
                "reason": r.status.reason,
                "version": None if r.commit is None else r.commit.version,
                "error": r.error,
            }
            for r in results
        ]
        emit(_AUTO, rows, fmt, empty="no chunks to consider")
        # listed above; a chunk skipped (a lock, a lineage entry) or raced (a conflict,
        # a busy lock) is tried again next run: a note, not a failed run
        errors = [r for r in results if r.error and not r.error.startswith("skipped:")]
        retried = [r for r in errors if (r.error or "").startswith(_RETRIED)]
        if retried:
            warn(
                f"{n_of(len(retried), 'chunk')} not compacted this run, tried again next "
                f"run: {retried[0].error}"
            )
        failed = [r for r in errors if r not in retried]
        if failed:
            raise CompactionError(
                f"{n_of(len(failed), 'chunk compaction')} failed (their chunks keep their "
                f"segments), first {failed[0].table} {failed[0].status.chunk}: "
                f"{failed[0].error}"
            )
        return
    if dry_run:
        raise CompactionError("--dry-run goes with --auto")
    if name is None:
        raise CompactionError("name a table, or pass --auto")
    with connect(ctx, catalog, warehouse) as cat:
        t = load(cat, name)
        before = len(t.segments())
        mode = mode or "minor"
        c = t.compact(
            interval=interval,
            mode=mode,
            target_rows_per_segment=target_rows,
            segment_granularity=granularity,
            sort_by=sort_by or None,
        )
        if c is not None:  # what it rewrote, not the whole table
            added = set(c.added)
            outputs = [s for s in t.segments(all=True) if s.id in added]
            chunks = {s.interval for s in outputs}
            tombstones = sum(s.is_tombstone for s in outputs)
    if c is None:
        note(f"{name}: nothing to compact ({n_of(before, 'segment')})")
        return
    done(
        ("compacted ", "bold"),
        (
            f"{name} ({mode}): {n_of(len(chunks), 'chunk')}, {len(c.removed):,} -> "
            f"{n_of(len(c.added) - tombstones, 'segment')}"
            + (f" and {n_of(tombstones, 'tombstone')}" if tombstones else "")
            + f", version {c.version}",
            "",
        ),
    )


@command("services")
def services(
    ctx: typer.Context,
    every: Annotated[
        float, typer.Option("--every", min=0.1, max=86_400.0, help="Seconds between rounds.")
    ] = 60.0,
    rounds: Annotated[
        int, typer.Option("--rounds", min=0, help="Stop after N rounds (0: until Ctrl-C).")
    ] = 0,
    catalog: CatalogOpt = None,
    warehouse: WarehouseOpt = None,
) -> None:
    """Run table services on a schedule: clean failed writes, auto-compaction (locks at
    compaction priority 25, below batch 50 and streaming 75), retention. Ctrl-C stops
    between steps or aborts the step running (every step is one atomic commit)."""
    con = console()
    n = 0
    with connect(ctx, catalog, warehouse) as cat:
        try:
            while rounds == 0 or n < rounds:
                n += 1
                with con.status(f"round {n}: cleaning failed writes"):
                    cleaned = cat.clean_failed_writes()
                with con.status(f"round {n}: auto-compaction"):
                    results = cat.compact_auto()
                with con.status(f"round {n}: retention"):
                    cat.run_retention()
                commits = {r.commit.id for r in results if r.commit is not None}
                errors = [r for r in results if r.error]
                pending = sum(1 for r in results if r.status.status == "PENDING")
                note(
                    f"round {n}: {n_of(cleaned, 'failed write')} cleaned, "
                    f"{n_of(len(commits), 'compaction')} ({pending} chunks pending, "
                    f"{len(errors)} retried next round), retention done"
                )
                if rounds == 0 or n < rounds:
                    time.sleep(every)
        except KeyboardInterrupt:
            note("stopped: every finished step is committed, an interrupted one left nothing")
