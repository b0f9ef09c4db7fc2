"""What a commit publishes: one plan type per kind of write, over shared fields.

A write's files become segments in :func:`lamina.meta.publish.publish`, which asks
every plan the same questions — which chunks it overwrites, which files it appends,
which compaction runs it installs — and each kind answers for itself (as pyiceberg's
snapshot producers do over one base):

==============================  =======================================================
:class:`AppendPlan`             files appended into each chunk's visible version
:class:`UpsertPlan`             an append whose records are resolved by key at publish
:class:`CopyOnWritePlan`        an upsert that also rewrites the files it supersedes
                                records in
:class:`OverwritePlan`          files that replace chunks (an overwrite, a refresh)
:class:`MinorCompactionPlan`    runs of segments replaced by their compacted files
:class:`TransactionPlan`        a transaction's operations — an overwrite, appends
                                beside it, deletes — together, as one commit
:class:`MajorCompactionPlan`    a transaction rewriting rows it read at its base
:class:`RowLevelPlan`           a row-level delete, update or merge: rows of the files
                                it read hidden (deletion vectors, or copies without
                                them), new rows appended
:class:`RestorePlan`            no file: an earlier version's segments again, on their
                                own files, in place of the latest's
==============================  =======================================================

Catalog-only commits (no files) have plans too — :class:`DeletePlan`,
:class:`LineagePlan`, :class:`AlterPlan` — so that every commit passes the one check
before it is recorded (:func:`lamina.meta.publish_checks.check`), which decides by the
plan's kind what applies.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, ClassVar

from lamina.core.conflicts import Isolation
from lamina.core.interval import ETERNITY, Interval
from lamina.core.model import CommitAction, CompactedRun, NewSegment

if TYPE_CHECKING:
    import pyarrow as pa

    from lamina.core.upsert import UpsertBatch


@dataclass(frozen=True)
class LineageBatch:
    """A batch of a consistent push: published hidden, as segments_to of lineage entry
    ``entry``; ``ends``: the batch that ends the entry (visible with this very commit)."""

    entry: str
    ends: bool = False


def _merged(spans: Sequence[Interval]) -> tuple[Interval, ...]:
    """``spans`` sorted, adjacent and overlapping ones merged."""
    out: list[Interval] = []
    for iv in sorted(spans):
        if out and iv.start <= out[-1].end:
            out[-1] = Interval.of(out[-1].start, max(out[-1].end, iv.end))
        else:
            out.append(iv)
    return tuple(out)


@dataclass(frozen=True, kw_only=True)
class PublishPlan:
    """The fields every kind of write shares; a publish takes one of the subclasses."""

    #: the files written (what each kind does with them: see its class)
    files: tuple[NewSegment, ...] = ()
    #: live segments removed atomically
    remove_ids: tuple[str, ...] = ()
    #: exactly-once: (application id, version); skipped unless above the recorded one
    txn: tuple[str, int] | None = None
    #: the commit holds task locks (checked, and released, when it publishes)
    locked: bool = False
    #: what a replace does with rows appended into its intervals since the write began
    isolation: Isolation = Isolation.WRITE_SERIALIZABLE
    #: an upsert table's records as resolved among themselves, resolved against the
    #: table's key index at publish (see :mod:`lamina.core.upsert`)
    upsert: UpsertBatch | None = None
    #: a push's batch, published under a lineage entry (its segments named ``c<commit>``)
    lineage: LineageBatch | None = None
    #: nullable columns the commit adds at the end of the table's schema, with its files
    #: (a write's ``evolve=True``; a rollup's count column)
    columns: tuple[pa.Field, ...] = ()

    #: a rewrite of rows read at the base (a major compaction): optimistic conflict
    #: rules apply even inside its locks, and it may not retire segments a lineage
    #: entry still names
    rewrites: ClassVar[bool] = False

    def overwrites(self) -> tuple[Interval, ...] | None:
        """The chunks it replaces (tombstoned where no file lands); None: no overwrite."""
        return None

    def appends(self) -> tuple[NewSegment, ...]:
        """The files it appends, each into its chunk's visible version."""
        return self.files

    def compacts(self) -> tuple[CompactedRun, ...]:
        """The minor compaction runs it installs (their inputs are in ``remove_ids``)."""
        return ()

    def written(self) -> tuple[NewSegment, ...]:
        """Its files (a compaction's runs' aside): what it overwrites with, and appends."""
        return self.files

    def adds(self) -> tuple[pa.Field, ...]:
        """The nullable columns its commit adds to the table's schema (none: the schema
        stays), at its end as stored."""
        return self.columns

    def reads(self) -> tuple[str, ...]:
        """The segments (ids) whose rows it read and decided on (a row-level change:
        its conflict check); none for other writes."""
        return ()

    def hides(self) -> Mapping[str, Sequence[int]]:
        """Rows it hides by deletion vectors, per file location (relative to the
        warehouse): positions in the file."""
        return {}

    @property
    def footprint(self) -> tuple[Interval, ...]:
        """The intervals whose rows the commit replaces, adjacent ones merged."""
        return ()

    @property
    def ends_entry(self) -> bool:
        """Whether it is the batch that ends its push's lineage entry."""
        return self.lineage is not None and self.lineage.ends

    def action_of(self, opened: str) -> str:
        """The action the commit records: the one it was ``opened`` with."""
        return opened


