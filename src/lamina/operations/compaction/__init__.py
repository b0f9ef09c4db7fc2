"""Compaction of a table's segments (seed 001): minor and major.

A *minor* compaction merges runs of adjacent small segments of a chunk into fewer
segments at the same major version and a higher minor version (one atomic update
group per run, see :mod:`lamina.core.compaction`). It reads only its input segments
and publishes as one commit of kind COMPACT: appends into the same chunks carry on
meanwhile and never conflict with it; readers see either the inputs or the outputs,
never both.

A *major* compaction rewrites whole chunks at a new version under a REPLACE lock
(priority 25 by default): optionally to another segment granularity, sorted, and
rolled up. It reads the rows visible when it took its lock; segments appended
meanwhile under APPEND locks (or optimistically) are carried onto its version.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lamina.core.args import names, seconds, whole_number
from lamina.core.autocompact import (
    DEFAULT_NICE,
    Policy,
    check_sort_by,
    fingerprint_of,
    nice_of,
    policy_of,
    superseded_pct_of,
    to_age_out,
    to_purge,
    vector_age_of,
)
from lamina.core.compaction import MinorRun, minor_run, plan_minor
from lamina.core.interval import Granularity, Interval
from lamina.core.locks import PRIORITY_COMPACTION, LockType
from lamina.core.model import (
    Commit,
    CommitAction,
    CompactedRun,
    NewSegment,
    RowMap,
)
from lamina.core.plans import MinorCompactionPlan
from lamina.core.properties import ROWS_CHANGED_SEQ
from lamina.core.rollup import Rollup, check_query_granularity
from lamina.core.segment import Segment
from lamina.engines.files import parse_size
from lamina.engines.spark import get_spark, spark_rewrite
from lamina.engines.spark_schema import spark_problem
from lamina.errors import (
    CommitConflictError,
    CompactionError,
    InvalidGranularityError,
    SchemaError,
    UnsupportedTypeError,
    UpsertError,
    WarehouseError,
)
from lamina.failpoints import failpoint
from lamina.io.arrow import time_values_us
from lamina.io.background import run_niced
from lamina.io.reader import padded
from lamina.io.rollup import roll_up
from lamina.io.writer import ChunkPart, pieces, write_parts
from lamina.meta import commits
from lamina.meta.segments import rows_by_id
from lamina.meta.tables import now_us
from lamina.operations import steps as tw
from lamina.operations.compaction.scope import candidates
from lamina.operations.compaction.span import major_interval
from lamina.operations.evolve import added
from lamina.operations.handle import TableHandle
from lamina.operations.transaction import Rewrite
from lamina.operations.upsert.read import latest_records
from lamina.write import WriteTransaction

if TYPE_CHECKING:
    from sqlalchemy import Connection


def compact(
    table: TableHandle,
    interval: Interval | str | tuple[Any, Any] | None,
    mode: str,
    target_rows_per_segment: int | None,
    *,
    segment_granularity: str | None,
    sort_by: list[str] | None,
    rollup: dict[str, Any] | None,
    priority: int | None,
    wait_s: float | None,
    segments: list[str] | None,
    engine: str,
) -> Commit | None:
    """``t.compact(...)``: check the request, then a minor or a major compaction.
    Raises CompactionError, CommitConflictError, LockTimeoutError, LockRevokedError,
    InvalidIntervalError."""
    if engine not in ENGINES:
        raise CompactionError(f"engine={engine!r}: use 'auto', 'local' or 'spark'")
    if mode == "major" and engine == "spark":
        raise CompactionError(
            "engine='spark' is for minor compactions; a major one rewrites its chunks with "
            "pyarrow (leave engine as 'auto' or 'local')"
        )
    if mode not in ("minor", "major"):
        raise CompactionError(f"mode={mode!r}: use 'minor' or 'major'")
    if engine == "spark":  # before any lock or commit
        spark_reaches(table.ctx.warehouse.local)
    if segments is not None:
        segments = names(segments, "segments", CompactionError, "segment ids")
    if segments is not None and (mode != "minor" or not segments):
        raise CompactionError("segments= names the inputs of a minor compaction (>= 1 id)")
    if sort_by is not None:
        sort_by = names(sort_by, "sort_by", CompactionError, "columns")
    if mode == "minor" and (segment_granularity or sort_by or rollup):
        raise CompactionError(
            "segment_granularity, sort_by and rollup rewrite whole chunks: use mode='major'"
        )
    prio = (
        PRIORITY_COMPACTION
        if priority is None
        else whole_number(priority, "priority", CompactionError)
    )
    if wait_s is not None:
        wait_s = seconds(wait_s, "wait_s", CompactionError)
    target = target_rows(table, target_rows_per_segment)
    # with the schema the table has now: a handle loaded before t.add_columns would
    # rewrite files without the columns added since
    given = table
    now, changed = table.reloaded()
    failpoint("compaction.reloaded")
    if changed:
        table = TableHandle(table.ctx, now)
    if mode == "major":
        iv = None if interval is None else Interval.coerce(interval)
        done = compact_major(table, iv, segment_granularity, sort_by, rollup, target, prio, wait_s)
        if done is not None and "add_columns" in done.metadata:  # a rollup's count column
            given.record = table.record
        return done
    if segments is not None:
        if interval is not None:
            raise CompactionError("pass segments= or interval=, not both")
        runs = chosen_runs(table, segments, target)
    else:  # planning only reads (no catalog lock held): it yields to ingestion too
        iv = tw.aligned(table, interval)
        runs = run_niced(lambda: plan(table, iv, target), nice_of(table.properties))
    state = Policy(target).state
    return compact_minor(table, runs, prio, wait_s, state, engine, nice_of(table.properties))


def target_rows(table: TableHandle, given: int | None) -> int:
    """The target rows per compacted segment: ``given``, else the table's policy's
    (``compaction.target_rows_per_segment``, else its target for writes).
    Raises CompactionError."""
    if given is None:
        return policy_of(table.properties, table.target_rows_per_segment).target_rows
    if isinstance(given, bool) or not isinstance(given, int) or given < 1:
        raise CompactionError(f"target_rows_per_segment={given!r}: pass a whole number >= 1")
    return given


def plan(
    table: TableHandle, interval: Interval | None, target: int, small: int | None = None
) -> list[MinorRun]:
    """The runs a minor compaction of ``interval`` (None: the whole table) would merge
    (on an upsert table, also rewrite: :func:`purge`)."""
    segs = candidates(table, interval)[1]
    stale, kept = purge(table, segs)
    return plan_minor(segs, target, small, stale, kept)


def purge(table: TableHandle, segs: list[Segment]) -> tuple[frozenset[str], dict[str, int]]:
    """An upsert table's segments among ``segs`` to rewrite without their superseded
    records (:func:`superseded`), and the records each segment with superseded ones
    keeps (both empty for other tables). Raises PropertyError."""
    found = superseded(table, segs)
    return found.purge, found.kept


@dataclass(frozen=True)
class Superseded:
    """What an upsert table's deletion vectors supersede in some of its segments."""

    #: segments to rewrite without their superseded records
    purge: frozenset[str] = frozenset()
    #: those of :attr:`purge` only there for their age (under the percent)
    aged: frozenset[str] = frozenset()
    #: records each segment with superseded ones keeps
    kept: dict[str, int] = field(default_factory=dict)


