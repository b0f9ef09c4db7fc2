"""Response (and request) bodies of the console's REST calls: table summaries, timeline
aggregates, a chunk's segments, commits, locks and writers, a revert's preview, SQL."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from lamina.rest.models import ApiModel, ApiRequest

SortKey = Literal[
    "name",
    "rows",
    "bytes",
    "segments",
    "smallShare",
    "supersededShare",
    "lastCommitAge",
    "health",
]
Zoom = Literal["HOUR", "DAY", "WEEK", "MONTH", "QUARTER", "YEAR"]


class TableSummary(ApiModel):
    name: str
    rows: int = Field(description="Rows of the published data segments not yet removed.")
    bytes: int
    segments: int
    small_segments: int = Field(alias="smallSegments")
    small_share: float = Field(alias="smallShare", description="Small segments / segments.")
    superseded_share: float | None = Field(
        alias="supersededShare", description="Rows deletion vectors hide / rows (upsert tables)."
    )
    last_commit_age_s: float | None = Field(alias="lastCommitAgeS")
    open_writers: int = Field(alias="openWriters")
    health: str = Field(description="ok, warn or empty.")
    reason: str = Field(description="Why the mark, written out.")


class TableSummaryPage(ApiModel):
    total: int
    offset: int
    limit: int
    sort_by: SortKey = Field(alias="sortBy")
    order: Literal["asc", "desc"]
    items: list[TableSummary]


class VersionCellInfo(ApiModel):
    version: int
    state: str = Field(description="visible, partial (partly overshadowed) or overshadowed.")
    segments: int
    rows: int
    minor_version: int = Field(alias="minorVersion", description="Highest minor version.")
    tombstone: bool


class BucketInfo(ApiModel):
    start: str
    end: str
    chunks: int = Field(description="Chunk intervals overlapping the bucket.")
    visible_version: int | None = Field(alias="visibleVersion")
    overshadowed_versions: int = Field(alias="overshadowedVersions")
    segments: int = Field(description="Published segments not removed.")
    rows: int = Field(description="Rows of the versions not overshadowed.")
    bytes: int
    small_segments: int = Field(alias="smallSegments")
    locks: int = Field(description="Held or waiting task locks overlapping the bucket.")
    deletion_vectors: int = Field(alias="deletionVectors", description="Files with some.")
    pending_compaction: int | None = Field(
        default=None,
        alias="pendingCompaction",
        description="Chunks the table's compaction policy makes PENDING (as `lamina compact "
        "--auto --dry-run` says), as of pendingAsOfVersion; null until a first survey.",
    )
    versions: list[VersionCellInfo] = Field(description="Highest first.")


class TimelineInfo(ApiModel):
    table: str
    interval: str = Field(description="The range shown, START/END (aligned to the zoom).")
    zoom: Zoom
    pending_as_of_version: int | None = Field(
        default=None,
        alias="pendingAsOfVersion",
        description="The table version the buckets' pendingCompaction is of: a table of "
        "more than 50,000 segments is surveyed in the background, so it may be older than "
        "the latest; null while the first survey runs.",
    )
    buckets: list[BucketInfo]


class ChunkSegmentInfo(ApiModel):
    id: str
    interval: str
    version: int
    partition: int
    minor_version: int = Field(alias="minorVersion")
    rows: int
    bytes: int
    superseded_share: float = Field(alias="supersededShare")
    commit_id: int | None = Field(alias="commitId")
    state: str = Field(
        description="visible, overshadowed, lineage (hidden by a lineage entry) or removed."
    )


class CommitInfo(ApiModel):
    id: int
    action: str
    state: str
    version: int | None = Field(
        description="The table version it made (completed commits): what as_of, "
        "AT (VERSION => n) and the change feed take."
    )
    txn: str | None = Field(description="An exactly-once write's application version.")
    writer: str
    started_at: str = Field(alias="startedAt")
    duration_ms: float | None = Field(alias="durationMs")
    segments_added: int = Field(alias="segmentsAdded")
    segments_removed: int = Field(alias="segmentsRemoved")
    rows_added: int = Field(alias="rowsAdded")
    rows_removed: int = Field(alias="rowsRemoved")
    reason: str | None = Field(
        default=None, description="Why an ABORTED commit ended (a conflict, a revoked lock...)."
    )


class CommitPage(ApiModel):
    total: int
    items: list[CommitInfo]


class LockRowInfo(ApiModel):
    id: int
    type: str
    interval: str
    priority: int
    state: str
    commit_id: int = Field(alias="commitId")
    holder: str
    action: str | None
    heartbeat_age_s: float | None = Field(alias="heartbeatAgeS")
    segments: int = Field(description="A SEGMENT lock's segment count.")


class WriterInfo(ApiModel):
    commit_id: int = Field(alias="commitId")
    action: str
    state: str
    owner: str
    age_s: float = Field(alias="ageS")
    heartbeat_age_s: float = Field(alias="heartbeatAgeS")


class AbortInfo(ApiModel):
    commit_id: int = Field(alias="commitId")
    action: str
    owner: str
    ended_at: str = Field(alias="endedAt")
    kind: Literal["conflict", "lock revoked", "writer gone", "failed"]
    reason: str


class LocksInfo(ApiModel):
    locks: list[LockRowInfo]
    writers: list[WriterInfo]
    recent_aborts: list[AbortInfo] = Field(
        alias="recentAborts",
        description="The latest aborted commits, newest first, with what ended them.",
    )


class RevertPreview(ApiModel):
    segment_lineage_entry_id: str = Field(alias="segmentLineageEntryId")
    state: str
    rows_now: int = Field(alias="rowsNow", description="Rows the entry's segments show now.")
    rows_after: int = Field(alias="rowsAfter", description="Rows readers see there after.")
    segments_shown: list[str] = Field(alias="segmentsShown")
    segments_hidden: list[str] = Field(alias="segmentsHidden")
    summary: str


class SqlRequest(ApiRequest):
    query: str = Field(min_length=1, max_length=100_000)
    max_rows: int = Field(1000, alias="maxRows", ge=1, le=10_000, strict=False)
    timeout_s: int = Field(
        10, alias="timeoutS", ge=1, le=300, strict=False, description="Whole seconds."
    )


class SqlColumn(ApiModel):
    name: str
    type: str


class SqlResult(ApiModel):
    columns: list[SqlColumn]
    rows: list[list[Any]]
    truncated: bool = Field(description="More rows than maxRows: the rest left out.")
    elapsed_ms: float = Field(alias="elapsedMs")


class ChangeFeed(ApiModel):
    """The change feed between two table versions (``t.read_changes``)."""

    after_version: int = Field(alias="afterVersion")
    until_version: int = Field(alias="untilVersion")
    inserts: int
    deletes: int
    columns: list[SqlColumn]
    rows: list[list[Any]]
    truncated: bool = Field(description="More rows than limit: the rest left out.")


class ChunkSuperseded(ApiModel):
    interval: str
    rows: int = Field(description="Rows stored in the chunk's visible segments.")
    superseded: int = Field(description="Of them, rows deletion vectors hide.")
    share: float


class KeyIndexInfo(ApiModel):
    """An upsert table's key index (as ``lamina keys`` reports it) and where its
    superseded rows lie."""

    primary_key: list[str] = Field(alias="primaryKey")
    version: int = Field(description="The table version the index is up to date with.")
    keys: int = Field(description="Keys with a latest record (live tombstones included).")
    index_bytes: int = Field(alias="indexBytes")
    bytes_per_key: float = Field(alias="bytesPerKey")
    files: int = Field(description="Data files the index points into.")
    hidden_rows: int = Field(alias="hiddenRows")
    files_with_vectors: int = Field(alias="filesWithVectors")
    load_seconds: float = Field(
        alias="loadSeconds", description="Time this call took to bring the index up to date."
    )
    chunks: int = Field(description="Chunks holding visible data.")
    most_superseded: list[ChunkSuperseded] = Field(alias="mostSuperseded")
