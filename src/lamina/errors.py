"""Typed errors. Every error a user can cause derives from :class:`LaminaError`."""

from __future__ import annotations

import datetime as dt


class LaminaError(Exception):
    """Base class of every error lamina raises for bad input or a refused operation."""


class InvalidIntervalError(LaminaError, ValueError):
    """An interval string or value could not be understood, or is not aligned."""


class InvalidGranularityError(LaminaError, ValueError):
    """A segment granularity name is not one of the supported ones."""


class TableNotFoundError(LaminaError, KeyError):
    """The named table does not exist in the catalog."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class TableExistsError(LaminaError):
    """A table with that name already exists."""


class InvalidTableNameError(LaminaError, ValueError):
    """A table name is empty, too long or has characters outside [A-Za-z0-9_]."""


class SchemaError(LaminaError):
    """A schema is invalid, or data does not match the table's schema."""


class UnsupportedTypeError(SchemaError):
    """A column's type has no Parquet representation lamina can store (union, interval...)."""


class TimeColumnError(LaminaError):
    """The time column is missing, of an unsupported type, or holds nulls."""


class DataOutsideIntervalError(LaminaError):
    """Rows fall outside the interval an overwrite was restricted to."""


class TimelineError(LaminaError):
    """Segments violate a timeline invariant (e.g. one version, two overlapping intervals)."""


class ChunkLayoutError(TimelineError):
    """Appended rows fall in a chunk that several versions, or chunks of another
    granularity, cover (``chunk``): there is no one place for them."""

    def __init__(self, message: str, chunk: object = None) -> None:
        super().__init__(message)
        self.chunk = chunk


class CatalogUnavailableError(LaminaError):
    """The catalog database cannot be reached or opened."""


class CatalogNotFoundError(CatalogUnavailableError):
    """No catalog (or no warehouse) exists where a call that creates nothing looked:
    ``connect(create=False)``, or a ``lamina`` command that only reads."""


class ConfigError(LaminaError):
    """A ``.lamina.toml`` file cannot be read, or names a setting lamina does not have."""


class WarehouseError(LaminaError):
    """The warehouse location is not usable (not writable, not a directory, ...)."""


class ConcurrentWriteError(LaminaError):
    """Another writer holds the table; retry later or raise the wait timeout."""


class CommitError(LaminaError):
    """A commit could not be published (aborted meanwhile, files missing, ...)."""


class SnapshotNotFoundError(LaminaError):
    """The requested snapshot (an ``as_of`` version or time) does not exist or cannot be
    read any more."""


class SnapshotTooOldError(SnapshotNotFoundError):
    """An ``as_of`` before the oldest snapshot a table can give: before its first
    commit, or older than what retention kept. ``earliest_version`` and
    ``earliest_time``: the oldest readable one (None: the table has no commit)."""

    def __init__(
        self,
        message: str,
        earliest_version: int | None = None,
        earliest_time: dt.datetime | None = None,
    ) -> None:
        super().__init__(message)
        self.earliest_version = earliest_version
        self.earliest_time = earliest_time


class ChangeFeedError(LaminaError):
    """A stream of a table's appended rows met a commit that deleted or replaced rows."""


class InvalidArgumentError(LaminaError, ValueError):
    """An argument of a call has a type or value the call cannot take (a flag that is
    not a bool, a count that is not a whole number)."""


class UnsupportedInputError(LaminaError, TypeError):
    """The object given as data is not something lamina can read."""


class SegmentNotFoundError(LaminaError, KeyError):
    """A segment id that the table does not have (or no longer has)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class PropertyError(LaminaError, ValueError):
    """A table property has a value lamina cannot use."""


class LineageError(LaminaError):
    """A lineage transition that the protocol does not allow."""


class LineageEntryNotFoundError(LineageError):
    """No lineage entry with that id in this table."""


class LineageRequestError(LineageError):
    """A lineage request wrong whatever the table's state (a segment listed twice, a
    segments_to name of lamina's own form, ...): REST answers 400, not 409."""


class RestoreError(LaminaError):
    """A restore that could not make the table exactly what the version showed (an
    upsert table, rows a deletion vector hid since): nothing changed."""


class SqlError(LaminaError):
    """DuckDB rejected the query."""


class InputFileError(LaminaError):
    """An input file is missing, of an unknown format, or holds values that cannot be read."""


class CommitConflictError(LaminaError):
    """A commit that completed after this write began conflicts with it; the write
    left nothing visible. ``other``: that commit's id; ``retryable``: whether
    writing again on the newer snapshot is safe (see lamina.core.conflicts)."""

    def __init__(self, message: str, other: int | None = None, retryable: bool = False) -> None:
        super().__init__(message)
        self.other = other
        self.retryable = retryable


class LockError(LaminaError, ValueError):
    """A lock request is malformed (type, interval, priority)."""


class LockTimeoutError(LaminaError):
    """A lock could not be granted within ``wait_s``: other holders kept it."""


class LockRevokedError(CommitError):
    """A higher-priority lock request revoked this transaction's lock: its commit is
    not published (a :class:`CommitError`)."""


class TransactionError(LaminaError):
    """A transaction was used wrongly: closed already, unknown isolation, or an
    append and an overwrite of one chunk in it."""


class StreamCheckpointError(TransactionError):
    """A ``foreach_batch`` micro-batch from a streaming query other than the one that
    last wrote under its app id: a new checkpoint under an old app id, whose batch
    ids start again at 0 and would be skipped as written already."""


class AlreadyAppliedError(LaminaError):
    """An exactly-once write whose version its application already recorded: skipped.
    ``commit_id``: the commit that recorded it. Writes return that commit instead of
    raising; the error reaches callers of the lower layers only."""

    def __init__(self, message: str, commit_id: int) -> None:
        super().__init__(message)
        self.commit_id = commit_id


class MetadataError(LaminaError, ValueError):
    """Commit metadata that lamina cannot keep: not a mapping of string keys to JSON
    values, or a key lamina writes itself (``compaction``, ``entry``, ...)."""


class CompactionError(LaminaError, ValueError):
    """A compaction request breaks a rule: inputs not adjacent, an unknown column to
    sort or roll up by, an impossible granularity change, a non-numeric metric."""


class UpsertError(LaminaError, ValueError):
    """An upsert definition or input breaks a rule: an unknown or nullable key column, a
    comparison column without an order, a delete column that is not boolean, an unknown
    partial-upsert strategy or one that cannot merge its column, null keys or comparison
    values in the data (see lamina.core.upsert)."""


class KeyIndexFileError(LaminaError):
    """A key index file is missing, truncated, damaged or of another version: rebuild
    the index from the table's segments (or restore the file)."""


class ServeError(LaminaError):
    """The REST server cannot listen where it was asked (the port is taken, the address
    is not this machine's): pick another --port or --host."""


class RowLevelError(LaminaError, ValueError):
    """A row-level delete, update or merge that cannot run as asked: its predicate or a
    set expression names an unknown column or fails on the column's type, it updates a
    key column of an upsert table, or a merge source holds several rows for one target
    row. Nothing was changed."""
