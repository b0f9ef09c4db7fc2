"""Catalog operations. Each public method is exactly one catalog transaction."""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from sqlalchemy import (
    Connection,
    Engine,
    and_,
    bindparam,
    delete,
    func,
    insert,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.exc import DBAPIError, IntegrityError

from lamina.core.interval import Granularity, Interval, from_us
from lamina.core.lineage import LineageEntry, LineageState, hidden_by, protected
from lamina.core.model import (
    OPEN_STATES,
    Commit,
    CommitState,
    NewSegment,
    PublishPlan,
    Snapshot,
    TableRecord,
)
from lamina.core.segment import Segment
from lamina.core.timeline import Timeline
from lamina.errors import (
    CommitError,
    ConcurrentWriteError,
    LaminaError,
    LineageEntryNotFoundError,
    LineageError,
    SegmentNotFoundError,
    SnapshotNotFoundError,
    TableExistsError,
    TableNotFoundError,
)
from lamina.meta.db import is_sqlite, run
from lamina.meta.schema import commits, lineage, lineage_ids, segments, tables


def now_us() -> int:
    return time.time_ns() // 1000


_HOST = socket.gethostname()
_PROCESS_TOKEN: dict[int, str] = {}


def owner_token() -> str:
    """Who holds a commit: host, pid and a random part (pids get reused)."""
    return f"{_HOST}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def process_token() -> str:
    """The owner of catalog-only commits made by this process (computed once per pid)."""
    pid = os.getpid()
    if pid not in _PROCESS_TOKEN:
        _PROCESS_TOKEN[pid] = owner_token()
    return _PROCESS_TOKEN[pid]


def _owner_alive(owner: str) -> bool | None:
    """True/False when the owner runs on this host, None when it cannot be told."""
    host, _, rest = owner.partition(":")
    if host != _HOST:
        return None
    try:
        os.kill(int(rest.split(":")[0]), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError):
        return None
    return True


class CatalogStore:
    """Typed access to the catalog tables."""

    def __init__(self, engine: Engine, root: str) -> None:
        self.engine = engine
        self.root = root.rstrip("/")

    # -- tables -------------------------------------------------------------------

    def create_table(
        self,
        name: str,
        schema: pa.Schema,
        time_column: str | None,
        granularity: Granularity,
        properties: dict[str, str],
    ) -> TableRecord:
        def txn(conn: Connection) -> int:
            if conn.execute(select(tables.c.id).where(tables.c.name == name)).first():
                raise TableExistsError(f"table {name!r} already exists; pick another name")
            try:
                result = conn.execute(
                    insert(tables).values(
                        name=name,
                        schema_ipc=schema.serialize().to_pybytes(),
                        time_column=time_column,
                        granularity=granularity.value,
                        properties=json.dumps(properties, sort_keys=True),
                        created_at=now_us(),
                        next_version=1,
                        last_seq=0,
                    )
                )
            except IntegrityError:
                raise TableExistsError(
                    f"table {name!r} already exists; pick another name"
                ) from None
            pk = result.inserted_primary_key
            assert pk is not None
            return int(pk[0])

        table_id = run(self.engine, txn, write=True)
        return TableRecord(table_id, name, schema, time_column, granularity, dict(properties))

    def _record(self, row: Any) -> TableRecord:
        return TableRecord(
            id=int(row.id),
            name=row.name,
            schema=pa.ipc.read_schema(pa.py_buffer(row.schema_ipc)),
            time_column=row.time_column,
            granularity=Granularity(row.granularity),
            properties=json.loads(row.properties),
        )

    def get_table(self, name: str, conn: Connection | None = None) -> TableRecord:
        def txn(c: Connection) -> TableRecord:
            row = c.execute(select(tables).where(tables.c.name == name)).first()
            if row is None:
                raise TableNotFoundError(
                    f"no table named {name!r}; list tables with cat.list_tables()"
                )
            return self._record(row)

        return txn(conn) if conn is not None else run(self.engine, txn, write=False)

    def list_tables(self) -> list[str]:
        def txn(conn: Connection) -> list[str]:
            return [r[0] for r in conn.execute(select(tables.c.name).order_by(tables.c.name))]

        return run(self.engine, txn, write=False)

    def set_properties(self, name: str, updates: dict[str, str]) -> TableRecord:
        def txn(conn: Connection) -> TableRecord:
            rec = self.get_table(name, conn)
            props = {**rec.properties, **updates}
            conn.execute(
                update(tables)
                .where(tables.c.id == rec.id)
                .values(properties=json.dumps(props, sort_keys=True))
            )
            return TableRecord(
                rec.id, rec.name, rec.schema, rec.time_column, rec.granularity, props
            )

        return run(self.engine, txn, write=True)

    def drop_table(self, name: str) -> TableRecord:
        def txn(conn: Connection) -> TableRecord:
            rec = self.get_table(name, conn)
            conn.execute(delete(segments).where(segments.c.table_id == rec.id))
            conn.execute(delete(commits).where(commits.c.table_id == rec.id))
            conn.execute(delete(tables).where(tables.c.id == rec.id))
            return rec

        return run(self.engine, txn, write=True)

    def _lock_table(self, conn: Connection, table_id: int) -> Any:
        """Serialize writers of one table (SQLite: the IMMEDIATE write lock is already held)."""
        stmt = select(tables).where(tables.c.id == table_id)
        if not is_sqlite(self.engine):
            stmt = stmt.with_for_update()
        row = conn.execute(stmt).first()
        if row is None:
            raise TableNotFoundError(f"table id {table_id} was dropped meanwhile")
        return row

    # -- commits ------------------------------------------------------------------

    def begin_commit(
        self,
        table_id: int,
        action: str,
        owner: str,
        metadata: dict[str, Any],
        stale_after_s: float,
    ) -> tuple[int, list[int]]:
        """Open a REQUESTED commit; refuse while another live writer holds the table.

        Also returns the table's aborted commits whose files still need removing.
        """

        def txn(conn: Connection) -> tuple[int, list[int]]:
            self._lock_table(conn, table_id)
            now = now_us()
            live = self._abort_dead_writers(conn, table_id, stale_after_s, now)
            if live:
                row = live[0]
                raise ConcurrentWriteError(
                    f"commit {row.id} by {row.owner.rsplit(':', 1)[0]} is writing this "
                    "table; wait for it to finish (or raise writer_wait_s)"
                )
            result = conn.execute(
                insert(commits).values(
                    table_id=table_id,
                    action=action,
                    state=CommitState.REQUESTED.value,
                    started_at=now,
                    heartbeat_at=now,
                    owner=owner,
                    files_cleaned=0,
                    metadata=json.dumps(metadata, default=str),
                )
            )
            pk = result.inserted_primary_key
            assert pk is not None
            return int(pk[0]), self._uncleaned(conn, table_id)

        return run(self.engine, txn, write=True)

    def _abort_dead_writers(
        self, conn: Connection, table_id: int, stale_after_s: float, now: int
    ) -> list[Any]:
        """Abort open commits whose writer is gone; return the open ones still alive.

        Dead: the owner ran on this host and its pid no longer exists, or (any host)
        its heartbeat is older than ``stale_after_s``.
        """
        alive_rows = []
        for row in conn.execute(
            select(commits.c.id, commits.c.owner, commits.c.heartbeat_at).where(
                commits.c.table_id == table_id, commits.c.state.in_(OPEN_STATES)
            )
        ).all():
            alive = _owner_alive(row.owner)
            expired = row.heartbeat_at < now - int(stale_after_s * 1e6)
            if alive is False or (alive is None and expired):
                self._abort(conn, row.id, now)
            else:
                alive_rows.append(row)
        return alive_rows

    def _abort(self, conn: Connection, commit_id: int, now: int) -> None:
        conn.execute(
            update(commits)
            .where(commits.c.id == commit_id, commits.c.state.in_(OPEN_STATES))
            .values(state=CommitState.ABORTED.value, completed_at=now)
        )

    def mark_inflight(self, commit_id: int) -> None:
        def txn(conn: Connection) -> None:
            n = conn.execute(
                update(commits)
                .where(commits.c.id == commit_id, commits.c.state == CommitState.REQUESTED.value)
                .values(state=CommitState.INFLIGHT.value, heartbeat_at=now_us())
            ).rowcount
            if n != 1:
                raise CommitError(f"commit {commit_id} was aborted before it started writing")

        run(self.engine, txn, write=True)

    def heartbeat(self, commit_id: int) -> bool:
        """Refresh a commit's heartbeat; False once it is no longer open."""

        def txn(conn: Connection) -> bool:
            return bool(
                conn.execute(
                    update(commits)
                    .where(commits.c.id == commit_id, commits.c.state.in_(OPEN_STATES))
                    .values(heartbeat_at=now_us())
                ).rowcount
            )

        return run(self.engine, txn, write=True)

    def abort(self, commit_id: int) -> None:
        run(self.engine, lambda conn: self._abort(conn, commit_id, now_us()), write=True)

    def publish(self, table: TableRecord, commit_id: int, plan: PublishPlan) -> Commit:
        """Assign identities to the new files and make them visible, atomically."""

        def txn(conn: Connection) -> Commit:
            trow = self._lock_table(conn, table.id)
            crow = conn.execute(select(commits).where(commits.c.id == commit_id)).first()
            if crow is None or crow.state != CommitState.INFLIGHT.value:
                state = crow.state if crow is not None else "missing"
                raise CommitError(
                    f"commit {commit_id} cannot be published: it is {state} (another writer "
                    "took over after its heartbeat expired?); nothing was published, retry"
                )
            seq = int(trow.last_seq) + 1
            next_version = int(trow.next_version)
            entry = None
            if plan.lineage_entry is not None:
                entry = self._entry_row(conn, table.id, plan.lineage_entry, lock=True)
                if entry.state != LineageState.IN_PROGRESS.value:
                    raise LineageError(
                        f"lineage entry {entry.id} is {entry.state}: the push under it was "
                        "cleaned up (by a newer push or retention); nothing was published"
                    )
            current = self._entries(conn, table.id)
            # a push's own earlier batches count as visible when planning its next one
            others = [e for e in current if entry is None or e.id != entry.id]
            hidden, held = hidden_by(others), protected(current)
            removed: list[tuple[int, str]] = []
            if plan.overwrite is not None:
                rows, removed = self._plan_overwrite(
                    conn, table, plan, next_version, hidden, replace=entry is None
                )
                # what a lineage entry holds stays until the entry is settled
                removed = [(pk, sid) for pk, sid in removed if sid not in held]
                next_version += 1
            else:
                rows, new_version_used = self._plan_append(conn, table, plan, next_version, hidden)
                next_version += int(new_version_used)
            now = now_us()
            for r in rows:
                r.update(table_id=table.id, commit_id=commit_id, added_seq=seq)
            if plan.remove_ids:
                live = {
                    r[0]: int(r[1])
                    for r in conn.execute(
                        select(segments.c.segment_id, segments.c.pk).where(
                            segments.c.table_id == table.id,
                            segments.c.segment_id.in_(plan.remove_ids),
                            segments.c.removed_seq.is_(None),
                        )
                    )
                }
                gone = [i for i in plan.remove_ids if i not in live or i in hidden]
                if gone:
                    raise CommitError(
                        f"segments {gone[:5]} were removed meanwhile; nothing was published, retry"
                    )
                busy = sorted(set(plan.remove_ids) & held)
                if busy:
                    raise LineageError(
                        f"segments {busy[:5]} are held by a lineage entry; end or revert it first"
                    )
                removed += [(pk, sid) for sid, pk in live.items()]
            if entry is not None:
                lists = self._lists(conn, [entry.id])
                to = [*lists.get((entry.id, "to"), []), *(r["segment_id"] for r in rows)]
                self._put_list(conn, entry.id, "to", to)
                own = json.loads(entry.own_versions)
                if plan.overwrite is not None and rows:  # a fresh version, this entry's alone
                    own.append(next_version - 1)
                conn.execute(
                    update(lineage)
                    .where(lineage.c.id == entry.id)
                    .values(to_count=entry.to_count + len(rows), own_versions=json.dumps(own))
                )
                if plan.complete_entry:  # the push becomes visible with this very commit
                    gone = [
                        i
                        for i in lists.get((entry.id, "from"), [])
                        if i in hidden or not self._exists(conn, table.id, i)
                    ]
                    if gone:
                        raise LineageError(
                            f"cannot end {entry.id}: segments_from no longer exist: {gone[:5]}"
                        )
                    self._set_state(conn, entry.id, LineageState.COMPLETED, completed_seq=seq)
            if rows:
                conn.execute(insert(segments), rows)
            if removed:
                conn.execute(
                    update(segments)
                    .where(segments.c.pk.in_([pk for pk, _ in removed]))
                    .values(removed_seq=seq, removed_commit=commit_id)
                )
            meta = json.loads(crow.metadata)
            if entry is not None:
                meta["lineage_entry"] = entry.id
            conn.execute(
                update(commits)
                .where(commits.c.id == commit_id)
                .values(
                    state=CommitState.COMPLETED.value,
                    seq=seq,
                    completed_at=now,
                    metadata=json.dumps(meta, default=str),
                )
            )
            conn.execute(
                update(tables)
                .where(tables.c.id == table.id)
                .values(last_seq=seq, next_version=next_version)
            )
            return Commit(
                id=commit_id,
                action=crow.action,
                state=CommitState.COMPLETED.value,
                started_at=Commit.time(crow.started_at),  # type: ignore[arg-type]
                completed_at=Commit.time(now),
                table=table.name,
                added=tuple(r["segment_id"] for r in rows),
                removed=tuple(sid for _, sid in removed),
                metadata=meta,
            )

        return run(self.engine, txn, write=True)

    def _live_rows(self, conn: Connection, table_id: int, span: Interval) -> list[Any]:
        return list(
            conn.execute(
                select(segments).where(
                    segments.c.table_id == table_id,
                    segments.c.removed_seq.is_(None),
                    segments.c.start_us < span.end,
                    segments.c.end_us > span.start,
                )
            )
        )

    def _row_values(
        self,
        table: TableRecord,
        f: NewSegment | None,
        chunk: Interval,
        version: int,
        pid: int,
        ncore: int,
        suffix: str = "",
    ) -> dict[str, Any]:
        seg = Segment(table.name, chunk, version, pid, ncore, suffix=suffix)
        return {
            "segment_id": seg.id,
            "suffix": suffix,
            "start_us": chunk.start,
            "end_us": chunk.end,
            "version": version,
            "partition_id": pid,
            "num_core_partitions": ncore,
            "location": f.location if f else None,
            "row_count": f.row_count if f else 0,
            "size_bytes": f.size_bytes if f else 0,
            "min_time": f.min_time if f else None,
            "max_time": f.max_time if f else None,
        }

    def _plan_overwrite(
        self,
        conn: Connection,
        table: TableRecord,
        plan: PublishPlan,
        version: int,
        hidden: set[str],
        replace: bool = True,
    ) -> tuple[list[dict[str, Any]], list[tuple[int, str]]]:
        """Rows of the new version, and the (pk, id) of live segments it hides
        everywhere. ``replace=False`` (under a lineage entry, which does the hiding):
        no tombstones, nothing marked removed."""
        assert plan.overwrite is not None
        by_chunk: dict[Interval, list[NewSegment]] = {c: [] for c in plan.overwrite}
        for f in plan.files:
            by_chunk.setdefault(f.chunk, []).append(f)
        rows: list[dict[str, Any]] = []
        sfx = plan.suffix
        for chunk, files in sorted(by_chunk.items()):
            if not files and replace:  # tombstone: nothing here any more
                rows.append(self._row_values(table, None, chunk, version, 0, 1, sfx))
            for pid, f in enumerate(files):
                rows.append(self._row_values(table, f, chunk, version, pid, len(files), sfx))
        if not plan.overwrite or not replace:
            return rows, []
        span = Interval.of(min(c.start for c in plan.overwrite), max(c.end for c in plan.overwrite))
        live = [r for r in self._live_rows(conn, table.id, span) if r.segment_id not in hidden]
        tl = Timeline.build(self._segment(table.name, r) for r in live)
        for r in rows:
            tl.add(self._segment(table.name, r))
        gone = [r for r in live if tl.is_overshadowed(self._segment(table.name, r))]
        return rows, [(int(r.pk), str(r.segment_id)) for r in gone]

    def _plan_append(
        self,
        conn: Connection,
        table: TableRecord,
        plan: PublishPlan,
        new_version: int,
        hidden: set[str],
    ) -> tuple[list[dict[str, Any]], bool]:
        if not plan.files:
            return [], False
        chunks = sorted({f.chunk for f in plan.files})
        span = Interval.of(chunks[0].start, max(c.end for c in chunks))
        live = [r for r in self._live_rows(conn, table.id, span) if r.segment_id not in hidden]
        tl = Timeline.build(self._segment(table.name, r) for r in live)
        target: dict[Interval, tuple[Interval, int]] = {}
        used_new = False
        for chunk in chunks:
            entries = tl.lookup(chunk)
            if not entries:
                target[chunk] = (chunk, new_version)
                used_new = True
            elif (
                len(entries) == 1
                and entries[0].chunk_interval.contains(chunk)
                and (entries[0].interval == chunk)
            ):
                target[chunk] = (entries[0].chunk_interval, entries[0].version)
            else:
                raise LaminaError(
                    f"cannot append into {chunk}: it is covered by several versions or "
                    "a chunk of another granularity; overwrite that interval instead"
                )
        wanted = set(target.values())
        next_pid = {key: 0 for key in wanted}
        lo = min(iv.start for iv, _ in wanted)
        hi = max(iv.end for iv, _ in wanted)
        for s, e, v, top in conn.execute(  # one query for every target chunk
            select(
                segments.c.start_us,
                segments.c.end_us,
                segments.c.version,
                func.max(segments.c.partition_id),
            )
            .where(
                segments.c.table_id == table.id,
                segments.c.start_us >= lo,
                segments.c.end_us <= hi,
            )
            .group_by(segments.c.start_us, segments.c.end_us, segments.c.version)
        ):
            key = (Interval.of(s, e), v)
            if key in next_pid:
                next_pid[key] = int(top) + 1
        rows = []
        for f in plan.files:
            key = target[f.chunk]
            pid = next_pid[key]
            next_pid[key] = pid + 1
            rows.append(self._row_values(table, f, key[0], key[1], pid, 0, plan.suffix))
        return rows, used_new

    def _segment(self, table_name: str, r: Any) -> Segment:
        m = r if isinstance(r, dict) else r._mapping
        loc = m["location"]
        return Segment(
            table=table_name,
            interval=Interval.of(m["start_us"], m["end_us"]),
            version=m["version"],
            partition_id=m["partition_id"],
            num_core_partitions=m["num_core_partitions"],
            location=f"{self.root}/{loc}" if loc else None,
            row_count=m["row_count"],
            size_bytes=m["size_bytes"],
            min_time=m["min_time"],
            max_time=m["max_time"],
            commit_id=m.get("commit_id"),
            suffix=m.get("suffix") or "",
        )

    # -- reading ------------------------------------------------------------------

    def snapshot(
        self,
        name: str,
        as_of: int | None = None,
        all_published: bool = False,
        interval: Interval | None = None,
    ) -> Snapshot:
        """Live segments of the latest snapshot, or of the one completed by ``as_of``;
        only those overlapping ``interval`` when given (visibility at an instant
        depends only on the segments covering it)."""

        def txn(conn: Connection) -> Snapshot:
            rec = self.get_table(name, conn)
            if as_of is None:
                seq = int(
                    conn.execute(
                        select(tables.c.last_seq).where(tables.c.id == rec.id)
                    ).scalar_one()
                )
                commit_id = conn.execute(
                    select(commits.c.id).where(commits.c.table_id == rec.id, commits.c.seq == seq)
                ).scalar()
            else:
                row = conn.execute(
                    select(commits.c.seq, commits.c.state).where(
                        commits.c.id == as_of, commits.c.table_id == rec.id
                    )
                ).first()
                if row is None or row.seq is None:
                    state = "no such commit" if row is None else row.state
                    raise SnapshotNotFoundError(
                        f"table {name!r} has no completed commit {as_of} ({state}); "
                        "see t.history() for the commits you can read"
                    )
                seq, commit_id = int(row.seq), as_of
                purged = conn.execute(
                    select(tables.c.purged_seq).where(tables.c.id == rec.id)
                ).scalar_one()
                if seq < purged:
                    raise SnapshotNotFoundError(
                        f"the snapshot of commit {as_of} of {name!r} is no longer readable: "
                        "retention deleted segments it used; read a newer commit "
                        "(see t.history())"
                    )
            hidden = set() if all_published else hidden_by(self._entries(conn, rec.id, seq))
            cond = [segments.c.table_id == rec.id, segments.c.added_seq <= seq]
            if not all_published:
                cond.append(or_(segments.c.removed_seq.is_(None), segments.c.removed_seq > seq))
            if interval is not None:
                cond += [segments.c.start_us < interval.end, segments.c.end_us > interval.start]
            cols = [
                segments.c.start_us,
                segments.c.end_us,
                segments.c.version,
                segments.c.partition_id,
                segments.c.num_core_partitions,
                segments.c.location,
                segments.c.row_count,
                segments.c.size_bytes,
                segments.c.min_time,
                segments.c.max_time,
                segments.c.commit_id,
                segments.c.suffix,
                segments.c.segment_id,
            ]
            result = conn.execute(select(*cols).where(and_(*cond)))
            root, tname = self.root, rec.name
            intervals: dict[tuple[int, int], Interval] = {}  # shared, not one per segment
            segs = []
            for s, e, v, p, n, loc, rc, sb, mn, mx, cid, sfx, sid in result:
                if sid in hidden:
                    continue
                iv = intervals.get((s, e))
                if iv is None:
                    iv = intervals[(s, e)] = Interval.of(s, e)
                location = f"{root}/{loc}" if loc else None
                segs.append(Segment(tname, iv, v, p, n, location, rc, sb, mn, mx, cid, sfx or ""))
            return Snapshot(rec, seq, commit_id, segs)

        return run(self.engine, txn, write=False)

    def history(self, name: str) -> list[Commit]:
        def txn(conn: Connection) -> list[Commit]:
            rec = self.get_table(name, conn)
            added: dict[int, list[str]] = {}
            removed: dict[int, list[str]] = {}
            for sid, cid, rcid in conn.execute(
                select(segments.c.segment_id, segments.c.commit_id, segments.c.removed_commit)
                .where(segments.c.table_id == rec.id)
                .order_by(segments.c.pk)
            ):
                added.setdefault(cid, []).append(sid)
                if rcid is not None:
                    removed.setdefault(rcid, []).append(sid)
            out = []
            for r in conn.execute(
                select(commits).where(commits.c.table_id == rec.id).order_by(commits.c.id)
            ):
                out.append(
                    Commit(
                        id=int(r.id),
                        action=r.action,
                        state=r.state,
                        started_at=Commit.time(r.started_at),  # type: ignore[arg-type]
                        completed_at=Commit.time(r.completed_at),
                        table=name,
                        added=tuple(added.get(r.id, ())),
                        removed=tuple(removed.get(r.id, ())),
                        metadata=json.loads(r.metadata),
                    )
                )
            return out

        return run(self.engine, txn, write=False)

    # -- cleanup of failed writes --------------------------------------------------

    def failed_commits(self, table_id: int, stale_after_s: float) -> list[int]:
        """Abort stale open commits; return aborted commits whose files are not yet removed."""

        def txn(conn: Connection) -> list[int]:
            self._abort_dead_writers(conn, table_id, stale_after_s, now_us())
            return self._uncleaned(conn, table_id)

        return run(self.engine, txn, write=True)

    def _uncleaned(self, conn: Connection, table_id: int) -> list[int]:
        return [
            int(r[0])
            for r in conn.execute(
                select(commits.c.id).where(
                    commits.c.table_id == table_id,
                    commits.c.state == CommitState.ABORTED.value,
                    commits.c.files_cleaned == 0,
                )
            )
        ]

    def mark_cleaned(self, commit_ids: Sequence[int]) -> None:
        if not commit_ids:
            return
        run(
            self.engine,
            lambda conn: conn.execute(
                update(commits).where(commits.c.id.in_(list(commit_ids))).values(files_cleaned=1)
            ),
            write=True,
        )

    # -- lineage ----------------------------------------------------------------------

    def _lock_with_entry(self, conn: Connection, name: str, entry_id: str) -> Any:
        """Lock the table's row and read one lineage entry, in one round trip."""
        joined = tables.outerjoin(
            lineage, and_(lineage.c.table_id == tables.c.id, lineage.c.id == entry_id)
        ).outerjoin(
            lineage_ids,
            and_(lineage_ids.c.entry_id == lineage.c.id, lineage_ids.c.role == "expected"),
        )
        stmt = (
            select(
                tables.c.id,
                tables.c.last_seq,
                lineage.c.id.label("entry"),
                lineage.c.state,
                lineage.c.to_count,
                lineage.c.successors,
                lineage.c.own_versions,
                lineage_ids.c.ids.label("expected"),
            )
            .select_from(joined)
            .where(tables.c.name == name)
        )
        if not is_sqlite(self.engine):
            stmt = stmt.with_for_update(of=tables)
        row = conn.execute(stmt).first()
        if row is None:
            raise TableNotFoundError(f"no table named {name!r}; list tables with cat.list_tables()")
        if row.entry is None:
            raise LineageEntryNotFoundError(
                f"no lineage entry {entry_id!r} in this table; list them with t.lineage()"
            )
        return row

    def _transition(
        self, conn: Connection, trow: Any, action: str, entry_id: str, state: LineageState
    ) -> None:
        """Record the transition as a commit and move the entry to ``state``: on
        PostgreSQL one statement (data-modifying CTE), elsewhere three."""
        column = "completed_seq" if state == LineageState.COMPLETED else "reverted_seq"
        if is_sqlite(self.engine):
            seq = self._bump(conn, trow, action, {"entry": entry_id})
            self._set_state(conn, entry_id, state, **{column: seq})
            return
        now = now_us()
        conn.execute(
            text(
                f"""
                WITH t AS (
                    UPDATE lamina_tables SET last_seq = last_seq + 1 WHERE id = :tid
                    RETURNING last_seq
                ), c AS (
                    INSERT INTO lamina_commits (table_id, action, state, seq, started_at,
                        completed_at, heartbeat_at, owner, files_cleaned, metadata)
                    SELECT :tid, :action, 'COMPLETED', t.last_seq, :now, :now, :now, :owner,
                        0, :meta FROM t
                    RETURNING seq
                )
                UPDATE lamina_lineage SET state = :state, timestamp = :now,
                    {column} = (SELECT seq FROM c)
                WHERE id = :eid
                """
            ),
            {
                "tid": trow.id,
                "action": action,
                "now": now,
                "owner": process_token(),
                "meta": json.dumps({"entry": entry_id}),
                "state": state.value,
                "eid": entry_id,
            },
        )

    def _fast_transition(
        self, name: str, entry_id: str, from_states: tuple[str, ...], state: LineageState
    ) -> bool:
        """PostgreSQL: the common end/revert as one autocommit statement.

        Applies only to an entry in ``from_states`` that the rules need nothing else
        for: no segments written under it, no expected names, no successors, no own
        versions. Returns False (nothing changed) otherwise; the caller then runs the
        general transaction, which also produces the errors.
        """
        if is_sqlite(self.engine):
            return False
        column = "completed_seq" if state == LineageState.COMPLETED else "reverted_seq"
        action = "END_REPLACE" if state == LineageState.COMPLETED else "REVERT_REPLACE"
        sql = text(
            f"""
            WITH e AS (
                SELECT l.id, l.table_id FROM lamina_lineage l
                JOIN lamina_tables tb ON tb.id = l.table_id
                WHERE tb.name = :name AND l.id = :eid AND l.state IN :states
                  AND l.to_count = 0 AND l.successors = '[]' AND l.own_versions = '[]'
                  AND NOT EXISTS (SELECT 1 FROM lamina_lineage_ids x
                                  WHERE x.entry_id = l.id AND x.role = 'expected')
                FOR UPDATE OF l
            ), t AS (
                UPDATE lamina_tables SET last_seq = last_seq + 1
                WHERE id = (SELECT table_id FROM e)
                RETURNING id, last_seq
            ), c AS (
                INSERT INTO lamina_commits (table_id, action, state, seq, started_at,
                    completed_at, heartbeat_at, owner, files_cleaned, metadata)
                SELECT t.id, :action, 'COMPLETED', t.last_seq, :now, :now, :now, :owner, 0,
                    :meta
                FROM t
                RETURNING seq
            )
            UPDATE lamina_lineage SET state = :state, timestamp = :now,
                {column} = (SELECT seq FROM c)
            WHERE id = (SELECT id FROM e)
            RETURNING id
            """
        ).bindparams(bindparam("states", expanding=True))
        params = {
            "name": name,
            "eid": entry_id,
            "states": list(from_states),
            "action": action,
            "now": now_us(),
            "owner": process_token(),
            "meta": json.dumps({"entry": entry_id}),
            "state": state.value,
        }
        with self.engine.connect() as conn:
            auto = conn.execution_options(isolation_level="AUTOCOMMIT")
            try:
                return auto.execute(sql, params).first() is not None
            except DBAPIError:
                return False  # the general path retries and reports

    def _exists(self, conn: Connection, table_id: int, segment_id: str) -> bool:
        return (
            conn.execute(
                select(segments.c.pk).where(
                    segments.c.table_id == table_id,
                    segments.c.segment_id == segment_id,
                    segments.c.removed_seq.is_(None),
                )
            ).first()
            is not None
        )

    def _entry_row(
        self, conn: Connection, table_id: int, entry_id: str, lock: bool = False, *cols: Any
    ) -> Any:
        """The entry's row (only ``cols`` if given: its id lists can be long)."""
        what = cols or (lineage,)
        stmt = select(*what).where(lineage.c.id == entry_id, lineage.c.table_id == table_id)
        if lock and not is_sqlite(self.engine):
            stmt = stmt.with_for_update()
        row = conn.execute(stmt).first()
        if row is None:
            raise LineageEntryNotFoundError(
                f"no lineage entry {entry_id!r} in this table; list them with t.lineage()"
            )
        return row

    @staticmethod
    def _as_entry(
        row: Any, lists: dict[tuple[str, str], list[str]], seq: int | None = None
    ) -> LineageEntry | None:
        """The entry as it stood at snapshot ``seq`` (None: now); None if not yet started."""
        if seq is None:
            state = row.state
        elif row.started_seq > seq:
            return None
        elif row.reverted_seq is not None and row.reverted_seq <= seq:
            state = LineageState.REVERTED.value
        elif row.completed_seq is not None and row.completed_seq <= seq:
            state = LineageState.COMPLETED.value
        else:
            state = LineageState.IN_PROGRESS.value
        return LineageEntry(
            id=row.id,
            segments_from=tuple(lists.get((row.id, "from"), ())),
            segments_to=tuple(lists.get((row.id, "to"), ())),
            state=state,
            timestamp=from_us(row.timestamp),
        )

    def _lists(self, conn: Connection, entry_ids: list[str]) -> dict[tuple[str, str], list[str]]:
        if not entry_ids:
            return {}
        return {
            (r.entry_id, r.role): json.loads(r.ids)
            for r in conn.execute(select(lineage_ids).where(lineage_ids.c.entry_id.in_(entry_ids)))
        }

    def _put_list(self, conn: Connection, entry_id: str, role: str, ids: list[str]) -> None:
        done = conn.execute(
            update(lineage_ids)
            .where(lineage_ids.c.entry_id == entry_id, lineage_ids.c.role == role)
            .values(ids=json.dumps(ids))
        ).rowcount
        if not done:
            conn.execute(
                insert(lineage_ids).values(entry_id=entry_id, role=role, ids=json.dumps(ids))
            )

    def _drop_dangling(
        self, conn: Connection, entries: list[LineageEntry], gone: set[str]
    ) -> set[str]:
        """Drop COMPLETED entries that lost segments: their from (a rollback could not
        bring them back) or their to (the data they published no longer exists)."""
        dropped = set()
        for e in entries:
            if e.state == LineageState.COMPLETED and (
                gone & set(e.segments_from) or gone & set(e.segments_to)
            ):
                self._drop_entry(conn, e.id)
                dropped.add(e.id)
        return dropped

    def _drop_entry(self, conn: Connection, entry_id: str) -> None:
        conn.execute(delete(lineage_ids).where(lineage_ids.c.entry_id == entry_id))
        conn.execute(delete(lineage).where(lineage.c.id == entry_id))

    def _entries(
        self, conn: Connection, table_id: int, seq: int | None = None
    ) -> list[LineageEntry]:
        rows = conn.execute(
            select(lineage).where(lineage.c.table_id == table_id).order_by(lineage.c.started_seq)
        ).all()
        lists = self._lists(conn, [r.id for r in rows])
        return [e for r in rows if (e := self._as_entry(r, lists, seq)) is not None]

    def _view(self, conn: Connection, table_id: int) -> tuple[set[str], list[LineageEntry]]:
        existing = {
            r[0]
            for r in conn.execute(
                select(segments.c.segment_id).where(
                    segments.c.table_id == table_id, segments.c.removed_seq.is_(None)
                )
            )
        }
        return existing, self._entries(conn, table_id)

    def _bump(self, conn: Connection, trow: Any, action: str, meta: dict[str, Any]) -> int:
        """Record a catalog-only change as a completed commit; returns its seq."""
        seq = int(trow.last_seq) + 1
        now = now_us()
        conn.execute(
            insert(commits).values(
                table_id=trow.id,
                action=action,
                state=CommitState.COMPLETED.value,
                seq=seq,
                started_at=now,
                completed_at=now,
                heartbeat_at=now,
                owner=process_token(),
                files_cleaned=0,
                metadata=json.dumps(meta, default=str),
            )
        )
        conn.execute(update(tables).where(tables.c.id == trow.id).values(last_seq=seq))
        return seq

    def _delete_segment_rows(self, conn: Connection, table_id: int, ids: set[str]) -> list[str]:
        """Delete segment rows; return the relative locations of their files."""
        if not ids:
            return []
        locs = [
            r[0]
            for r in conn.execute(
                select(segments.c.location).where(
                    segments.c.table_id == table_id, segments.c.segment_id.in_(ids)
                )
            )
            if r[0]
        ]
        conn.execute(
            delete(segments).where(segments.c.table_id == table_id, segments.c.segment_id.in_(ids))
        )
        return locs

    def _purge_before(self, conn: Connection, table_id: int, seq: int) -> None:
        """Snapshots older than ``seq`` used deleted segments: no longer readable."""
        conn.execute(
            update(tables)
            .where(tables.c.id == table_id, tables.c.purged_seq < seq)
            .values(purged_seq=seq)
        )

    def lineage(self, name: str) -> list[LineageEntry]:
        def txn(conn: Connection) -> list[LineageEntry]:
            return self._entries(conn, self.get_table(name, conn).id)

        return run(self.engine, txn, write=False)

    def start_replace(
        self,
        name: str,
        segments_from: list[str],
        segments_to: list[str],
        force_cleanup: bool = False,
        replace_live: Interval | None = None,
    ) -> tuple[str, list[str]]:
        """Open an IN_PROGRESS entry. Returns its id and files that are now garbage
        (to-segments of entries cleaned up, the snapshot before the previous one).

        ``replace_live``: segments_from = every live segment overlapping it, read in
        this same transaction (what a refresh replaces).
        """
        from lamina.core.lineage import LineageView, check_start

        def txn(conn: Connection) -> tuple[str, list[str]]:
            nonlocal segments_from
            rec = self.get_table(name, conn)
            trow = self._lock_table(conn, rec.id)
            existing, entries = self._view(conn, rec.id)
            view = LineageView(existing, entries)
            if replace_live is not None:
                hidden = hidden_by(entries)
                segments_from = [
                    r.segment_id
                    for r in self._live_rows(conn, rec.id, replace_live)
                    if r.segment_id not in hidden
                ]
            conflicts = check_start(view, segments_from, segments_to)
            if conflicts and not force_cleanup:
                raise LineageError(
                    f"segments overlap IN_PROGRESS entries {[e.id for e in conflicts]}; end or "
                    "revert them, or pass force_cleanup=True to revert them and delete what "
                    "they wrote"
                )
            garbage: list[str] = []
            seq = self._bump(
                conn,
                trow,
                "START_REPLACE",
                {"entry": None, "segments_from": segments_from, "segments_to": segments_to},
            )
            now = now_us()
            for e in conflicts:  # force_cleanup: revert, delete what they wrote
                self._set_state(conn, e.id, LineageState.REVERTED, reverted_seq=seq)
                garbage += self._delete_segment_rows(conn, rec.id, set(e.segments_to))
            # keep at most two snapshots: the one this push replaces and the new one;
            # the snapshot before the previous one goes now (Pinot's proactive cleanup)
            new_from = set(segments_from)
            dropped: set[str] = set()
            for e in entries:
                if (
                    e.state == LineageState.COMPLETED
                    and set(e.segments_to) & new_from
                    and e.segments_from
                ):
                    gone = set(e.segments_from)
                    garbage += self._delete_segment_rows(conn, rec.id, gone)
                    completed = self._entry_row(conn, rec.id, e.id, False, lineage.c.completed_seq)
                    self._purge_before(conn, rec.id, int(completed.completed_seq))
                    dropped |= self._drop_dangling(conn, entries, gone)
            entry_id = uuid.uuid4().hex
            for e in entries:  # the chain: entries whose segments_to this one replaces
                if (
                    e.id not in dropped
                    and e.state != LineageState.REVERTED
                    and set(e.segments_to) & new_from
                ):
                    row = self._entry_row(conn, rec.id, e.id, False, lineage.c.successors)
                    successors = [*json.loads(row.successors), entry_id]
                    conn.execute(
                        update(lineage)
                        .where(lineage.c.id == e.id)
                        .values(successors=json.dumps(successors))
                    )
            conn.execute(
                insert(lineage).values(
                    id=entry_id,
                    table_id=rec.id,
                    state=LineageState.IN_PROGRESS.value,
                    timestamp=now,
                    started_seq=seq,
                    successors="[]",
                    to_count=0,
                    own_versions="[]",
                )
            )
            self._put_list(conn, entry_id, "from", list(segments_from))
            self._put_list(conn, entry_id, "to", list(segments_to))
            if segments_to:
                self._put_list(conn, entry_id, "expected", list(segments_to))
            conn.execute(
                update(commits)
                .where(commits.c.table_id == rec.id, commits.c.seq == seq)
                .values(
                    metadata=json.dumps(
                        {
                            "entry": entry_id,
                            "segments_from": segments_from,
                            "segments_to": segments_to,
                        }
                    )
                )
            )
            return entry_id, garbage

        return run(self.engine, txn, write=True)

    def end_replace(self, name: str, entry_id: str) -> None:
        """COMPLETED: one transaction of a few row reads and writes, whatever the
        number of segments or the size of the data."""
        from lamina.core.lineage import check_end

        if self._fast_transition(name, entry_id, ("IN_PROGRESS",), LineageState.COMPLETED):
            return

        def txn(conn: Connection) -> None:
            row = self._lock_with_entry(conn, name, entry_id)
            expected = json.loads(row.expected) if row.expected else []
            unwritten = sorted(set(expected) - self._existing(conn, row.id, expected))
            if check_end(entry_id, row.state, unwritten):
                if row.to_count or expected:
                    self._check_not_overshadowed(conn, row.id, entry_id)
                self._transition(conn, row, "END_REPLACE", entry_id, LineageState.COMPLETED)

        return run(self.engine, txn, write=True)

    def revert_replace(self, name: str, entry_id: str, force: bool = False) -> None:
        from lamina.core.lineage import check_revert

        states = ("COMPLETED", "IN_PROGRESS") if force else ("COMPLETED",)
        if self._fast_transition(name, entry_id, states, LineageState.REVERTED):
            return

        def txn(conn: Connection) -> None:
            row = trow = self._lock_with_entry(conn, name, entry_id)
            successors = json.loads(row.successors)
            live = []
            if successors:
                live = [
                    r[0]
                    for r in conn.execute(
                        select(lineage.c.id).where(
                            lineage.c.id.in_(successors),
                            lineage.c.state != LineageState.REVERTED.value,
                        )
                    )
                ]
            own = json.loads(row.own_versions)
            if row.state == LineageState.COMPLETED.value and own and not live:
                # its chunks must still hold exactly what it wrote: later appends joined
                # them (a rollback would hide old rows) or later writes removed them
                # (a rollback would bring back a mix)
                n = conn.execute(
                    select(func.count())
                    .select_from(segments)
                    .where(
                        segments.c.table_id == trow.id,
                        segments.c.removed_seq.is_(None),
                        segments.c.version.in_(own),
                    )
                ).scalar_one()
                if n != row.to_count:
                    raise LineageError(
                        f"cannot roll back {entry_id}: later writes changed the chunks it "
                        "published (appends joined them, or overwrites/refreshes replaced "
                        "them); a rollback would hide rows or mix two snapshots"
                    )
            if check_revert(entry_id, row.state, force, live):
                self._transition(conn, row, "REVERT_REPLACE", entry_id, LineageState.REVERTED)

        return run(self.engine, txn, write=True)

    def _check_not_overshadowed(self, conn: Connection, table_id: int, entry_id: str) -> None:
        """Refuse to complete an entry whose segments newer versions would hide (written
        meanwhile by an overwrite or refresh of the same chunks): it would publish
        rows nobody can see."""
        ids = self._lists(conn, [entry_id]).get((entry_id, "to"), [])
        if not ids:
            return
        mine = [
            r
            for i in range(0, len(ids), 5000)
            for r in conn.execute(
                select(segments).where(
                    segments.c.table_id == table_id, segments.c.segment_id.in_(ids[i : i + 5000])
                )
            )
        ]
        if not mine:
            return
        span = Interval.of(min(r.start_us for r in mine), max(r.end_us for r in mine))
        newer = conn.execute(
            select(func.count())
            .select_from(segments)
            .where(
                segments.c.table_id == table_id,
                segments.c.removed_seq.is_(None),
                segments.c.version > min(r.version for r in mine),
                segments.c.start_us < span.end,
                segments.c.end_us > span.start,
            )
        ).scalar_one()
        if not newer:  # the common case: nothing newer anywhere near
            return
        hidden = hidden_by(e for e in self._entries(conn, table_id) if e.id != entry_id)
        visible = [r for r in self._live_rows(conn, table_id, span) if r.segment_id not in hidden]
        tl = Timeline.build(self._segment("t", r) for r in visible)
        for r in mine:
            seg = self._segment("t", r)
            tl.add(seg)
            if any(e.version > seg.version for e in tl.lookup(seg.interval)):
                raise LineageError(
                    f"cannot end {entry_id}: segment {r.segment_id} would be hidden by a newer "
                    "version of its chunk written meanwhile (an overwrite or refresh); revert "
                    "this entry and push again"
                )

    def _set_state(self, conn: Connection, entry_id: str, state: LineageState, **seqs: int) -> None:
        conn.execute(
            update(lineage)
            .where(lineage.c.id == entry_id)
            .values(state=state.value, timestamp=now_us(), **seqs)
        )

    def _existing(self, conn: Connection, table_id: int, ids: list[str]) -> set[str]:
        """Which of ``ids`` name segments that exist (not removed)."""
        found: set[str] = set()
        for i in range(0, len(ids), 5000):
            found.update(
                r[0]
                for r in conn.execute(
                    select(segments.c.segment_id).where(
                        segments.c.table_id == table_id,
                        segments.c.removed_seq.is_(None),
                        segments.c.segment_id.in_(ids[i : i + 5000]),
                    )
                )
            )
        return found

    def delete_segments(self, name: str, ids: list[str]) -> Commit:
        """Remove live segments in one commit (files go with retention)."""
        from lamina.core.lineage import protected

        def txn(conn: Connection) -> Commit:
            rec = self.get_table(name, conn)
            trow = self._lock_table(conn, rec.id)
            existing, entries = self._view(conn, rec.id)
            unknown = [i for i in ids if i not in existing]
            if unknown:
                raise SegmentNotFoundError(
                    f"cannot delete unknown or already deleted segments {unknown[:5]}; "
                    "list them with t.segments(all=True)"
                )
            held = sorted(set(ids) & protected(entries))
            if held:
                raise LineageError(
                    f"segments {held[:5]} are held by a lineage entry (IN_PROGRESS, or replaced "
                    "by a COMPLETED one that can still be rolled back); end or revert it first"
                )
            seq = self._bump(conn, trow, "DELETE", {"segments": ids})
            cid = conn.execute(
                select(commits.c.id).where(commits.c.table_id == rec.id, commits.c.seq == seq)
            ).scalar_one()
            conn.execute(
                update(segments)
                .where(segments.c.table_id == rec.id, segments.c.segment_id.in_(ids))
                .values(removed_seq=seq, removed_commit=cid)
            )
            when = from_us(now_us())
            return Commit(
                int(cid),
                "DELETE",
                CommitState.COMPLETED.value,
                when,
                when,
                name,
                removed=tuple(ids),
            )

        return run(self.engine, txn, write=True)

    # -- retention ----------------------------------------------------------------

    def retention(
        self, name: str, now: int, replaced_after_us: int, lineage_after_us: int
    ) -> list[str]:
        """Delete segments that lineage or later commits made garbage; return their files.

        * COMPLETED entries older than ``replaced_after_us``: their segments_from;
        * REVERTED entries, and IN_PROGRESS ones older than ``lineage_after_us``: their
          segments_to;
        * segments removed by a commit (overwrite, delete) longer than
          ``replaced_after_us`` ago.
        An entry goes once its segments are gone; its commits stay in the history.
        """

        def txn(conn: Connection) -> list[str]:
            rec = self.get_table(name, conn)
            trow = self._lock_table(conn, rec.id)
            garbage: list[str] = []
            purge = 0
            entries = self._entries(conn, rec.id)
            dropped: set[str] = set()
            for entry in entries:
                if entry.id in dropped:
                    continue
                row = self._entry_row(conn, rec.id, entry.id)
                age = now - int(row.timestamp)
                if entry.state == LineageState.COMPLETED and age >= replaced_after_us:
                    gone = set(entry.segments_from)
                    if gone:  # snapshots before the swap read them
                        purge = max(purge, int(row.completed_seq))
                elif entry.state == LineageState.REVERTED or (
                    entry.state == LineageState.IN_PROGRESS and age >= lineage_after_us
                ):
                    gone = set(entry.segments_to)
                    if gone and row.completed_seq is not None:  # was visible for a while
                        purge = max(purge, int(row.reverted_seq))
                else:
                    continue
                garbage += self._delete_segment_rows(conn, rec.id, gone)
                self._drop_entry(conn, entry.id)
                dropped |= {entry.id} | self._drop_dangling(conn, entries, gone)
            removed = conn.execute(
                select(segments.c.segment_id, segments.c.removed_seq)
                .join(commits, commits.c.id == segments.c.removed_commit)
                .where(
                    segments.c.table_id == rec.id,
                    segments.c.removed_seq.is_not(None),
                    commits.c.completed_at <= now - replaced_after_us,
                )
            ).all()
            if removed:
                garbage += self._delete_segment_rows(conn, rec.id, {r[0] for r in removed})
                purge = max(purge, max(int(r[1]) for r in removed))
            if purge:
                self._purge_before(conn, rec.id, purge)
            del trow
            return garbage

        return run(self.engine, txn, write=True)

    def referenced_files(self, table_id: int) -> set[str]:
        """Relative locations of every file a segment row names."""

        def txn(conn: Connection) -> set[str]:
            return {
                r[0]
                for r in conn.execute(
                    select(segments.c.location).where(
                        segments.c.table_id == table_id, segments.c.location.is_not(None)
                    )
                )
            }

        return run(self.engine, txn, write=False)
