"""The REST calls behind the console's pages (all in the OpenAPI spec): table summaries
sorted and paginated on the server, a table's timeline aggregated into buckets for a
range and zoom, a chunk's segments, commits, locks and writers, a revert's preview,
and read-only SQL. The numbers come from :mod:`lamina.meta.console`, what they mean
from :mod:`lamina.core.console`; these handlers only shape them."""

from __future__ import annotations

import datetime as dt
import decimal
import math
import multiprocessing
import threading
import time
import weakref
from collections.abc import Mapping
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from typing import Annotated, Any, Literal, cast

import numpy as np
import pyarrow.compute as pc
from fastapi import APIRouter, Depends, HTTPException, Query, Request, status

import lamina
from lamina.core import console as rules
from lamina.core.autocompact import policy_of
from lamina.core.interval import Granularity, Interval, format_us
from lamina.core.lineage import LineageState, hidden_by
from lamina.core.timeline import Timeline
from lamina.errors import LaminaError, TableNotFoundError, UpsertError
from lamina.meta import console as queries
from lamina.meta.db import Db
from lamina.meta.tables import get_table
from lamina.operations.compaction.auto import auto_status
from lamina.operations.handle import DEFAULT_TARGET_ROWS, TableHandle
from lamina.rest.auth import AUTH_ERRORS, AuthenticatedRoute, documented_bearer
from lamina.rest.console.models import (
    AbortInfo,
    BucketInfo,
    ChangeFeed,
    ChunkSegmentInfo,
    ChunkSuperseded,
    CommitInfo,
    CommitPage,
    KeyIndexInfo,
    LockRowInfo,
    LocksInfo,
    RevertPreview,
    SortKey,
    SqlColumn,
    SqlRequest,
    SqlResult,
    TableSummary,
    TableSummaryPage,
    TimelineInfo,
    VersionCellInfo,
    WriterInfo,
    Zoom,
)
from lamina.rest.models import ErrorResponse

_ERR: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorResponse, "description": "Refused by lamina (bad input)."},
    404: {"model": ErrorResponse, "description": "Unknown table or lineage entry."},
}

reads = APIRouter(tags=["console"], responses=_ERR)
actions = APIRouter(
    tags=["console"],
    route_class=AuthenticatedRoute,
    dependencies=[Depends(documented_bearer)],
    responses={400: _ERR[400], **AUTH_ERRORS},
)


def catalog_of(request: Request) -> lamina.Catalog:
    cat: lamina.Catalog = request.app.state.catalog
    return cat


CatalogDep = Annotated[lamina.Catalog, Depends(catalog_of)]


def handle_of(cat: lamina.Catalog, table: str) -> TableHandle:
    """The table's handle; TableNotFoundError (404) for an unknown name."""
    if len(table) > 128:
        raise TableNotFoundError(f"no table named {table[:40]!r}...")
    return TableHandle(cat.context, get_table(cat.context.db, table))


def small_rows(props: Mapping[str, str]) -> int:
    """Rows under which a segment of a table with these properties is small."""
    target = props.get("target_rows_per_segment", str(DEFAULT_TARGET_ROWS))
    try:
        return policy_of(dict(props), int(target)).small
    except (LaminaError, ValueError):  # a bad policy: the default's threshold
        return DEFAULT_TARGET_ROWS // 2


# -- tables ----------------------------------------------------------------------------------


def _summary(st: rules.TableStats) -> TableSummary:
    mark, reason = rules.health(st)
    return TableSummary(
        name=st.name,
        rows=st.rows,
        bytes=st.bytes,
        segments=st.segments,
        smallSegments=st.small,
        smallShare=st.small_share,
        supersededShare=st.superseded_share,
        lastCommitAgeS=st.last_commit_age_s,
        openWriters=st.open_writers,
        health=mark,
        reason=reason,
    )


