"""Commands that look inside a table: ``segments``, ``timeline``, ``history``, ``lineage``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from lamina.cli import (
    AsOfOpt,
    CatalogOpt,
    OutputOpt,
    TableArg,
    WarehouseOpt,
    as_of_arg,
    command,
    connect,
    load,
    snapshot,
)
from lamina.cli.coerce import interval_text
from lamina.cli.output import (
    Column,
    OutputFormat,
    console,
    count,
    emit,
    n_of,
    note,
    size,
    when,
)
from lamina.core.interval import Interval, format_us
from lamina.errors import UpsertError

if TYPE_CHECKING:
    from lamina.core.inspect import ChunkStatus

_STATUS_STYLES = {"visible": "green", "partial": "yellow", "incomplete": "yellow"}


def _styled(styles: dict[str, str], default: str = "") -> Any:
    """A cell showing a value in the style its kind has in ``styles``."""
    return lambda v: Text(str(v), style=styles.get(str(v), default))


def _segment_columns(with_status: bool) -> list[Column]:
    cols = [
        Column("segment"),
        Column("chunk", "interval", only="table"),
        Column("interval", only="data"),
        Column("start", only="data"),
        Column("end", only="data"),
        Column("version", show=lambda v: f"v{v}", right=True),
        Column("part", "partition", right=True, only="table"),
        Column("partition", only="data"),
        Column("core_partitions", only="data"),
        Column("tombstone", only="data"),
        Column("rows", show=count, right=True, only="data"),
        Column("rows_cell", "rows", right=True, only="table"),
        Column("size_bytes", "size", show=lambda v: "" if v is None else size(v), right=True),
        Column("added_in", "added in", show=lambda v: "" if v is None else str(v), right=True),
        Column("commit", only="data"),
    ]
    if with_status:
        cols += [
            Column("status", only="data"),
            Column("detail", only="data"),
            Column("status_cell", "status", show=lambda v: v, only="table"),
        ]
    return cols


@command("segments")
def segments(
    ctx: typer.Context,
    name: TableArg,
    all_: Annotated[
        bool, typer.Option("--all", "-a", help="Every published segment, with its status.")
    ] = False,
    as_of: AsOfOpt = None,
    fmt: OutputOpt = OutputFormat.table,
    catalog: CatalogOpt = None,
    warehouse: WarehouseOpt = None,
) -> None:
    """List a table's visible segments (or, with --all, every published one), with the
    table version that added each (csv/json add the catalog's commit id)."""
    from lamina.core.inspect import chunk_label, chunk_status, chunks  # loads sortedcontainers
    from lamina.core.timeline import Timeline  # loads sortedcontainers

    at = as_of_arg(as_of)
    with connect(ctx, catalog, warehouse) as cat:
        t = load(cat, name)
        snap = snapshot(t, at, all_published=all_)
        # the summary's rows: less those of segments shown in part, or vectors hide
        summary = snap.commit_id and fmt is OutputFormat.table
        shown = t.count(as_of=snap.seq) if summary else 0
        added_in = {c.id: c.version for c in t.history()}  # the table version each made
    tl = Timeline.build(snap.segments)
    status: dict[tuple[Interval, int], ChunkStatus] = {}
    if all_:
        segs = sorted(snap.segments, key=lambda s: (s.interval, s.version, s.partition_id))
        for versions in chunks(tl).values():
            for c in versions:
                status[(c.interval, c.version)] = chunk_status(tl, c)
    else:
        segs = [s for s in tl.visible() if s.location is not None]
    rows: list[dict[str, Any]] = []
    styles: list[str | None] = []
    for s in segs:
        dead = s.location is None
        row: dict[str, Any] = {
            "segment": s.id,
            "chunk": chunk_label(s.interval, t.granularity),
            "interval": str(s.interval),
            "start": format_us(s.interval.start),
            "end": format_us(s.interval.end),
            "version": s.version,
            "part": f"{s.partition_id}"
            + (f"/{s.num_core_partitions}" if s.num_core_partitions else ""),
            "partition": s.partition_id,
            "core_partitions": s.num_core_partitions,
            "tombstone": dead,
            "rows": s.row_count,
            "rows_cell": "tombstone" if dead else count(s.row_count),
            "size_bytes": None if dead else s.size_bytes,
            "added_in": added_in.get(s.commit_id) if s.commit_id is not None else None,
            "commit": s.commit_id,
        }
        style = None
        if all_:
            st = status[(s.interval, s.version)]
            row.update(
                status=st.kind,
                detail=st.detail,
                status_cell=Text(st.detail, style=_STATUS_STYLES.get(st.kind, "dim")),
            )
            style = None if st.kind in _STATUS_STYLES else "dim"
        rows.append(row)
        styles.append(style)
    emit(_segment_columns(all_), rows, fmt, styles=styles)
    if fmt is not OutputFormat.table:
        return
    live = [s for s in tl.visible() if s.location is not None]
    stored = sum(s.row_count for s in live)
    text = (
        f"{n_of(len(live), 'visible segment')}, {n_of(shown, 'row')}"
        + (f" ({count(stored)} stored)" if stored != shown else "")
        + f", {size(sum(s.size_bytes for s in live))}"
    )
    if all_:
        text = f"{n_of(len(segs), 'published segment')}; {text}"
    if snap.commit_id:
        text += f" · version {snap.seq}"
    note(text)


_GLYPHS = {
    "visible": ("█", "green"),
    "partial": ("▓", "yellow"),
    "overshadowed": ("░", "dim"),
    "incomplete": ("▒", "yellow"),
    "hidden": ("░", "dim"),
}
_BAR_WIDTH = 16
_TIMELINE = [
    Column("chunk_cell", "chunk", only="table"),
    Column("chunk", only="data"),
    Column("start", only="data"),
    Column("end", only="data"),
    Column("version", show=lambda v: f"v{v}", right=True),
    Column("bar", "rows", only="table"),
    Column("rows_cell", "", right=True, only="table"),
    Column("rows", only="data"),
    Column("parts_cell", "partitions", only="table"),
    Column("partitions", only="data"),
    Column("tombstone", only="data"),
    Column("status", only="data"),
    Column("detail", only="data"),
    Column("state", only="table", show=lambda v: v),
    Column("groups", "minor versions (roots -> partitions: state)"),
]
_LEGEND = Text.assemble(
    ("█", "green"),
    " visible  ",
    ("▓", "yellow"),
    " partly visible  ",
    ("░", "dim"),
    " overshadowed  ",
    ("▒", "yellow"),
    " incomplete  ",
    ("×", "red"),
    " tombstone",
    style="dim",
)


@command("timeline")
def timeline(
    ctx: typer.Context,
    name: TableArg,
    as_of: AsOfOpt = None,
    interval: Annotated[
        str | None,
        typer.Option(
            "--interval",
            "-i",
            parser=interval_text,
            help="Only chunks overlapping START/END (ISO-8601).",
        ),
    ] = None,
    limit: Annotated[
        int,
        typer.Option("--limit", "-n", help="Show at most N chunks (0: all; csv/json: all).", min=0),
    ] = 60,
    fmt: OutputOpt = OutputFormat.table,
    catalog: CatalogOpt = None,
    warehouse: WarehouseOpt = None,
) -> None:
    """Draw the timeline: each chunk's versions, which is visible, what is overshadowed."""
    from lamina.core.inspect import (  # loads sortedcontainers
        chunk_label,
        chunk_status,
        chunks,
        partitions_label,
    )
    from lamina.core.timeline import Timeline  # loads sortedcontainers

    window = Interval.parse(interval) if interval is not None else None
    at = as_of_arg(as_of)
    with connect(ctx, catalog, warehouse) as cat:
        t = load(cat, name)
        snap = snapshot(t, at, all_published=True)
    tl = Timeline.build(snap.segments)
    groups = [
        (iv, versions)
        for iv, versions in chunks(tl).items()
        if window is None or iv.overlaps(window)
    ]
    table_fmt = fmt is OutputFormat.table
    shown = groups if limit == 0 or not table_fmt else groups[:limit]
    most = max((c.rows for _, versions in shown for c in versions), default=0)
    rows: list[dict[str, Any]] = []
    styles: list[str | None] = []
    for iv, versions in shown:
        label = chunk_label(iv, t.granularity)
        for i, c in enumerate(versions):
            st = chunk_status(tl, c)
            glyph, style = _GLYPHS[st.kind]
            if c.tombstone:
                bar = Text("×", style="red" if st.kind == "visible" else "dim")
                detail = "deleted (tombstone)" if st.kind == "visible" else st.detail
                state = Text(detail, style="red" if st.kind == "visible" else style)
                parts, rows_cell = "tombstone", ""
            else:
                width = max(1, round(_BAR_WIDTH * c.rows / most)) if most and c.rows else 1
                bar = Text(glyph * width, style=style)
                detail, state = st.detail, Text(st.detail, style=style)
                parts = partitions_label([s.partition_id for s in c.segments])
                rows_cell = count(c.rows)
            rows.append(
                {
                    "chunk_cell": label if i == 0 else "",
                    "chunk": label,
                    "start": format_us(iv.start),
                    "end": format_us(iv.end),
                    "version": c.version,
                    "bar": bar,
                    "rows_cell": rows_cell,
                    "rows": c.rows,
                    "parts_cell": parts,
                    "partitions": partitions_label([s.partition_id for s in c.segments]),
                    "tombstone": c.tombstone,
                    "status": st.kind,
                    "detail": detail,
                    "state": state,
                    "groups": _groups(tl, c.segments),
                }
            )
            styles.append("dim" if st.kind in ("overshadowed", "hidden") else None)
    if not table_fmt:
        emit(_TIMELINE, rows, fmt)
        return
    layered = sum(1 for _, versions in groups if len(versions) > 1)
    note(
        Text.assemble(
            (t.name, "bold"),
            f" · {t.granularity.value} chunks · {n_of(len(groups), 'chunk')}",
            f" ({count(layered)} with several versions)" if layered else "",
            f" · version {snap.seq}" if snap.commit_id else " · empty",
            f" · within {window}" if window else "",
        )
    )
    if not groups:
        return
    emit(_TIMELINE, rows, fmt, styles=styles, padding=(0, 1), header_style="dim")
    if len(shown) < len(groups):
        note(
            f"... {n_of(len(groups) - len(shown), 'more chunk')} "
            "(--limit 0 shows all; --interval START/END narrows)"
        )
    note(_LEGEND)


def _groups(tl: Any, segments: Sequence[Any]) -> str:
    """The atomic update groups of a version's later generations: minor version, the
    root partitions they replace, their own partitions and their state."""
    from lamina.core.inspect import partitions_label  # loads sortedcontainers

    groups: dict[tuple[int, tuple[int, int]], list[Any]] = {}
    for s in segments:
        if s.minor_version:
            groups.setdefault((s.minor_version, s.root_range), []).append(s)
    return "; ".join(
        f"m{minor} {partitions_label(range(*roots))} -> "
        f"{partitions_label([s.partition_id for s in segs])}: "
        f"{tl.partition_state(segs[0]) or 'removed'}"
        for (minor, roots), segs in sorted(groups.items())
    )


_COMMIT_STATES = {"COMPLETED": "green", "ABORTED": "red"}
_HISTORY = [
    Column("version", right=True, show=lambda v: "" if v is None else str(v)),
    Column("action"),
    Column("state", show=_styled(_COMMIT_STATES, "yellow")),
    Column("started_at", only="data"),
    Column("completed_at", "completed (UTC)", show=when),
    Column("segments_added", "+segs", show=count, right=True),
    Column("segments_removed", "-segs", show=count, right=True),
    Column("base_version", only="data"),
    Column("commit", only="data"),
    Column("metadata", only="data"),
]
#: the table's metadata column, with ``--metadata``
_METADATA = Column("metadata_cell", "metadata", show=lambda v: v, only="table")


def _json(value: Any) -> str:

    return json.dumps(value, sort_keys=True, default=str)


@command("history")
def history(
    ctx: typer.Context,
    name: TableArg,
    metadata: Annotated[
        bool, typer.Option("--metadata", "-m", help="Also show each commit's metadata.")
    ] = False,
    fmt: OutputOpt = OutputFormat.table,
    catalog: CatalogOpt = None,
    warehouse: WarehouseOpt = None,
) -> None:
    """List a table's commits, oldest first, by the table version each made (what
    --as-of, `lamina restore` and the change feed take; an aborted commit made none).

    csv/json add the version each started from (base_version), the catalog's commit
    id and the metadata."""
    with connect(ctx, catalog, warehouse) as cat:
        commits = load(cat, name).history()
    rows = [
        {
            "version": c.version,
            "action": c.action,
            "state": c.state,
            "started_at": c.started_at,
            "completed_at": c.completed_at,
            "segments_added": len(c.added),
            "segments_removed": len(c.removed),
            "base_version": c.base_seq,
            "commit": c.id,
            "metadata": c.metadata,
            "metadata_cell": Text(_json(c.metadata), overflow="fold") if c.metadata else "",
        }
        for c in commits
    ]
    columns = [*_HISTORY, _METADATA] if metadata else _HISTORY
    emit(columns, rows, fmt, empty=f"table {name} has no commits yet")


_LOCK_STATES = {"GRANTED": "green", "REVOKED": "red", "WAITING": "yellow"}
_LOCKS = [
    Column("lock", right=True),
    Column("type"),
    Column("interval"),
    Column("priority", right=True, show=str),
    Column("state", show=_styled(_LOCK_STATES)),
    Column("commit", right=True),
    Column("holder"),
]


@command("locks")
def locks(
    ctx: typer.Context,
    name: TableArg,
    fmt: OutputOpt = OutputFormat.table,
    catalog: CatalogOpt = None,
    warehouse: WarehouseOpt = None,
) -> None:
    """List a table's task locks and waiting lock requests."""
    with connect(ctx, catalog, warehouse) as cat:
        held = load(cat, name).locks()
    rows = [
        {
            "lock": x.id,
            "type": x.type,
            "interval": str(x.interval),
            "priority": x.priority,
            "state": x.state,
            "commit": x.commit_id,
            "holder": x.holder,
        }
        for x in held
    ]
    emit(_LOCKS, rows, fmt, empty=f"table {name} has no locks")


_ENTRY_STATES = {"COMPLETED": "green", "REVERTED": "red", "IN_PROGRESS": "yellow"}
_LINEAGE = [
    Column("entry"),
    Column("state", show=_styled(_ENTRY_STATES)),
    Column("updated_at", "updated (UTC)", show=when),
    Column("segments_from_count", "-segments", show=count, right=True, only="table"),
    Column("segments_to_count", "+segments", show=count, right=True, only="table"),
    Column("segments_from", only="data"),
    Column("segments_to", only="data"),
]


@command("lineage")
def lineage(
    ctx: typer.Context,
    name: TableArg,
    show_segments: Annotated[
        bool, typer.Option("--segments", "-s", help="Also list each entry's segment ids.")
    ] = False,
    fmt: OutputOpt = OutputFormat.table,
    catalog: CatalogOpt = None,
    warehouse: WarehouseOpt = None,
) -> None:
    """List a table's segment lineage entries (consistent pushes), oldest first.

    csv/json list every entry's segment ids (segments_from, segments_to)."""
    with connect(ctx, catalog, warehouse) as cat:
        t = load(cat, name)
        entries = t.lineage()
    rows = [
        {
            "entry": e.id,
            "state": e.state,
            "updated_at": e.timestamp,
            "segments_from_count": len(e.segments_from),
            "segments_to_count": len(e.segments_to),
            "segments_from": list(e.segments_from),
            "segments_to": list(e.segments_to),
        }
        for e in entries
    ]
    emit(_LINEAGE, rows, fmt, empty=f"table {t.name} has no lineage entries")
    if fmt is not OutputFormat.table or not entries:
        return
    if show_segments:
        con = console()
        for e in entries:
            con.print(Text(e.id, style="bold"))
            for sid in e.segments_from:
                con.print(Text(f"  - {sid}", style="red"))
            for sid in e.segments_to:
                con.print(Text(f"  + {sid}", style="green"))
    states = {s: sum(e.state == s for e in entries) for s in _ENTRY_STATES}
    note(
        f"{count(len(entries))} {'entry' if len(entries) == 1 else 'entries'}: "
        + ", ".join(f"{n} {s.lower().replace('_', ' ')}" for s, n in states.items() if n)
    )


_KEYS = [
    Column("seq", right=True),
    Column("keys", show=count, right=True),
    Column("bytes_per_key", "bytes/key", right=True),
    Column("index_bytes", "index", show=size, right=True),
    Column("files", show=count, right=True),
    Column("hidden_rows", "hidden rows", show=count, right=True),
    Column("files_with_vectors", "files with vectors", show=count, right=True),
    Column("seconds", "ready in (s)", right=True),
]


@command("keys")
def keys(
    ctx: typer.Context,
    name: TableArg,
    fmt: OutputOpt = OutputFormat.table,
    catalog: CatalogOpt = None,
    warehouse: WarehouseOpt = None,
) -> None:
    """Key index statistics of an upsert table: keys, memory, deletion vectors, and how
    long this process took to get the index (the newest saved snapshot caught up, else
    built from the table's files)."""
    from lamina.meta.tables import get_table  # loads sqlalchemy
    from lamina.operations.handle import TableHandle  # loads sortedcontainers, sqlalchemy

    with connect(ctx, catalog, warehouse) as cat:
        load(cat, name)  # a bad name or a missing table: the usual errors
        h = TableHandle(cat.context, get_table(cat.context.db, name))
        spec = h.upsert_spec
        if spec is None:
            raise UpsertError(f"table {name!r} has no primary key: it has no key index")
        got = cat.context.keys.stats(cat.context.db, h.record, spec, cat.warehouse)
    row = {
        "seq": got.seq,
        "keys": got.keys,
        "bytes_per_key": round(got.index_bytes / got.keys, 1) if got.keys else 0,
        "index_bytes": got.index_bytes,
        "files": got.files,
        "hidden_rows": got.hidden_rows,
        "files_with_vectors": got.files_with_vectors,
        "seconds": round(got.seconds, 3),
    }
    emit(_KEYS, [row], fmt)
