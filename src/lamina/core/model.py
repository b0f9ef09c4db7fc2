"""The catalog's data, as plain immutable values shared by every layer.

Nothing here reads a database or a file: the catalog modules (``lamina.meta``) build
these from rows, the pure rules (``lamina.core``) decide on them, and engines and the
table facade consume them.
"""

from __future__ import annotations

import datetime as dt
import enum
import json
from collections.abc import Mapping
from dataclasses import FrozenInstanceError, dataclass, field
from typing import TYPE_CHECKING, Any

from lamina.core.interval import Granularity, Interval, from_us
from lamina.core.properties import UPSERT_KEY_PROPERTY
from lamina.core.segment import Segment
from lamina.errors import MetadataError, TransactionError

if TYPE_CHECKING:
    import pyarrow as pa


class CommitState(enum.StrEnum):
    """REQUESTED -> INFLIGHT -> COMPLETED, or ABORTED from either open state."""

    REQUESTED = "REQUESTED"
    INFLIGHT = "INFLIGHT"
    COMPLETED = "COMPLETED"
    ABORTED = "ABORTED"


OPEN_STATES = (CommitState.REQUESTED.value, CommitState.INFLIGHT.value)
#: the reason an aborted commit records when its writer was found gone
WRITER_GONE = "its writer is gone (its process ended, or its heartbeat went stale)"


class CommitAction(enum.StrEnum):
    """What a commit did: a write of files, or a catalog-only change."""

    APPEND = "APPEND"
    OVERWRITE = "OVERWRITE"
    REFRESH = "REFRESH"
    DELETE = "DELETE"
    START_REPLACE = "START_REPLACE"
    END_REPLACE = "END_REPLACE"
    REVERT_REPLACE = "REVERT_REPLACE"
    COMPACT = "COMPACT"  # a minor compaction (a major one is an OVERWRITE)
    UPSERT = "UPSERT"  # records of an upsert table, resolved by key at publish
    ALTER = "ALTER"  # a schema change: columns added (no files)
    DELETE_ROWS = "DELETE_ROWS"  # rows matching a predicate hidden (t.delete)
    UPDATE = "UPDATE"  # rows hidden and written again, changed (t.update)
    MERGE = "MERGE"  # a merge of a source into the table (t.merge)
    RESTORE = "RESTORE"  # the table made again what an earlier version showed (no files)


@dataclass(frozen=True)
class Commit:
    """One recorded write. ``id`` grows strictly; readers can go back to any completed one."""

    id: int
    action: str
    state: str
    started_at: dt.datetime
    completed_at: dt.datetime | None
    table: str = ""
    added: tuple[str, ...] = field(default=(), repr=False)
    removed: tuple[str, ...] = field(default=(), repr=False)
    metadata: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    #: completion order: the snapshot seq this commit produced (None until completed)
    seq: int | None = None
    #: the snapshot seq the write started from (its optimistic-concurrency base)
    base_seq: int | None = None
    #: when it went REQUESTED -> INFLIGHT (``started_at`` is when it was REQUESTED)
    inflight_at: dt.datetime | None = field(default=None, compare=False)
    #: True on what an exactly-once write (``txn=``) returns when it wrote nothing:
    #: its application had recorded that version, or a later one, in this commit
    already_applied: bool = field(default=False, compare=False)

    @staticmethod
    def time(us: int | None) -> dt.datetime | None:
        return None if us is None else from_us(us)

    @property
    def version(self) -> int | None:
        """The table version this commit made (what ``as_of`` and the change feed take):
        the table's commit sequence, 1 for its first commit; None until completed."""
        return self.seq


#: What ``as_of`` takes: a table version, the :class:`Commit` a write returned, a time
#: (a datetime, naive = UTC; a date; an ISO-8601 string) — the latest version completed
#: at or before it — or None (the latest snapshot). See :mod:`lamina.core.versions`.
AsOf = int | Commit | dt.datetime | dt.date | str | None