def superseded(table: TableHandle, segs: list[Segment]) -> Superseded:
    """An upsert table's segments among ``segs`` whose deletion vectors supersede
    ``compaction.max_superseded_percent`` of their records or more, or, with
    ``compaction.max_vector_age`` set, a record superseded by a commit that completed
    that long ago or more (:func:`lamina.core.autocompact.to_age_out`); empty for
    other tables. Raises PropertyError."""
    rows_changed = ROWS_CHANGED_SEQ in table.record.properties  # a plain table's deletes
    if not (table.is_upsert or rows_changed) or not segs:
        return Superseded()
    from lamina.meta import deletes  # loads pyroaring

    props = table.properties
    max_age = vector_age_of(props)
    root = table.ctx.db.root + "/"
    by_path = {str(s.location).removeprefix(root): s.id for s in segs if s.location}
    tid = table.record.id

    def read(conn: Connection) -> tuple[dict[str, deletes.Vector], dict[str, int]]:
        found = deletes.latest(conn, tid, list(by_path))
        if max_age is None:
            return found, {}
        stale = [p for p, v in found.items() if v.superseded]
        return found, deletes.oldest_superseding(conn, tid, stale)

    found, since = table.ctx.db.read(read)
    counts = {by_path[p]: len(v.superseded) for p, v in found.items() if p in by_path}
    kept = {s.id: s.row_count - counts[s.id] for s in segs if counts.get(s.id)}
    by_pct = to_purge(segs, counts, superseded_pct_of(props))
    oldest = {by_path[p]: at for p, at in since.items() if p in by_path and counts.get(by_path[p])}
    by_age = to_age_out(oldest, max_age, now_us()) - by_pct
    return Superseded(by_pct | by_age, by_age, kept)


