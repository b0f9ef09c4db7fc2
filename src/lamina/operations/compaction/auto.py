"""Auto-compaction: each chunk's status under the table's compaction policy
(``compaction.*`` properties; rules in :mod:`lamina.core.autocompact`), and the minor
and major compactions (:mod:`lamina.operations.compaction`) of the chunks it makes PENDING."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lamina.core.autocompact import (
    ChunkStatus,
    Policy,
    check_policy,
    in_the_way,
    policy_of,
    skip_locked,
    statuses,
)
from lamina.core.compaction import plan_minor
from lamina.core.interval import Interval
from lamina.core.locks import PRIORITY_COMPACTION
from lamina.core.model import Commit
from lamina.core.segment import Segment
from lamina.errors import (
    CommitConflictError,
    CompactionError,
    LockRevokedError,
    LockTimeoutError,
    WarehouseError,
)
from lamina.operations.compaction import compact_major, compact_minor, superseded
from lamina.operations.compaction.scope import named_chunks, named_ids, visible_data

if TYPE_CHECKING:
    from lamina.operations.handle import TableHandle


def policy(table: TableHandle) -> Policy:
    """The table's compaction policy. Raises PropertyError, CompactionError."""
    got = policy_of(table.properties, table.target_rows_per_segment)
    got = dataclasses.replace(got, chunk_granularity=got.segment_granularity)
    if got.segment_granularity is table.granularity:
        got = dataclasses.replace(got, segment_granularity=None)
    check_policy(got, table.schema, table.time_column, table.granularity)
    return got


@dataclass(frozen=True)
class _Survey:
    """What auto-compaction reads of a table, once: its policy, each chunk's status,
    the segments a minor compaction may take, the chunks lineage entries hold."""

    policy: Policy
    statuses: list[ChunkStatus]
    candidates: list[Segment]
    held: set[Interval]
    purge: frozenset[str]
    kept: dict[str, int]  # rows a segment keeps, when fewer than it holds (upserts)
    locked: list[tuple[Interval, int, bool]]  # granted task locks: interval, priority, APPEND


def _survey(table: TableHandle, superseded_only: bool = False) -> _Survey:
    """``superseded_only``: only the chunks holding segments to rewrite without their
    superseded records are decided as auto-compaction decides them (the others may not
    be: the table's compaction commits are not read), and nothing more is read when
    there are none."""
    pol = policy(table)
    named = named_ids(table)
    _, segs, partial, last = visible_data(table, None, named)  # tombstones count too
    found_stale = superseded(table, segs)
    stale, kept = found_stale.purge, found_stale.kept
    if superseded_only and not stale:
        return _Survey(pol, [], segs, set(), stale, kept, [])
    compacted = {} if superseded_only else {
        c.id: c.metadata.get("state") or {"fingerprint": c.metadata.get("fingerprint")}
        for c in table.history()
        if c.state == "COMPLETED" and c.metadata.get("compaction")
    }  # fmt: skip
    held = named_chunks(table, named)
    ends = [c.end for c in held] + ([] if last is None else [last])  # held too
    newest = max(ends) if ends else None
    found = statuses(segs, compacted, pol, stale, newest, partial, kept, found_stale.aged)
    seen = {st.chunk for st in found}
    why = "a lineage entry names its segments (a push in progress or still revertible)"
    found += [ChunkStatus(c, "SKIPPED", "none", why) for c in held - seen]
    granted = [
        (lk.interval, lk.priority, lk.type == "APPEND")
        for lk in table.locks()
        if lk.state == "GRANTED"
    ]
    found = skip_locked(found, granted, PRIORITY_COMPACTION)
    found.sort(key=lambda st: (st.chunk.end, st.chunk.start), reverse=True)
    return _Survey(pol, found, segs, held, stale, kept, granted)


def auto_status(table: TableHandle) -> list[ChunkStatus]:
    """Every chunk's compaction status under the table's policy, newest first."""
    return _survey(table).statuses


@dataclass(frozen=True)
class AutoResult:
    """What auto-compaction did with one chunk: its status, and the commit or the
    error that stopped it (a conflict or a lock timeout: retried next run)."""

    table: str
    status: ChunkStatus
    commit: Commit | None = None
    error: str | None = None


