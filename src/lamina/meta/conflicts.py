"""Footprints of completed commits, read for the optimistic conflict check at publish.

What a commit added and removed is in the segment rows (``commit_id``,
``removed_commit``); what it replaced, the lineage entries it moved and its
exactly-once app id are in its ``footprint`` column (JSON), written at completion.
A lineage transition names the id lists it showed and swapped by reference (entry,
role), so its cost does not grow with them; when an entry is dropped, the references
to its lists are replaced by the ids (:func:`keep_lists`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection, bindparam, or_, select, update

from lamina.core.conflicts import Footprint, Kind, SegmentRef
from lamina.core.interval import Interval
from lamina.core.model import CommitAction, CommitState
from lamina.meta.schema import commits, lineage_ids, segments
from lamina.meta.segments import rows_by_id

_SINCE = (
    select(commits.c.id, commits.c.action, commits.c.footprint)
    .where(
        commits.c.table_id == bindparam("tid"),
        commits.c.state == CommitState.COMPLETED.value,
        commits.c.seq > bindparam("base"),
        commits.c.action != CommitAction.ALTER.value,  # a schema change touches no row
    )
    .order_by(commits.c.seq)
)
_TOUCHED = select(
    segments.c.segment_id,
    segments.c.start_us,
    segments.c.end_us,
    segments.c.commit_id,
    segments.c.added_seq,
    segments.c.removed_commit,
    segments.c.removed_seq,
    segments.c.location,
).where(
    segments.c.table_id == bindparam("tid"),
    or_(segments.c.added_seq > bindparam("base"), segments.c.removed_seq > bindparam("base")),
)


def encode(
    replaced: Iterable[Interval] = (),
    lineage: Iterable[str] = (),
    app_id: str | None = None,
    shown: Iterable[tuple[str, str]] = (),
    swapped: Iterable[tuple[str, str]] = (),
    rewrote: Iterable[str] = (),
    rows: Iterable[str] = (),
) -> str:
    """The ``footprint`` column of a completed commit. A lineage transition (or the
    batch that ended its push) records the id lists, as (entry id, role), of the
    segments whose rows it ``shown`` (an end's segments_to) and ``swapped`` (an end's
    segments_from; both lists of a completed entry's rollback). A copy-on-write upsert
    records the segments it ``rewrote`` (copies of those it removed, less the records
    it superseded). A row-level change records the segments it hid ``rows`` of."""
    doc: dict[str, Any] = {}
    spans = [[iv.start, iv.end] for iv in replaced]
    if spans:
        doc["replaced"] = spans
    if lineage:
        doc["lineage"] = sorted(set(lineage))
    if app_id is not None:
        doc["app_id"] = app_id
    for key, named in (("shown", list(shown)), ("swapped", list(swapped))):
        if named:
            doc[f"{key}_lists"] = [list(n) for n in named]
    rewrote = sorted(rewrote)
    if rewrote:
        doc["rewrote"] = rewrote
    rows = sorted(rows)
    if rows:
        doc["rows"] = rows
    return json.dumps(doc)


def _lists(conn: Connection, entry_ids: Iterable[str]) -> dict[tuple[str, str], list[str]]:
    wanted = sorted(set(entry_ids))
    if not wanted:
        return {}
    return {
        (r.entry_id, r.role): json.loads(r.ids)
        for r in conn.execute(select(lineage_ids).where(lineage_ids.c.entry_id.in_(wanted)))
    }


def _expand(doc: dict[str, Any], got: dict[tuple[str, str], list[str]], only: str | None) -> bool:
    """Replace ``doc``'s list references (those of entry ``only``, or all) by their
    ids, in place. Returns whether it changed."""
    changed = False
    for key in ("shown", "swapped"):
        named = doc.get(f"{key}_lists", [])
        kept = [n for n in named if only is not None and n[0] != only]
        if len(kept) == len(named):
            continue
        ids = doc.setdefault(key, [])
        for e, role in named:
            if only is None or e == only:
                ids.extend(got.get((e, role), ()))
        if kept:
            doc[f"{key}_lists"] = kept
        else:
            del doc[f"{key}_lists"]
        changed = True
    return changed


def keep_lists(conn: Connection, table_id: int, entry_id: str, seqs: Iterable[int]) -> None:
    """Before entry ``entry_id``'s id lists are deleted: the footprints of its
    transitions (the table's commits at ``seqs``) that name them get their ids."""
    wanted = [s for s in seqs if s is not None]
    if not wanted:
        return
    got: dict[tuple[str, str], list[str]] | None = None
    for cid, raw in conn.execute(
        select(commits.c.id, commits.c.footprint).where(
            commits.c.table_id == table_id, commits.c.seq.in_(wanted)
        )
    ).all():
        doc = json.loads(raw) if raw else {}
        if not any(f"{k}_lists" in doc for k in ("shown", "swapped")):
            continue
        if got is None:
            got = _lists(conn, [entry_id])
        if _expand(doc, got, entry_id):
            conn.execute(
                update(commits).where(commits.c.id == cid).values(footprint=json.dumps(doc))
            )


def _refs(conn: Connection, table_id: int, docs: list[dict[str, Any]]) -> dict[str, SegmentRef]:
    """The segments lineage transitions among ``docs`` showed or swapped, and row-level
    changes hid rows of, by id (those purged since are gone: nothing to carry or to
    conflict with)."""
    ids = sorted({i for d in docs for key in ("shown", "swapped", "rows") for i in d.get(key, ())})
    if not ids:
        return {}
    return {
        r.segment_id: SegmentRef(r.segment_id, Interval.of(r.start_us, r.end_us))
        for r in rows_by_id(conn, table_id, ids)
    }


def completed_since(conn: Connection, table_id: int, base_seq: int) -> list[Any]:
    """(id, action, footprint document) of the table's commits completed after
    ``base_seq``, in seq order: what :func:`since` expands."""
    return list(conn.execute(_SINCE, {"tid": table_id, "base": base_seq}).all())


def since(
    conn: Connection, table_id: int, base_seq: int, done: list[Any] | None = None
) -> list[Footprint]:
    """Footprints of the table's commits completed after ``base_seq``, in seq order
    (``done``: their :func:`completed_since` rows, read already)."""
    params = {"tid": table_id, "base": base_seq}
    if done is None:
        done = completed_since(conn, table_id, base_seq)
    if not done:
        return []
    added: dict[int, list[SegmentRef]] = {}
    removed: dict[int, list[SegmentRef]] = {}
    added_at: dict[tuple[int, str], SegmentRef] = {}  # (commit, file) -> segment it added
    removed_at: dict[int, list[tuple[str, str]]] = {}  # commit -> (segment, file) removed
    for sid, s, e, cid, add_seq, rcid, rseq, loc in conn.execute(_TOUCHED, params):
        ref = SegmentRef(sid, Interval.of(s, e))
        if add_seq > base_seq:
            added.setdefault(int(cid), []).append(ref)
            if loc:
                added_at[(int(cid), loc)] = ref
        if rseq is not None and rseq > base_seq and rcid is not None:
            removed.setdefault(int(rcid), []).append(ref)
            if loc:
                removed_at.setdefault(int(rcid), []).append((sid, loc))
    docs = [json.loads(raw) if raw else {} for _, _, raw in done]
    named = [n[0] for d in docs for k in ("shown", "swapped") for n in d.get(f"{k}_lists", ())]
    if named:
        got = _lists(conn, named)
        for d in docs:
            _expand(d, got, None)
    refs = _refs(conn, table_id, docs)
    out = []
    for (cid, action, _), doc in zip(done, docs, strict=True):
        rewrote = set(doc.get("rewrote", ()))
        if rewrote:  # a copy-on-write upsert: its rewrites are a compaction's
            mine = added.get(int(cid), [])
            added[int(cid)] = [s for s in mine if s.id not in rewrote]
            out.append(
                Footprint(
                    int(cid),
                    Kind.COMPACT,
                    added=tuple(s for s in mine if s.id in rewrote),
                    removed=tuple(removed.pop(int(cid), ())),
                )
            )
        out.append(
            Footprint(
                int(cid),
                Kind.of(action),
                added=tuple(added.get(int(cid), ())),
                removed=tuple(removed.get(int(cid), ())),
                replaced=tuple(Interval.of(a, b) for a, b in doc.get("replaced", ())),
                lineage=frozenset(doc.get("lineage", ())),
                app_id=doc.get("app_id"),
                moved=tuple(  # a carry: the same file removed and added again
                    (sid, added_at[(int(cid), loc)])
                    for sid, loc in removed_at.get(int(cid), ())
                    if (int(cid), loc) in added_at
                ),
                shown=tuple(refs[i] for i in doc.get("shown", ()) if i in refs),
                swapped=tuple(refs[i] for i in doc.get("swapped", ()) if i in refs),
                changed=tuple(refs[i] for i in doc.get("rows", ()) if i in refs),
            )
        )
    return out