@dataclass(frozen=True, kw_only=True)
class AppendPlan(PublishPlan):
    """Files appended: each joins its chunk's visible version (or takes a new one)."""


@dataclass(frozen=True, kw_only=True)
class UpsertPlan(AppendPlan):
    """An upsert's files, appended; its records are resolved by key at publish."""

    upsert: UpsertBatch


@dataclass(frozen=True, kw_only=True)
class CopyOnWritePlan(UpsertPlan):
    """A copy-on-write upsert: its files appended and resolved by key, and in the same
    commit ``runs`` replace the files holding records it supersedes by copies without
    them (``remove_ids``: the runs' inputs). A run whose inputs another commit removed
    meanwhile, or that lies where another commit holds a REPLACE or EXCLUSIVE lock, is
    left out at publish (:meth:`keeping`): its records are hidden by deletion vectors
    instead, as on a merge-on-read table."""

    runs: tuple[CompactedRun, ...] = ()

    def compacts(self) -> tuple[CompactedRun, ...]:
        return self.runs

    def keeping(self, runs: Sequence[CompactedRun]) -> CopyOnWritePlan:
        """The plan with only ``runs`` (of its own) rewritten."""
        kept = tuple(runs)
        return replace(self, runs=kept, remove_ids=tuple(i for r in kept for i in r.inputs))


@dataclass(frozen=True, kw_only=True)
class OverwritePlan(PublishPlan):
    """Files replacing ``chunks``: a new version there, a tombstone for each chunk that
    got no file (an overwrite, a refresh; an upsert table's too, with ``upsert``)."""

    chunks: tuple[Interval, ...]
    #: its intervals, whole (its footprint: what a concurrent write there conflicts
    #: with); None: ``chunks``, which skip empty ones
    replaced: tuple[Interval, ...] | None = None

    def overwrites(self) -> tuple[Interval, ...] | None:
        return self.chunks

    def appends(self) -> tuple[NewSegment, ...]:
        return ()

    @property
    def footprint(self) -> tuple[Interval, ...]:
        return _merged(self.replaced if self.replaced is not None else self.chunks)


@dataclass(frozen=True, kw_only=True)
class MinorCompactionPlan(PublishPlan):
    """Minor compaction runs: each replaces its inputs (``remove_ids``) at their version
    with files of a higher minor version, inside the SEGMENT locks it holds."""

    runs: tuple[CompactedRun, ...]
    locked: bool = True

    def compacts(self) -> tuple[CompactedRun, ...]:
        return self.runs


@dataclass(frozen=True, kw_only=True)
class TransactionPlan(PublishPlan):
    """A transaction's operations as one commit, which may mix kinds: ``files``
    overwrite ``chunks`` and ``append_files`` go into other chunks — or, when it
    overwrites nothing (``chunks`` None), ``files`` are its appends — and
    ``remove_ids`` are deleted. ``action``: what they amount to, recorded."""

    action: CommitAction
    chunks: tuple[Interval, ...] | None = None
    #: its overwrites' intervals, whole (see :attr:`OverwritePlan.replaced`)
    replaced: tuple[Interval, ...] | None = None
    append_files: tuple[NewSegment, ...] = ()

    def overwrites(self) -> tuple[Interval, ...] | None:
        return self.chunks

    def appends(self) -> tuple[NewSegment, ...]:
        return self.files if self.chunks is None else self.append_files

    def written(self) -> tuple[NewSegment, ...]:
        return (*self.files, *self.append_files)

    @property
    def footprint(self) -> tuple[Interval, ...]:
        return _merged(self.replaced if self.replaced is not None else self.chunks or ())

    def action_of(self, opened: str) -> str:
        return self.action.value


@dataclass(frozen=True, kw_only=True)
class MajorCompactionPlan(TransactionPlan):
    """A major compaction: a transaction overwriting its interval with the rows it read
    at its base, inside its REPLACE lock; a rollup's count ``columns`` the table lacked
    are added to its schema by the same commit."""

    rewrites: ClassVar[bool] = True