def compact_auto(table: TableHandle, dry_run: bool = False) -> list[AutoResult]:
    """Compact the chunks the policy makes PENDING: one minor compaction of all
    minor ones, then a major compaction per interval (newest first)."""
    survey = _survey(table)
    pol, found = survey.policy, survey.statuses
    if dry_run:
        return [AutoResult(table.name, st) for st in found]
    out: list[AutoResult] = []
    minor = [st for st in found if st.action == "minor"]
    if minor:
        chunks = {st.chunk for st in minor}
        segs = [s for s in survey.candidates if s.interval in chunks]
        runs = plan_minor(segs, pol.target_rows, pol.small, survey.purge, survey.kept)
        state = Policy(pol.target_rows).state
        commit, error = _attempt(lambda: compact_minor(table, runs, state=state, nice=pol.nice))
        if error is None or len(chunks) == 1:
            out += [AutoResult(table.name, st, commit, error) for st in minor]
        else:  # one chunk changed meanwhile: the others go on, a commit each (Druid's
            for st in minor:  # task per interval), rather than wait for the next run
                mine = [r for r in runs if r.chunk == st.chunk]
                done_, err = _attempt(
                    lambda mine=mine: compact_minor(  # type: ignore[misc]
                        table, mine, state=state, nice=pol.nice
                    )
                )
                out.append(AutoResult(table.name, st, done_, err))
    gran = pol.segment_granularity or table.granularity
    done: set[Interval] = set()
    upserts = table.is_upsert
    for st in (st for st in found if st.action == "major"):
        if upserts and pol.rollup is not None:
            why = "skipped: the policy rolls up, and an upsert table keeps one record per key"
            out.append(AutoResult(table.name, st, None, why))
            continue
        iv = (
            st.chunk
            if table.time_column is None
            else Interval.of(gran.floor(st.chunk.start), gran.chunk(st.chunk.end - 1).end)
        )
        busy = [lk[1] for lk in survey.locked if in_the_way(lk, iv, "major", PRIORITY_COMPACTION)]
        if busy:  # the interval reaches past the chunk, into a locked one
            why = f"skipped: a task lock of priority {max(busy)} holds part of {iv}"
            out.append(AutoResult(table.name, st, None, why))
            continue
        if any(c.overlaps(iv) for c in survey.held):
            why = "skipped: a lineage entry names segments there (compacted once it settles)"
            out.append(AutoResult(table.name, st, None, why))
            continue
        if iv in done:
            out.append(AutoResult(table.name, st, out[-1].commit, out[-1].error))
            continue
        done.add(iv)
        commit, error = _attempt(
            lambda iv=iv: compact_major(  # type: ignore[misc]
                table,
                iv,
                None if pol.segment_granularity is None else pol.segment_granularity.value,
                list(pol.sort_by) or None,
                None if pol.rollup is None else dict(pol.rollup),
                pol.target_rows,
            )
        )
        out.append(AutoResult(table.name, st, commit, error))
    out += [AutoResult(table.name, st) for st in found if st.action == "none"]
    return out


def _attempt(run: Callable[[], Commit | None]) -> tuple[Commit | None, str | None]:
    """Run one compaction; a conflict, a busy lock, a compaction the chunk does not
    allow or an input file lost is reported, not raised."""
    try:
        return run(), None
    except (
        CommitConflictError,
        LockTimeoutError,
        LockRevokedError,
        CompactionError,
        WarehouseError,  # an input's file lost: this chunk fails, the others go on
    ) as exc:
        return None, f"{type(exc).__name__}: {exc}"


def compact_superseded(table: TableHandle, wait_s: float | None = None) -> Commit | None:
    """The minor compaction :func:`compact_auto` runs for the chunks it makes PENDING
    to rewrite segments without their superseded records (the percent or the age rule),
    limited to its runs that take such a segment: one COMPACT commit, or None when there
    is nothing to rewrite. Reads only the visible segments and their vectors when no
    segment crosses a threshold. Raises PropertyError, CompactionError,
    CommitConflictError, LockTimeoutError (``wait_s``), LockRevokedError, WarehouseError."""
    survey = _survey(table, superseded_only=True)
    pol, stale = survey.policy, survey.purge
    chunks = {st.chunk for st in survey.statuses if (st.status, st.action) == ("PENDING", "minor")}
    segs = [s for s in survey.candidates if s.interval in chunks]
    runs = [
        r
        for r in plan_minor(segs, pol.target_rows, pol.small, stale, survey.kept)
        if any(s.id in stale for s in r.inputs)
    ]
    if not runs:
        return None
    state = Policy(pol.target_rows).state
    return compact_minor(table, runs, wait_s=wait_s, state=state, nice=pol.nice)