_SORT = {
    "name": lambda s: s.name,
    "rows": lambda s: s.rows,
    "bytes": lambda s: s.bytes,
    "segments": lambda s: s.segments,
    "smallShare": lambda s: s.small_share,
    "supersededShare": lambda s: -1.0 if s.superseded_share is None else s.superseded_share,
    "lastCommitAge": lambda s: math.inf if s.last_commit_age_s is None else s.last_commit_age_s,
    "health": lambda s: ("warn", "empty", "ok").index(s.health),
}


@reads.get("/tableSummaries", response_model=TableSummaryPage)
def table_summaries(
    cat: CatalogDep,
    sort_by: Annotated[SortKey, Query(alias="sortBy")] = "name",
    order: Literal["asc", "desc"] = "asc",
    offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> TableSummaryPage:
    """Each table's rows, bytes, segments, small-segment share, superseded share (upsert
    tables), last commit's age and health mark with its reason; sorted and paginated
    here (``offset``, ``limit``)."""
    db = cat.context.db
    totals = _TOTALS.totals(db, small_rows)
    stats = queries.table_stats(db, totals)
    items = sorted((_summary(s) for s in stats), key=lambda s: s.name)
    items.sort(key=_SORT[sort_by], reverse=order == "desc")
    return TableSummaryPage(
        total=len(items),
        offset=offset,
        limit=limit,
        sortBy=sort_by,
        order=order,
        items=items[offset : offset + limit],
    )


# -- timeline --------------------------------------------------------------------------------

IntervalQ = Annotated[
    str | None,
    Query(
        min_length=3,
        max_length=128,
        description="START/END, ISO-8601 (default: the table's whole data range).",
    ),
]


def timeline(
    cat: lamina.Catalog, table: str, interval: str | None, zoom: str | None
) -> TimelineInfo:
    """The aggregated timeline (see :func:`get_timeline`)."""
    h = handle_of(cat, table)
    db = cat.context.db
    small = small_rows(h.properties)
    kept: rules.Groups | None = None
    if not interval or _TIMELINES.holds(db, h.name):  # the whole table, kept current
        kept = _TIMELINES.groups(db, h.name, small)
    span = Interval.parse(interval) if interval else _extent(kept)
    if span is None:  # no data: nothing to draw
        return TimelineInfo(table=h.name, interval="", zoom="DAY", buckets=[])
    g = Granularity.parse(zoom) if zoom else rules.zoom_for(span, h.granularity)
    edges = rules.bucket_edges(span, g)
    if edges[-1] < span.end:
        coarser = rules.zoom_for(span)
        raise HTTPException(
            status.HTTP_400_BAD_REQUEST,
            f"zoom {g.value} cuts {span} into more than {rules.MAX_BUCKETS} buckets; "
            f"use zoom={coarser.value} or a shorter interval",
        )
    shown = Interval.of(edges[0], edges[-1])
    if kept is None:  # a range of a table not kept: its groups alone
        buckets = rules.aggregate(queries.timeline_groups(db, h.name, shown, small), edges, [])
    else:
        buckets = _buckets(kept, edges, shown, (id(db), h.name, tuple(edges)))
    locks = rules.overlap_counts(edges, queries.lock_intervals(db, h.name, shown))
    pending, surveyed = _pending(cat, h, edges)
    return TimelineInfo(
        table=h.name,
        interval=str(shown),
        zoom=cast(Zoom, g.value),
        pendingAsOfVersion=surveyed,
        buckets=[
            BucketInfo(
                start=format_us(b.start),
                end=format_us(b.end),
                chunks=b.chunks,
                visibleVersion=b.visible_version,
                overshadowedVersions=b.overshadowed_versions,
                segments=b.segments,
                rows=b.rows,
                bytes=b.bytes,
                smallSegments=b.small,
                locks=n_locks,
                deletionVectors=b.deletion_vectors,
                pendingCompaction=None if pending is None else pending[i],
                versions=[
                    VersionCellInfo(
                        version=c.version,
                        state=c.state,
                        segments=c.segments,
                        rows=c.rows,
                        minorVersion=c.minor,
                        tombstone=c.tombstone,
                    )
                    for c in b.versions
                ],
            )
            for i, (b, n_locks) in enumerate(zip(buckets, locks, strict=True))
        ],
    )


_cache_lock = threading.Lock()
#: the timelines shown whole, and every table's totals, kept current commit by commit
_TIMELINES = queries.TimelineCache()
_TOTALS = queries.TotalsCache()


#: the buckets last drawn of kept groups, by (catalog, table, edges): shown again
#: until the table's groups change
_drawn: dict[tuple[Any, ...], tuple[rules.Groups, list[rules.Bucket]]] = {}


def _buckets(
    kept: rules.Groups, edges: list[int], shown: Interval, key: tuple[Any, ...]
) -> list[rules.Bucket]:
    with _cache_lock:
        hit = _drawn.get(key)
    if hit is not None and hit[0] is kept:
        return hit[1]
    groups = kept.take((kept["start"] < shown.end) & (kept["end"] > shown.start))
    buckets = rules.aggregate(groups, edges, [])
    with _cache_lock:
        _drawn[key] = (kept, buckets)
        while len(_drawn) > 32:
            del _drawn[next(iter(_drawn))]
    return buckets


#: the most segments a table may have for a view to survey its compaction status
#: itself; a larger one is surveyed in a worker process (the policy reads every visible
#: segment: some 20 s at a million), at most every SURVEY_EVERY_S seconds, and its
#: views show the last survey
PENDING_MAX_SEGMENTS = 50_000
SURVEY_EVERY_S = 60.0


@dataclass(frozen=True)
class _Survey:
    seq: int  #: the table version surveyed
    starts: np.ndarray  #: the pending chunks' starts and ends
    ends: np.ndarray
    at: float  #: when it started (time.monotonic)


#: the last survey per catalog (going with it), then table id
_surveyed: weakref.WeakKeyDictionary[Db, dict[int, _Survey]] = weakref.WeakKeyDictionary()
_surveying: set[tuple[int, int]] = set()  # (id of the catalog's Db, table id) under way
_workers: list[ProcessPoolExecutor] = []


def pending_chunks(cat: lamina.Catalog, name: str) -> tuple[int, list[tuple[int, int]]]:
    """The table's version, and the (start, end) of each chunk its compaction policy
    makes PENDING then. Raises TableNotFoundError."""
    h = handle_of(cat, name)
    seq = queries.table_seq(cat.context.db, h.name)
    chunks = [st.chunk for st in auto_status(h) if st.status == "PENDING"]
    return seq, [(c.start, c.end) for c in chunks]


def _pending_in_worker(
    catalog: str, warehouse: str, name: str
) -> tuple[int, list[tuple[int, int]]]:
    """:func:`pending_chunks`, in a worker process of its own catalog connection."""
    with lamina.connect(catalog=catalog, warehouse=warehouse, create=False) as cat:
        return pending_chunks(cat, name)


def _keep(db: Db, tid: int, seq: int, chunks: list[tuple[int, int]], at: float) -> None:
    got = np.asarray(chunks, np.int64).reshape(-1, 2)
    with _cache_lock:
        kept = _surveyed.setdefault(db, {})
        if tid not in kept or kept[tid].seq < seq:
            kept[tid] = _Survey(seq, got[:, 0].copy(), got[:, 1].copy(), at)


def _survey_behind(cat: lamina.Catalog, h: TableHandle) -> None:
    """Survey the table in the worker process (one survey per table at a time)."""
    db = cat.context.db
    key = (id(db), h.record.id)
    with _cache_lock:
        if key in _surveying:
            return
        _surveying.add(key)
        if not _workers:
            spawn = multiprocessing.get_context("spawn")
            _workers.append(ProcessPoolExecutor(max_workers=1, mp_context=spawn))
        pool = _workers[0]
    started = time.monotonic()
    job = pool.submit(_pending_in_worker, cat.url, cat.warehouse.location, h.name)

    def done(job: Future[tuple[int, list[tuple[int, int]]]]) -> None:
        try:
            seq, chunks = job.result()
            _keep(db, h.record.id, seq, chunks, started)
        except Exception:  # noqa: BLE001 - the next view starts another
            pass
        finally:
            with _cache_lock:
                _surveying.discard(key)

    job.add_done_callback(done)


def _pending(
    cat: lamina.Catalog, h: TableHandle, edges: list[int]
) -> tuple[list[int] | None, int | None]:
    """Per bucket, the chunks the compaction policy makes PENDING, and the table
    version that survey is of (None, None: not surveyed yet). A table of at most
    PENDING_MAX_SEGMENTS segments is surveyed here, once per version; a larger one in
    the worker (see :data:`PENDING_MAX_SEGMENTS`)."""
    db = cat.context.db
    seq = queries.table_seq(db, h.name)
    with _cache_lock:
        hit = _surveyed.get(db, {}).get(h.record.id)
    if hit is None or hit.seq != seq:
        n = _TOTALS.totals(db, small_rows).get(h.record.id, (0, 0, 0, 0))[0]
        if n <= PENDING_MAX_SEGMENTS:
            now = time.monotonic()
            _keep(db, h.record.id, *pending_chunks(cat, h.name), now)
            with _cache_lock:
                hit = _surveyed[db][h.record.id]
        elif hit is None or time.monotonic() - hit.at >= SURVEY_EVERY_S:
            _survey_behind(cat, h)
    if hit is None:
        return None, None
    return rules.overlaps(edges, hit.starts, hit.ends), hit.seq


#: tables with at least this many segments get their timeline grouped when the
#: server starts (the largest first, at most WARM_TABLES), not at their first view
WARM_MIN_SEGMENTS = 100_000
WARM_TABLES = 8


def warm(cat: lamina.Catalog, done: threading.Event) -> None:
    """Group the timelines of the catalog's largest tables (and total every table)
    ahead of their first view, then set ``done``: a server started on a table of a
    million segments answers its first timeline view as fast as the next. Runs on a
    background thread; a failure (the catalog unreachable) only leaves the work to
    the first view."""
    db = cat.context.db
    try:
        totals = _TOTALS.totals(db, small_rows)
        big = sorted((n, tid) for tid, (n, *_) in totals.items() if n >= WARM_MIN_SEGMENTS)
        names = queries.table_names(db, [tid for _, tid in big[::-1][:WARM_TABLES]])
        for name in names:
            props = get_table(db, name).properties
            _TIMELINES.groups(db, name, small_rows(props))
    except Exception:  # noqa: BLE001 - a warm-up only saves time; the views still work
        pass
    finally:
        done.set()


def _extent(groups: rules.Groups | None) -> Interval | None:
    """From the earliest start to the latest end of the groups holding data."""
    if groups is None:
        return None
    data = groups["segments"] > groups["tombstones"]
    if not data.any():
        return None
    return Interval.of(int(groups["start"][data].min()), int(groups["end"][data].max()))


@reads.get("/tables/{table}/timeline", response_model=TimelineInfo)
def get_timeline(
    table: str, cat: CatalogDep, interval: IntervalQ = None, zoom: Zoom | None = None
) -> TimelineInfo:
    """The table's timeline over ``interval``, cut into buckets of ``zoom`` (default:
    the finest zoom giving at most 180 buckets) and aggregated here: per bucket its
    chunks, visible version, overshadowed versions, small segments, locks and files
    with deletion vectors, and each version's cell (visible, partial, overshadowed)."""
    return timeline(cat, table, interval, zoom)


def chunk_segments(
    cat: lamina.Catalog, table: str, interval: str, history: bool, limit: int
) -> list[ChunkSegmentInfo]:
    """The segments overlapping ``interval`` (see :func:`get_chunk_segments`)."""
    h = handle_of(cat, table)
    iv = Interval.parse(interval)
    live = h.snapshot(interval=iv).segments
    visible = {s.id for s in Timeline.build(live).visible()}
    live_ids: set[str] = set()
    lineage_ids: set[str] = set()
    if history:
        every = h.snapshot(all_published=True, interval=iv).segments
        live_ids = {s.id for s in live}
        lineage_ids = hidden_by(h.lineage())
    else:
        every = [s for s in live if s.id in visible]
    every = [s for s in every if s.location is not None][:limit]
    root = cat.context.db.root.rstrip("/") + "/"
    rel = {s.id: s.location[len(root) :] for s in every if s.location}
    hidden = queries.superseded_rows(cat.context.db, h.name, set(rel.values()))

    def state(sid: str) -> str:
        if sid in visible:
            return "visible"
        if sid in live_ids:
            return "overshadowed"
        return "lineage" if sid in lineage_ids else "removed"

    every.sort(key=lambda s: (s.interval, -s.version, s.partition_id))
    return [
        ChunkSegmentInfo(
            id=s.id,
            interval=str(s.interval),
            version=s.version,
            partition=s.partition_id,
            minorVersion=s.minor_version,
            rows=s.row_count,
            bytes=s.size_bytes,
            supersededShare=(hidden.get(rel[s.id], 0) / s.row_count) if s.row_count else 0.0,
            commitId=s.commit_id,
            state=state(s.id) if history else "visible",
        )
        for s in every
    ]


@reads.get("/tables/{table}/chunkSegments", response_model=list[ChunkSegmentInfo])
def get_chunk_segments(
    table: str,
    cat: CatalogDep,
    interval: Annotated[str, Query(min_length=3, max_length=128, description="START/END.")],
    history: Annotated[
        bool, Query(description="Also overshadowed, removed and lineage-hidden segments.")
    ] = False,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
) -> list[ChunkSegmentInfo]:
    """The data segments overlapping ``interval`` that readers see (``history=true``:
    every published one, each with its state), with their share of superseded rows
    and the commit that added them; at most ``limit``."""
    return chunk_segments(cat, table, interval, history, limit)


# -- commits, locks, lineage -------------------------------------------------------------------


def commits(cat: lamina.Catalog, table: str, limit: int, before: int | None) -> CommitPage:
    h = handle_of(cat, table)
    total, rows = queries.commit_rows(cat.context.db, h.name, limit, before)
    return CommitPage(
        total=total,
        items=[
            CommitInfo(
                id=r.id,
                action=r.action,
                state=r.state,
                version=r.seq,
                txn=r.txn,
                writer=r.writer,
                startedAt=format_us(r.started_us),
                durationMs=None
                if r.completed_us is None
                else (r.completed_us - r.started_us) / 1000,
                segmentsAdded=r.segments_added,
                segmentsRemoved=r.segments_removed,
                rowsAdded=r.rows_added,
                rowsRemoved=r.rows_removed,
                reason=r.reason,
            )
            for r in rows
        ],
    )


@reads.get("/tables/{table}/commits", response_model=CommitPage)
def get_commits(
    table: str,
    cat: CatalogDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    before: Annotated[
        int | None, Query(ge=1, le=2**62, description="Only commits with smaller ids.")
    ] = None,
) -> CommitPage:
    """The table's commits, newest first: action, state, txn id, writer, segments and
    rows added and removed, duration."""
    return commits(cat, table, limit, before)


def changes(
    cat: lamina.Catalog, table: str, after: int, until: int | None, limit: int
) -> ChangeFeed:
    """The rows versions ``(after, until]`` inserted and deleted (at most ``limit`` of
    them; the counts are of all). Raises InvalidArgumentError, SnapshotNotFoundError."""
    h = handle_of(cat, table)
    until = queries.table_seq(cat.context.db, h.name) if until is None else until
    feed = cat.load_table(h.name).read_changes(after, until)
    kinds = feed.column("_change")
    inserts = int(pc.sum(pc.equal(kinds, "insert")).as_py() or 0)
    shown = feed.slice(0, limit)
    cols = [c.to_pylist() for c in shown.columns]
    return ChangeFeed(
        afterVersion=after,
        untilVersion=until,
        inserts=inserts,
        deletes=feed.num_rows - inserts,
        columns=[SqlColumn(name=f.name, type=str(f.type)) for f in shown.schema],
        rows=[[_plain(v) for v in row] for row in zip(*cols, strict=True)] if cols else [],
        truncated=feed.num_rows > limit,
    )


@reads.get("/tables/{table}/changes", response_model=ChangeFeed)
def get_changes(
    table: str,
    cat: CatalogDep,
    after: Annotated[
        int, Query(alias="afterVersion", ge=0, le=2**62, description="Changes after it.")
    ],
    until: Annotated[
        int | None,
        Query(alias="untilVersion", ge=0, le=2**62, description="Up to it (default: latest)."),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
) -> ChangeFeed:
    """The change feed between two table versions: each row a version inserted or
    deleted, with ``_change``, ``_commit_id`` and ``_commit_seq`` (the version), as
    ``t.read_changes(afterVersion, untilVersion)`` returns it."""
    return changes(cat, table, after, until, limit)


def key_index(cat: lamina.Catalog, table: str, limit: int) -> KeyIndexInfo:
    """Raises UpsertError (not an upsert table), TableNotFoundError."""
    h = handle_of(cat, table)
    spec = h.upsert_spec
    if spec is None:
        raise UpsertError(f"table {h.name!r} has no primary key: it has no key index")
    got = cat.context.keys.stats(cat.context.db, h.record, spec, cat.warehouse)
    total, chunks = queries.superseded_by_chunk(cat.context.db, h.name, limit)
    return KeyIndexInfo(
        primaryKey=list(spec.primary_key),
        version=got.seq,
        keys=got.keys,
        indexBytes=got.index_bytes,
        bytesPerKey=round(got.index_bytes / got.keys, 1) if got.keys else 0.0,
        files=got.files,
        hiddenRows=got.hidden_rows,
        filesWithVectors=got.files_with_vectors,
        loadSeconds=got.seconds,
        chunks=total,
        mostSuperseded=[
            ChunkSuperseded(
                interval=str(iv), rows=rows, superseded=hid, share=hid / rows if rows else 0.0
            )
            for iv, rows, hid in chunks
        ],
    )


@reads.get("/tables/{table}/keyIndex", response_model=KeyIndexInfo)
def get_key_index(
    table: str, cat: CatalogDep, limit: Annotated[int, Query(ge=1, le=10_000)] = 100
) -> KeyIndexInfo:
    """An upsert table's key index statistics (keys, memory, files, deletion vectors),
    and its ``limit`` most superseded chunks (rows deletion vectors hide, of those
    stored). 400 for a table without a primary key."""
    return key_index(cat, table, limit)


def locks(cat: lamina.Catalog, table: str) -> LocksInfo:
    h = handle_of(cat, table)
    held, writers, aborts = queries.lock_rows(cat.context.db, h.name)
    return LocksInfo(
        locks=[
            LockRowInfo(
                id=r.id,
                type=r.type,
                interval=str(r.interval),
                priority=r.priority,
                state=r.state,
                commitId=r.commit_id,
                holder=r.holder,
                action=r.action,
                heartbeatAgeS=r.heartbeat_age_s,
                segments=r.segments,
            )
            for r in held
        ],
        writers=[
            WriterInfo(
                commitId=w.commit_id,
                action=w.action,
                state=w.state,
                owner=w.owner,
                ageS=w.age_s,
                heartbeatAgeS=w.heartbeat_age_s,
            )
            for w in writers
        ],
        recentAborts=[
            AbortInfo(
                commitId=a.commit_id,
                action=a.action,
                owner=a.owner,
                endedAt=format_us(a.ended_us),
                kind=cast(Any, rules.abort_kind(a.reason)),
                reason=a.reason,
            )
            for a in aborts
        ],
    )


@reads.get("/tables/{table}/locks", response_model=LocksInfo)
def get_locks(table: str, cat: CatalogDep) -> LocksInfo:
    """Task locks (held, waiting, revoked) with their holder's heartbeat age, the
    writers in flight (open commits), and the recent conflicts, lock revocations and
    other aborts, each with its reason."""
    return locks(cat, table)


def revert_preview(cat: lamina.Catalog, table: str, entry_id: str) -> RevertPreview:
    h = handle_of(cat, table)
    entry = next((e for e in h.lineage() if e.id == entry_id), None)
    if entry is None:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND,
            f"no lineage entry {entry_id!r} in table {h.name}; GET /tables/{h.name}/lineage",
        )
    rows = {s.id: s.row_count for s in h.snapshot(all_published=True).segments}
    rows_from = sum(rows.get(i, 0) for i in entry.segments_from)
    rows_to = sum(rows.get(i, 0) for i in entry.segments_to)
    if entry.state == LineageState.COMPLETED:
        now, after = rows_to, rows_from
        shown, hidden = list(entry.segments_from), list(entry.segments_to)
        text = (
            f"readers will see the {len(shown)} segments the entry replaced ({rows_from} rows) "
            f"instead of its {len(hidden)} new ones ({rows_to} rows)"
        )
    elif entry.state == LineageState.IN_PROGRESS:
        now = after = rows_from
        shown, hidden = [], list(entry.segments_to)
        text = (
            f"readers keep seeing the same {rows_from} rows; the entry's {len(hidden)} "
            "unpublished segments are dropped (needs forceRevert)"
        )
    else:
        now = after = rows_from
        shown, hidden = [], []
        text = "the entry is reverted already: nothing changes"
    return RevertPreview(
        segmentLineageEntryId=entry.id,
        state=str(entry.state),
        rowsNow=now,
        rowsAfter=after,
        segmentsShown=shown,
        segmentsHidden=hidden,
        summary=text,
    )


@reads.get("/tables/{table}/revertPreview", response_model=RevertPreview)
def get_revert_preview(
    table: str,
    cat: CatalogDep,
    entry_id: Annotated[str, Query(alias="segmentLineageEntryId", min_length=1, max_length=128)],
) -> RevertPreview:
    """What readers will see after revertReplaceSegments of the entry: rows now and
    after, the segments shown again and hidden."""
    return revert_preview(cat, table, entry_id)


# -- SQL -------------------------------------------------------------------------------------


def _plain(v: Any) -> Any:
    """A result value as JSON can carry it."""
    if v is None or isinstance(v, bool | int | str):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else str(v)
    if isinstance(v, dt.datetime | dt.date | dt.time):
        return v.isoformat()
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_plain(x) for x in v]
    if isinstance(v, decimal.Decimal | dt.timedelta):
        return str(v)
    return str(v)


