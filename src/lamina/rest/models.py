"""The REST API's request and response bodies (pydantic models) and their making
from lamina's records; :mod:`lamina.rest` serves them."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import HTTPException, status
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from lamina.core.lineage import LineageEntry
from lamina.core.segment import Segment

_MAX_SEGMENTS = 100_000  # per list in a request body

SegmentId = Annotated[str, StringConstraints(min_length=1, max_length=512)]

# -- models ------------------------------------------------------------------------------


class ApiModel(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="forbid")


class ApiRequest(ApiModel):
    """A request body: values of the declared JSON types only (``true`` is no count)."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid", strict=True)


class TableInfo(ApiModel):
    name: str
    time_column: str | None = Field(alias="timeColumn")
    granularity: str
    properties: dict[str, str]


class SegmentInfo(ApiModel):
    id: str
    interval: str = Field(description="START/END, ISO-8601 UTC, half-open.")
    version: int
    partition: int
    rows: int
    bytes: int
    tombstone: bool = Field(description="Holds no rows; hides what lies below it.")
    added_in_version: int | None = Field(
        default=None,
        alias="addedInVersion",
        description="The table version whose commit published it (what as_of takes).",
    )
    commit_id: int | None = Field(alias="commitId", description="The catalog's commit id.")


class LineageEntryInfo(ApiModel):
    id: str
    segments_from: list[str] = Field(alias="segmentsFrom")
    segments_to: list[str] = Field(alias="segmentsTo")
    state: str = Field(description="IN_PROGRESS, COMPLETED or REVERTED.")
    timestamp: datetime


_CUSTOM_MAP = (
    "Pinot's custom map of the lineage: lamina keeps none, so only null or {} (what "
    "Pinot's clients send by default)."
)


class _LineageRequest(ApiRequest):
    custom_map: dict[str, str] | None = Field(
        None,
        alias="customMap",
        description=_CUSTOM_MAP,
        json_schema_extra={"maxProperties": 0},  # one with entries: 400, named
    )

    def refuse_custom_map(self) -> None:
        """400 for a custom map with entries (lamina would drop them)."""
        if self.custom_map:
            raise HTTPException(
                status.HTTP_400_BAD_REQUEST,
                "lamina keeps no customMap for lineage entries; send null or leave it out",
            )


class StartReplaceRequest(_LineageRequest):
    segments_from: list[SegmentId] | None = Field(
        None,
        alias="segmentsFrom",
        max_length=_MAX_SEGMENTS,
        description="Live segments the replacement hides once it ends (null: none).",
    )
    segments_to: list[SegmentId] | None = Field(
        None,
        alias="segmentsTo",
        max_length=_MAX_SEGMENTS,
        description="New segment names (null: none); segments written under the entry join them.",
    )


class EndReplaceRequest(_LineageRequest):
    segments_to: list[SegmentId] | None = Field(
        None,
        alias="segmentsTo",
        max_length=_MAX_SEGMENTS,
        description="Of the segmentsTo given at start, those still awaited.",
    )


class StartReplaceResponse(ApiModel):
    segment_lineage_entry_id: str = Field(alias="segmentLineageEntryId")


class ReplaceResult(ApiModel):
    segment_lineage_entry_id: str = Field(alias="segmentLineageEntryId")
    state: str = Field(description="The entry's state after the call.")


class ChunkCompactionInfo(ApiModel):
    interval: str = Field(description="The chunk, START/END.")
    status: str = Field(description="PENDING, COMPLETE or SKIPPED under the table's policy.")
    action: str = Field(description="What auto-compaction does: minor, major or none.")
    segments: int
    small: int = Field(description="Segments below the policy's small-segment size.")
    reason: str


class CompactRequest(ApiRequest):
    mode: str = Field("minor", description="minor (merge small segments) or major (rewrite).")
    interval: str | None = Field(None, description="START/END; default: the whole table.")
    segment_granularity: str | None = Field(None, alias="segmentGranularity")
    sort_by: list[Annotated[str, StringConstraints(min_length=1)]] | None = Field(
        None, alias="sortBy"
    )
    # lax: JSON Schema's integer takes 2.0 as 2 (a fraction stays refused)
    target_rows_per_segment: int | None = Field(
        None, alias="targetRowsPerSegment", ge=1, strict=False
    )


class CompactResult(ApiModel):
    commit_id: int | None = Field(alias="commitId", description="None: nothing to compact.")
    table_version: int | None = Field(
        None,
        alias="tableVersion",
        description="The table version the compaction made (what as_of takes); None: none.",
    )
    segments_before: int = Field(alias="segmentsBefore")
    segments_after: int = Field(alias="segmentsAfter")


class ErrorResponse(BaseModel):
    detail: str


class HealthInfo(ApiModel):
    """The server answers and its catalog can be read."""

    status: str = Field(description="ok")
    version: str = Field(description="lamina's version")
    tables: int = Field(description="how many tables the catalog holds")


def segment_info(s: Segment, added_in: dict[int, int | None] | None = None) -> SegmentInfo:
    """``added_in``: the table version of each commit id (``t.history()``)."""
    return SegmentInfo(
        id=s.id,
        interval=str(s.interval),
        version=s.version,
        partition=s.partition_id,
        rows=s.row_count,
        bytes=s.size_bytes,
        tombstone=s.location is None,
        addedInVersion=None if s.commit_id is None else (added_in or {}).get(s.commit_id),
        commitId=s.commit_id,
    )


def entry_info(e: LineageEntry) -> LineageEntryInfo:
    return LineageEntryInfo(
        id=e.id,
        segmentsFrom=list(e.segments_from),
        segmentsTo=list(e.segments_to),
        state=str(e.state),
        timestamp=e.timestamp,
    )
