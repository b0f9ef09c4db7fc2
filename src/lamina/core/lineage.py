"""Segment lineage: atomic replacement of one set of segments by another.

Pure rules, no I/O. An entry says "``segments_to`` replace ``segments_from``":

* IN_PROGRESS — the replacement is being written: readers see ``segments_from``;
* COMPLETED — readers see ``segments_to``, never ``segments_from``;
* REVERTED — undone: readers see ``segments_from`` again, never ``segments_to``.

The rules (Pinot's, plus the fixes of its known holes) are checked here against a
:class:`LineageView` of the table; the catalog applies them inside one transaction.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from lamina.core.segment import in_own_naming
from lamina.errors import LineageEntryNotFoundError, LineageError, LineageRequestError


class LineageState(enum.StrEnum):
    IN_PROGRESS = "IN_PROGRESS"
    COMPLETED = "COMPLETED"
    REVERTED = "REVERTED"


@dataclass(frozen=True)
class LineageEntry:
    """One replacement of ``segments_from`` by ``segments_to``."""

    id: str
    segments_from: tuple[str, ...]
    segments_to: tuple[str, ...]
    state: str
    timestamp: datetime

    @property
    def ids(self) -> set[str]:
        return {*self.segments_from, *self.segments_to}


def hidden_by(entries: Iterable[LineageEntry]) -> set[str]:
    """Segment ids readers must not see: COMPLETED hides ``from``; the others hide ``to``."""
    hidden: set[str] = set()
    for e in entries:
        hidden.update(e.segments_from if e.state == LineageState.COMPLETED else e.segments_to)
    return hidden


@dataclass(frozen=True)
class LineageView:
    """What the rules need to know of a table: its segments and lineage entries."""

    existing: set[str]  # every segment id the table has (any state)
    entries: Sequence[LineageEntry]

    @property
    def live(self) -> set[str]:
        """Segments that exist and that lineage does not hide."""
        return self.existing - hidden_by(self.entries)

    def get(self, entry_id: str) -> LineageEntry:
        for e in self.entries:
            if e.id == entry_id:
                return e
        raise LineageEntryNotFoundError(
            f"no lineage entry {entry_id!r} in this table; list them with t.lineage()"
        )


def check_start(
    view: LineageView, table: str, segments_from: Sequence[str], segments_to: Sequence[str]
) -> list[LineageEntry]:
    """Validate a new entry of ``table``; return the IN_PROGRESS entries it overlaps (the
    caller rejects, or with force_cleanup reverts them). Both lists may be empty:
    segments written under the entry later join its segments_to. A segments_to name in
    lamina's own form of segment ids is refused: an unrelated write could be given that
    id, and the entry would hide (and a revert delete) what it wrote."""
    for name, ids in (("segments_from", segments_from), ("segments_to", segments_to)):
        if len(set(ids)) != len(ids):
            raise LineageRequestError(f"{name} lists a segment twice; list each segment id once")
    both = set(segments_from) & set(segments_to)
    if both:
        raise LineageRequestError(
            f"segments {sorted(both)} are in both segments_from and segments_to"
        )
    unknown = [s for s in segments_from if s not in view.existing]
    if unknown:  # wrong whatever the table's state: no such segment, or gone for good
        raise LineageRequestError(
            f"segments_from must all be live; unknown or removed: {unknown[:5]}"
            + (" ..." if len(unknown) > 5 else "")
            + " — list live segments with t.segments()"
        )
    live = view.live
    missing = [s for s in segments_from if s not in live]
    if missing:  # removed or hidden since: the table's state refuses it
        raise LineageError(
            f"segments_from must all be live; not live: {missing[:5]}"
            + (" ..." if len(missing) > 5 else "")
            + " — list live segments with t.segments()"
        )
    taken = [s for s in segments_to if s in view.existing]
    if taken:
        raise LineageError(f"segments_to must be new segment names; already taken: {taken[:5]}")
    own = [s for s in segments_to if in_own_naming(table, s)]
    if own:
        raise LineageRequestError(
            f"segments_to names {own[:5]} have the form of the ids lamina gives this "
            "table's segments (TABLE_START_END_vVERSION_pPARTITION), so a later write could "
            "take them; pass segments_to=[] and write under the entry, or choose other names"
        )
    wanted = {*segments_from, *segments_to}
    return [e for e in view.entries if e.state == LineageState.IN_PROGRESS and e.ids & wanted]


def check_end(entry_id: str, state: str, unwritten: Sequence[str]) -> bool:
    """Validate completing an entry; False when it is already COMPLETED (idempotent).

    ``unwritten``: segments named in segments_to at start that were never written.
    (Deletes and retention leave an IN_PROGRESS entry's segments_from alone; an
    overwrite retires those in its chunks, whose rows it replaced: the end hides the
    rest.)
    """
    if state == LineageState.COMPLETED:
        return False
    if state == LineageState.REVERTED:
        raise LineageError(
            f"lineage entry {entry_id} was reverted and cannot be ended; start a new one"
        )
    if unwritten:
        raise LineageError(
            f"cannot end {entry_id}: segments_to never written: {list(unwritten)[:5]}"
        )
    return True


def check_revert(entry_id: str, state: str, force: bool, live_successors: Sequence[str]) -> bool:
    """Validate reverting an entry; False when it is already REVERTED (idempotent).

    ``live_successors``: entries (not reverted) that replaced this entry's
    segments_to. A COMPLETED entry can be rolled back only as the newest link of its
    chain; its segments_from still exist for as long as the entry does (retention
    removes the entry together with them).
    """
    if state == LineageState.REVERTED:
        return False
    if state == LineageState.IN_PROGRESS:
        if not force:
            raise LineageError(
                f"lineage entry {entry_id} is still IN_PROGRESS; pass force=True to revert "
                "a push that may still be running"
            )
        return True
    if live_successors:
        raise LineageError(
            f"cannot roll back {entry_id}: newer entries {list(live_successors)} replaced its "
            "segments; revert those first"
        )
    return True


def may_show(entries: Iterable[LineageEntry]) -> set[str]:
    """Segments lineage hides now that a transition can show: an unfinished push's
    ``segments_to`` (by its end), a completed entry's ``segments_from`` (by its
    rollback)."""
    out: set[str] = set()
    for e in entries:
        if e.state == LineageState.IN_PROGRESS:
            out.update(e.segments_to)
        elif e.state == LineageState.COMPLETED:
            out.update(e.segments_from)
    return out


def protected(entries: Iterable[LineageEntry]) -> set[str]:
    """Segments a plain delete must not touch: IN_PROGRESS from/to, COMPLETED from."""
    out: set[str] = set()
    for e in entries:
        if e.state == LineageState.IN_PROGRESS:
            out |= e.ids
        elif e.state == LineageState.COMPLETED:
            out.update(e.segments_from)
    return out


def check_rollback_intact(entry_id: str, live_own: int, written: int) -> None:
    """A COMPLETED entry that owns versions can be rolled back only while its chunks
    hold exactly what it wrote (``live_own`` live segments of its own versions, of
    ``written``): later appends joined them (a rollback would hide their rows) or
    later writes removed them (a rollback would bring back a mix)."""
    if live_own != written:
        raise LineageError(
            f"cannot roll back {entry_id}: later writes changed the chunks it "
            "published (appends joined them, or overwrites/refreshes replaced "
            "them); a rollback would hide rows or mix two snapshots"
        )