def chosen_runs(table: TableHandle, ids: list[str], target: int) -> list[MinorRun]:
    """The runs merging exactly the named segments, one per chunk and version (as
    Druid checks a compaction's segment locks interval by interval); each run must
    obey the seed's three rules (see :func:`lamina.core.compaction.check_inputs`).
    Raises CompactionError."""
    _, visible = candidates(table, None)
    by_id = {s.id: s for s in visible}
    unknown = [i for i in ids if i not in by_id]
    if unknown:
        raise CompactionError(
            f"segment {unknown[0]!r} is not a visible segment this compaction may take "
            "(unknown, overshadowed, a tombstone or named by a lineage entry); "
            "t.segments() lists the visible ones"
        )
    inputs = [by_id[i] for i in dict.fromkeys(ids)]
    kept = purge(table, inputs)[1]
    groups: dict[tuple[Interval, int], list[Segment]] = {}
    for s in inputs:
        groups.setdefault((s.interval, s.version), []).append(s)
    return [
        minor_run(group, [s for s in visible if (s.interval, s.version) == key], target, kept)
        for key, group in sorted(groups.items())
    ]


def _merged(table: TableHandle, run: MinorRun) -> pa.Table:
    """The rows of a run's inputs, in root order, read in the calling thread."""
    wh = table.ctx.warehouse
    parts = []
    for seg in run.inputs:
        assert seg.location is not None
        try:
            with wh.fs.open_input_file(seg.location) as f:
                parts.append(pq.ParquetFile(f, pre_buffer=False).read(use_threads=False))
        except FileNotFoundError:
            _gone(table, seg.id, seg.location)
    return padded(pa.concat_tables(parts, promote_options="permissive"), table.schema)


def _gone(table: TableHandle, segment_id: str, location: str) -> NoReturn:
    """Raise for an input whose file is gone: CommitConflictError when its segment was
    removed meanwhile (retention may delete its file), WarehouseError when it is still
    live (the file was lost: no retry helps)."""

    rows = table.ctx.db.read(lambda conn: rows_by_id(conn, table.record.id, [segment_id]))
    if rows and rows[0].removed_seq is None:
        raise WarehouseError(
            f"the file of live segment {segment_id} is missing ({location}); nothing was "
            "published — restore the file, or delete the segment (t.delete_segments) "
            "and load its rows again"
        )
    raise CommitConflictError(
        f"input segment {segment_id} was removed meanwhile (its file is gone: a lineage "
        "cleanup or retention); nothing was published — compact again"
    )


#: a run of more input bytes than this is compacted with Spark when ``engine="auto"``
#: (``$LAMINA_LOCAL_MAX_BYTES``, as for ingests)
LOCAL_MAX_ENV = "LAMINA_LOCAL_MAX_BYTES"
DEFAULT_LOCAL_MAX = "2GB"