@dataclass(frozen=True, kw_only=True)
class RowLevelPlan(PublishPlan):
    """A row-level change (``t.delete``, ``t.update``, ``t.merge``) of a plain table:
    ``files`` appended (updated and inserted rows), the rows ``hidden`` of the files it
    read hidden by deletion vectors (merge-on-read) — or, copy-on-write, ``runs``
    replacing those files (``remove_ids``) by copies without them, the rows hidden in
    the replaced files all the same (the change feed reads them there) — checked
    against every commit that changed a segment it ``read`` (:mod:`lamina.core.conflicts`,
    ROWS). ``action``: DELETE_ROWS, UPDATE or MERGE."""

    action: CommitAction
    read: tuple[str, ...] = ()
    hidden: Mapping[str, Sequence[int]] = field(default_factory=dict)
    runs: tuple[CompactedRun, ...] = ()
    #: what its commit's metadata records of it (``row_change``): the rows it deleted,
    #: updated and inserted, its predicate
    summary: Mapping[str, object] = field(default_factory=dict)

    def compacts(self) -> tuple[CompactedRun, ...]:
        return self.runs

    def reads(self) -> tuple[str, ...]:
        return self.read

    def hides(self) -> Mapping[str, Sequence[int]]:
        return self.hidden

    def action_of(self, opened: str) -> str:
        return self.action.value


def write_plan(
    files: Sequence[NewSegment],
    chunks: tuple[Interval, ...] | None,
    *,
    replaced: tuple[Interval, ...] | None = None,
    lineage: LineageBatch | None = None,
    txn: tuple[str, int] | None = None,
    upsert: UpsertBatch | None = None,
    remove_ids: tuple[str, ...] = (),
    columns: tuple[pa.Field, ...] = (),
) -> PublishPlan:
    """The plan of one write of ``files``: an overwrite of ``chunks``, or (None) an
    append — an upsert when its records are resolved by key; ``columns``: the nullable
    columns it adds to the table's schema."""
    written = tuple(files)
    if chunks is not None:
        return OverwritePlan(
            files=written,
            chunks=chunks,
            replaced=replaced,
            remove_ids=remove_ids,
            txn=txn,
            upsert=upsert,
            lineage=lineage,
            columns=columns,
        )
    if upsert is not None:
        return UpsertPlan(
            files=written,
            remove_ids=remove_ids,
            txn=txn,
            upsert=upsert,
            lineage=lineage,
            columns=columns,
        )
    return AppendPlan(
        files=written, remove_ids=remove_ids, txn=txn, lineage=lineage, columns=columns
    )


@dataclass(frozen=True, kw_only=True)
class RestorePlan(PublishPlan):
    """``t.restore``: the table made again what its version ``version`` showed, with no
    file written. At publish, under the table's lock, every live segment of the latest
    snapshot is removed (and those a completed lineage entry hides: a rollback shows
    none) and the segments that version showed come back as new segment rows on the same
    files, their versions renumbered above every version of the table in the same order
    (so they show as they showed then). Conflicts as an overwrite of the whole table
    that saw no concurrent append (serializable)."""

    version: int
    #: files of that version whose rows deletion vectors hid since, by location: each
    #: copied with exactly the rows the version showed (the copy shows in its place)
    copies: tuple[tuple[str, NewSegment], ...] = ()
    isolation: Isolation = Isolation.SERIALIZABLE

    def appends(self) -> tuple[NewSegment, ...]:
        return ()

    @property
    def footprint(self) -> tuple[Interval, ...]:
        return (ETERNITY,)

    def action_of(self, opened: str) -> str:
        return CommitAction.RESTORE.value


# -- catalog-only commits: no files, the same check ----------------------------------


@dataclass(frozen=True)
class DeletePlan:
    """Live segments deleted by id (``t.delete_segments``): their files go with
    retention."""

    remove_ids: tuple[str, ...]


@dataclass(frozen=True)
class LineagePlan:
    """A lineage transition (``action``: START_, END_ or REVERT_REPLACE) of ``entry``:
    the entries it ``moved``, and the id lists, as (entry id, role), of the segments
    whose rows it ``shown`` (an end's segments_to) and ``swapped`` (an end's
    segments_from; both lists of a completed entry's rollback)."""

    action: CommitAction
    entry: str
    moved: tuple[str, ...]
    shown: tuple[tuple[str, str], ...] = ()
    swapped: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class AlterPlan:
    """A schema change (columns added, a type widened): no segment changes."""


#: what :func:`lamina.meta.publish_checks.check` takes: any commit's plan
CommitPlan = PublishPlan | DeletePlan | LineagePlan | AlterPlan