def run_sql(cat: lamina.Catalog, query: str, max_rows: int, timeout_s: float) -> SqlResult:
    """A read-only query (see :func:`post_sql`). Raises SqlError."""
    began = time.perf_counter()

    def fetch(rel: Any) -> Any:
        return rel.limit(max_rows + 1).to_arrow_table()

    out = cat.sql_engine().read_only(query, fetch, timeout_s, [cat.warehouse.root])
    truncated = out.num_rows > max_rows
    out = out.slice(0, max_rows)
    cols = [c.to_pylist() for c in out.columns]
    return SqlResult(
        columns=[SqlColumn(name=f.name, type=str(f.type)) for f in out.schema],
        rows=[[_plain(v) for v in row] for row in zip(*cols, strict=True)] if cols else [],
        truncated=truncated,
        elapsedMs=(time.perf_counter() - began) * 1000,
    )


@actions.post("/sql", response_model=SqlResult)
def post_sql(body: SqlRequest, cat: CatalogDep) -> SqlResult:
    """One read-only SELECT over lamina's tables (DuckDB SQL, as ``cat.sql``), at most
    ``maxRows`` rows, stopped after ``timeoutS``. Anything else is refused with 400:
    other statements (COPY, ATTACH, INSTALL, LOAD, SET…), table functions that read
    files (read_text, read_csv…), any file outside the warehouse."""
    return run_sql(cat, body.query, body.max_rows, body.timeout_s)