class TableRecord:
    """A table's catalog row (immutable). ``schema`` may be given as its Arrow IPC
    bytes, decoded on first use: reading table rows needs no pyarrow."""

    __slots__ = ("id", "name", "_schema", "time_column", "granularity", "properties")
    id: int
    name: str
    _schema: pa.Schema | bytes
    time_column: str | None
    granularity: Granularity
    properties: dict[str, str]  # not compared

    def __init__(
        self,
        id: int,
        name: str,
        schema: pa.Schema | bytes,
        time_column: str | None,
        granularity: Granularity,
        properties: dict[str, str],
    ) -> None:
        values = (id, name, schema, time_column, granularity, properties)
        for slot, value in zip(self.__slots__, values, strict=True):
            object.__setattr__(self, slot, value)

    @property
    def is_upsert(self) -> bool:
        """Whether this is an upsert table: one with a primary key (docs/upserts.md).
        The one place that tells the table kinds apart by their properties."""
        return UPSERT_KEY_PROPERTY in self.properties

    @property
    def schema(self) -> pa.Schema:
        found = self._schema
        if isinstance(found, bytes):
            import pyarrow as pa  # loads numpy, pyarrow

            found = pa.ipc.read_schema(pa.py_buffer(found))
            object.__setattr__(self, "_schema", found)
        return found

    def with_properties(self, properties: dict[str, str]) -> TableRecord:
        """The same table with other properties."""
        return TableRecord(
            self.id, self.name, self._schema, self.time_column, self.granularity, properties
        )

    def with_schema(self, schema: pa.Schema | bytes) -> TableRecord:
        """The same table with another schema (an earlier one, for an older snapshot)."""
        return TableRecord(
            self.id, self.name, schema, self.time_column, self.granularity, self.properties
        )

    def _key(self) -> tuple[Any, ...]:
        return (self.id, self.name, self.schema, self.time_column, self.granularity)

    def __reduce__(self) -> tuple[Any, ...]:  # pickle, copy: through __init__
        values = (self.id, self.name, self._schema, self.time_column, self.granularity)
        return (TableRecord, (*values, self.properties))

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, TableRecord)
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (
            f"TableRecord(id={self.id!r}, name={self.name!r}, schema={self.schema!r}, "
            f"time_column={self.time_column!r}, granularity={self.granularity!r}, "
            f"properties={self.properties!r})"
        )


@dataclass(frozen=True, slots=True)
class NewSegment:
    """A written file to publish into ``chunk``; identity is assigned at publish time."""

    chunk: Interval
    location: str  # relative to the warehouse root
    row_count: int
    size_bytes: int
    min_time: int | None
    max_time: int | None


@dataclass(frozen=True)
class CompactedRun:
    """A minor compaction's written outputs for one run: they replace ``inputs`` (ids)
    at the same ``version``, as one atomic update group of a higher minor version."""

    chunk: Interval
    version: int
    inputs: tuple[str, ...]
    root_range: tuple[int, int]
    minor_version: int
    num_core_partitions: int
    files: tuple[NewSegment, ...]
    #: upsert tables: per output file, where its rows came from (see :class:`RowMap`)
    row_maps: tuple[RowMap, ...] = ()


@dataclass(frozen=True)
class RowMap:
    """Where each row of a compacted file came from: ``sources`` (input file
    locations), and per output row the index of its source and its row there. Lets
    the publish carry the inputs' deletion vectors onto the output."""

    sources: tuple[str, ...]
    source: Any  # numpy int array, one per output row
    row: Any  # numpy int array, one per output row


@dataclass(frozen=True)
class Snapshot:
    """A table's live segments as of one completed commit (``seq`` 0 = empty table)."""

    table: TableRecord
    seq: int
    commit_id: int | None
    segments: list[Segment]


#: Commit metadata keys lamina writes itself: compactions, lineage transitions and the
#: change feed read them, so a user's commit may not carry them.
RESERVED_METADATA = frozenset(
    {
        "compaction",
        "entry",
        "fingerprint",
        "granularity",
        "lineage_entry",
        "restored_version",
        "rollup",
        "row_change",
        "runs",
        "segments_from",
        "segments_to",
        "sort_by",
        "spark_query_id",
        "state",
    }
)


def user_metadata(metadata: Any) -> dict[str, Any]:
    """A copy of a user's commit metadata (None: empty). Raises MetadataError."""

    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping) or not all(isinstance(k, str) for k in metadata):
        raise MetadataError(
            f"metadata={metadata!r}: pass a dict of string keys, e.g. metadata={{'job': 'nightly'}}"
        )
    taken = sorted(RESERVED_METADATA.intersection(metadata))
    if taken:
        raise MetadataError(
            f"metadata keys {taken} are lamina's own (it marks compactions and lineage "
            "transitions with them); rename them, e.g. with a prefix of yours"
        )
    try:
        json.dumps(dict(metadata), allow_nan=False)
    except RecursionError:
        raise MetadataError("metadata is nested too deeply to store as JSON: flatten it") from None
    except (TypeError, ValueError) as exc:
        raise MetadataError(
            f"metadata must hold JSON values (str, numbers, bools, None, lists, dicts): {exc}"
        ) from None
    return dict(metadata)


def txn_of(txn: Any) -> tuple[str, int]:
    """``(app_id, version)``: a non-empty string and a non-negative int.
    Raises TransactionError."""
    ok = (
        isinstance(txn, tuple)
        and len(txn) == 2
        and isinstance(txn[0], str)
        and txn[0]
        and isinstance(txn[1], int)
        and not isinstance(txn[1], bool)
        and txn[1] >= 0
        and txn[1] < 2**63
        and len(txn[0]) <= MAX_APP_ID
    )
    if not ok:
        raise TransactionError(
            f"txn={txn!r}: pass (app_id, version) — a non-empty string of at most "
            f"{MAX_APP_ID} characters and a version >= 0 (below 2**63), "
            "e.g. txn=('nightly-load', 42)"
        )
    return txn[0], txn[1]


#: the longest exactly-once application id (the catalog's column)
MAX_APP_ID = 256