ENGINES = ("auto", "local", "spark")


def spark_reaches(local: bool) -> None:
    """Raises CompactionError unless Spark's own Parquet reader and writer reach the
    warehouse: a local one (an object store needs Hadoop's S3A, and then not with the
    endpoint a warehouse URI names)."""
    if not local:
        raise CompactionError(
            "Spark compacts a table on a local warehouse only (its own Parquet reader and "
            "writer would need Hadoop's S3A for an object store): use engine='local', "
            "which streams the run through this process"
        )


def engine_of(
    run: MinorRun, engine: str, schema: pa.Schema | None = None, local: bool = True
) -> str:
    """``local`` or ``spark`` for a run (``engine`` checked by :func:`compact`): with
    ``auto``, Spark for a run too big for this process, unless the table has a column
    Spark cannot write back as it is (``schema``), or the warehouse is not ``local``
    (Spark's own Parquet reader and writer reach an object store only through Hadoop's
    S3A, and not with the endpoint a warehouse URI names). Raises UnsupportedTypeError,
    CompactionError for ``spark`` then."""

    if not local:
        if engine == "spark":
            spark_reaches(local)
        return "local"
    why = None if schema is None or engine == "local" else spark_problem(schema, exact=True)
    if why is not None:
        if engine == "spark":
            raise UnsupportedTypeError(
                f"Spark cannot compact this table: {why}; use engine='local'"
            )
        return "local"
    if engine != "auto":
        return engine

    limit = parse_size(os.environ.get(LOCAL_MAX_ENV) or DEFAULT_LOCAL_MAX, f"${LOCAL_MAX_ENV}")
    return "spark" if sum(s.size_bytes for s in run.inputs) > limit else "local"


def _write_run(
    table: TableHandle,
    commit_rel: str,
    run: MinorRun,
    engine: str,
    nice: int,
    drop: dict[str, np.ndarray] | None = None,
) -> CompactedRun:
    """Rewrite one run: with Spark, or here in a thread ``nice`` below normal priority
    (always here for an upsert table: ``drop``, see :func:`_rewrite`)."""
    maps: tuple[RowMap, ...] = ()
    local = table.ctx.warehouse.local
    if drop is None and engine_of(run, engine, table.schema, local) == "spark":
        rel = f"{commit_rel}/run-{run.root_range[0]}-{run.chunk.start}"
        paths = [s.location for s in run.inputs if s.location is not None]
        wrote = spark_rewrite(
            get_spark(), table.record, table.ctx.warehouse, paths, run.outputs, rel
        )
        files = [NewSegment(run.chunk, loc, n, size, lo, hi) for loc, n, size, lo, hi in wrote]
    else:
        files, maps = run_niced(lambda: _rewrite(table, commit_rel, run, drop), nice)
    return CompactedRun(
        chunk=run.chunk,
        version=run.version,
        inputs=tuple(s.id for s in run.inputs),
        root_range=run.root_range,
        minor_version=run.minor_version,
        num_core_partitions=max(s.num_core_partitions for s in run.inputs),
        files=tuple(files),
        row_maps=maps,
    )


def _rewrite(
    table: TableHandle, commit_rel: str, run: MinorRun, drop: dict[str, np.ndarray] | None = None
) -> tuple[list[NewSegment], tuple[RowMap, ...]]:
    """Merge a run's inputs and write them as ``run.outputs`` files (pyarrow). Upsert
    tables (``drop``: per input path, the rows no longer any key's latest): those rows
    are left out, and each output's :class:`RowMap` says where its rows came from."""
    data = _merged(table, run)
    maps: tuple[RowMap, ...] = ()
    source = row = np.zeros(0, np.int64)
    if drop is not None:
        paths = [str(s.location) for s in run.inputs]
        counts = [s.row_count for s in run.inputs]
        source = np.repeat(np.arange(len(paths)), counts)
        row = np.concatenate([np.arange(n) for n in counts]) if counts else source
        keep = np.ones(len(source), bool)
        for i, path in enumerate(paths):
            if path in drop:
                keep[np.flatnonzero(source == i)[drop[path]]] = False
        data, source, row = data.filter(pa.array(keep)), source[keep], row[keep]
    col = table.time_column
    times = time_values_us(data.column(col)) if col is not None and data.num_rows else None
    size = -(-data.num_rows // run.outputs) if data.num_rows else 1
    cuts = pieces(slice(0, data.num_rows), size)
    parts = [ChunkPart(run.chunk, data, r, times) for r in cuts]
    files = write_parts(table.ctx.warehouse, commit_rel, parts)
    if drop is not None:
        root = table.ctx.db.root + "/"
        sources = tuple(str(s.location).removeprefix(root) for s in run.inputs)
        maps = tuple(RowMap(sources, source[c], row[c]) for c in cuts)
    return files, maps


def compact_minor(
    table: TableHandle,
    runs: list[MinorRun],
    priority: int = PRIORITY_COMPACTION,
    wait_s: float | None = None,
    state: dict[str, Any] | None = None,
    engine: str = "auto",
    nice: int = DEFAULT_NICE,
) -> Commit | None:
    """Write and publish ``runs`` as one COMPACT commit (None when there are none),
    holding a SEGMENT lock on each run's inputs (``priority``; waiting up to
    ``wait_s``, default the catalog's ``writer_wait_s``). Local rewrites run ``nice``
    below normal CPU priority; catalog transactions never do (a starved thread holding
    the catalog's write lock would hold up every writer). Raises CommitConflictError
    when an input was removed or replaced meanwhile, LockTimeoutError,
    LockRevokedError (a higher-priority REPLACE or EXCLUSIVE lock took the chunk)."""
    failpoint("compaction.minor.begin", table=table, runs=runs)
    if not runs:
        return None
    ctx = table.ctx
    wait = ctx.writer_wait_s if wait_s is None else wait_s
    meta: dict[str, Any] = {"compaction": "minor", "runs": len(runs)}
    if state is not None:  # the compaction state its segments record (core.autocompact)
        meta["state"] = state
        meta["fingerprint"] = fingerprint_of(state)
    # opened INFLIGHT with its SEGMENT locks: the files follow at once (on SQLite one
    # catalog transaction opens the commit and takes the locks)
    asked = [(LockType.SEGMENT, r.chunk, priority, frozenset(s.id for s in r.inputs)) for r in runs]
    with WriteTransaction(
        ctx, table.record, CommitAction.COMPACT, meta, inflight=True, locks_at_open=(asked, wait)
    ) as w:
        # the commit is open and holds its SEGMENT locks; nothing read or written yet
        failpoint("compaction.minor.opened", table=table, runs=runs)
        drop = _superseded(table, runs)
        # an upsert table's superseded rows are read: the rewrite leaves them out
        failpoint("compaction.minor.superseded_read", table=table, runs=runs)
        done_runs = []
        for run in runs:
            failpoint("compaction.minor.before_write_run", table=table, run=run)
            done_runs.append(_write_run(table, w.dir, run, engine, nice, drop))
        done = tuple(done_runs)
        inputs = tuple(i for r in done for i in r.inputs)
        return w.publish(MinorCompactionPlan(runs=done, remove_ids=inputs))


def _superseded(table: TableHandle, runs: list[MinorRun]) -> dict[str, np.ndarray] | None:
    """Upsert tables: per input path, the rows that are no longer their key's latest
    record (a compaction leaves them out; live tombstones stay, still deciding later
    comparisons); a plain table's inputs: the rows row-level deletes hid (None when
    none has any: read every time, the handle may predate the table's first)."""
    from lamina.meta import deletes  # loads pyroaring

    ctx, tid = table.ctx, table.record.id
    root = ctx.db.root + "/"
    paths = {str(s.location): str(s.location).removeprefix(root) for r in runs for s in r.inputs}

    found = ctx.db.read(lambda conn: deletes.latest(conn, tid, list(paths.values())))
    if not table.is_upsert and not any(v.hidden for v in found.values()):
        return None
    return {
        path: deletes.positions(v.superseded)
        for path, rel in paths.items()
        if (v := found.get(rel)) is not None and v.superseded
    }


def compact_major(
    table: TableHandle,
    interval: Interval | None,
    segment_granularity: str | None,
    sort_by: list[str] | None,
    rollup: dict[str, Any] | None,
    target_rows: int,
    priority: int = PRIORITY_COMPACTION,
    wait_s: float | None = None,
) -> Commit | None:
    """Rewrite the chunks of ``interval`` (default: all data) at a new version, under a
    REPLACE lock. On an upsert table, the records that are their key's latest (live
    tombstones too) are rewritten, and at publish each copy shows exactly when the
    record it copies still would (an upsert may have superseded it meanwhile). Raises
    CompactionError,
    UpsertError (a rollup of an upsert table), LockTimeoutError, LockRevokedError,
    CommitConflictError."""
    try:
        gran = (
            table.granularity
            if segment_granularity is None
            else Granularity.parse(segment_granularity)
        )
    except InvalidGranularityError as exc:
        raise CompactionError(f"segment_granularity: {exc}") from None

    check_sort_by(table.schema, sort_by or ())
    spec = None if rollup is None else Rollup.parse(rollup, table.schema, table.time_column)
    if spec is not None:
        check_query_granularity(spec.query_granularity, gran)
    if spec is not None and table.is_upsert:
        raise UpsertError(
            f"rollup merges the records of many keys into one row: upsert table "
            f"{table.name!r} keeps one record per key; compact it without rollup"
        )
    columns = () if spec is None else _count_columns(table, spec)
    # what the rolled-up rows are written as: with the count columns it adds
    target = table
    if columns:
        schema = pa.schema([*table.schema, *columns])
        target = TableHandle(table.ctx, table.record.with_schema(schema))
    iv = major_interval(table, interval, gran)
    # the interval is sized from a read of the catalog; no lock is held yet
    failpoint("compaction.major.sized", table=table, interval=iv)
    if iv is None:
        return None
    meta: dict[str, Any] = {"compaction": "major", "granularity": gran.value}
    done = Policy(
        target_rows,
        segment_granularity=None if gran is table.granularity else gran,
        sort_by=tuple(sort_by or ()),
        rollup=rollup,
    )
    meta["state"], meta["fingerprint"] = done.state, done.fingerprint
    if sort_by:
        meta["sort_by"] = list(sort_by)
    if rollup is not None:
        meta["rollup"] = rollup
    upsert = table.upsert_spec
    with Rewrite(  # an upsert table's rewritten records are resolved at publish
        target,
        upsert,
        meta,
        lock="REPLACE",
        interval=iv,
        priority=priority,
        wait_s=wait_s,
        columns=columns,
    ) as tx:
        base = tx.base_seq
        at_base = commits.history(table.ctx.db, table.name, seq=base) if base else []
        as_of = at_base[0].seq if at_base else None
        if as_of is None:
            data = table.schema.empty_table()
        elif upsert is not None:  # each key's latest record, live tombstones too
            data = latest_records(table, as_of, iv)
        else:
            data = table.rows(as_of, interval=iv)
        failpoint("compaction.major.read", table=table)
        held = _held_chunks(table, as_of, iv, gran)
        if held is not None and not held and not data.num_rows:
            tx.abort()  # a concurrent write emptied the interval before the base
            return None
        # read at the base: a column added since the table was loaded is a conflict;
        # a count column added here reads as nulls (one raw row each)
        data = padded(data, target.schema)
        if spec is not None:
            data = roll_up(data, spec, table.time_column)
        if sort_by:
            data = data.sort_by([(c, "ascending") for c in sort_by])
        elif table.time_column is not None:
            data = data.sort_by([(table.time_column, "ascending")])
        tx.rewrite(data, iv, (gran, target_rows), held)
    if columns and tx.commit_result is not None:  # the handle knows the columns added
        table.record = table.reloaded()[0]
    return tx.commit_result


def _count_columns(table: TableHandle, spec: Rollup) -> tuple[pa.Field, ...]:
    """The columns a rollup adds (its count metrics the table lacks), checked as
    ``t.add_columns`` checks columns. Raises CompactionError."""
    if not spec.added:
        return ()
    try:
        schema, _ = added(table.record, spec.added_fields())
    except (SchemaError, UpsertError) as exc:
        raise CompactionError(f"the rollup's count column cannot be added: {exc}") from None
    return tuple(schema)[len(table.schema) :]


def _held_chunks(
    table: TableHandle, as_of: int | None, iv: Interval, gran: Granularity
) -> set[Interval] | None:
    """The ``gran`` chunks of ``iv`` that segments with data show in at ``as_of``: a
    major compaction rewrites those, and leaves the empty ones be (a sparse HOUR table
    got a tombstone per empty hour). A chunk cut finer is held whole: its hours without
    rows get tombstones, so its old segment ends overshadowed whole. None: every chunk
    (a table without time)."""
    if table.time_column is None or as_of is None:
        return None if table.time_column is None else set()
    out: set[Interval] = set()
    for s in table.snapshot(as_of, interval=iv).segments:
        part = s.interval.intersection(iv) if s.location is not None else None
        if part is not None:
            out.update(
                gran.chunks(Interval.of(gran.floor(part.start), gran.chunk(part.end - 1).end))
            )
    return out


def copies_without(
    table: TableHandle,
    where: str,
    visible: list[Segment],
    drop: dict[str, np.ndarray],
    alone: set[Interval] | frozenset[Interval] = frozenset(),
) -> tuple[CompactedRun, ...]:
    """The runs a copy-on-write upsert installs: each segment among ``visible`` (those
    a compaction may take) holding rows ``drop`` names (by segment id) rewritten under
    ``where`` without them nor its superseded records, merged with the small segments
    beside it as a minor compaction would merge them (so that a table streamed in small
    batches keeps few files) — but in the chunks ``alone`` (where a replace runs: its
    rows read at its base must not be merged with rows appended since), each on its own;
    one file per run, each with its :class:`RowMap`."""
    hit = {s.id for s in visible if s.id in drop}
    touched = {(s.interval, s.version) for s in visible if s.id in hit}
    scope = [s for s in visible if (s.interval, s.version) in touched]
    kept = {s.id: s.row_count - len(drop[s.id]) for s in scope if s.id in hit}
    merged = [s for s in scope if s.interval not in alone]
    runs = [
        run
        for run in plan_minor(merged, table.target_rows_per_segment, None, hit, kept)
        if any(s.id in hit for s in run.inputs)
    ]
    solo = [s for s in scope if s.interval in alone]
    for key in {(s.interval, s.version, s.root_range) for s in solo if s.id in hit}:
        unit = [s for s in solo if (s.interval, s.version, s.root_range) == key]
        runs.append(minor_run(unit, [s for s in solo if (s.interval, s.version) == key[:2]], 1))
    # one file per run: the key index moves each input's rows into one file
    runs = [replace(run, outputs=1) for run in runs]
    gone = _superseded(table, runs) or {}
    by_id = {s.id: str(s.location) for s in scope}
    for sid, rows in drop.items():
        if sid in by_id:
            path = by_id[sid]
            gone[path] = np.union1d(gone.get(path, np.zeros(0, np.int64)), rows)
    if len(runs) < 2:
        return tuple(_write_run(table, where, run, "local", 0, gone) for run in runs)
    from concurrent.futures import ThreadPoolExecutor  # reading, writing release the GIL

    with ThreadPoolExecutor(min(len(runs), os.cpu_count() or 1, 8)) as pool:
        return tuple(pool.map(lambda run: _write_run(table, where, run, "local", 0, gone), runs))
