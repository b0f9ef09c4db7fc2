"""Catalog rows ↔ model values (no transactions here)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from lamina.core.interval import Granularity, Interval, from_us
from lamina.core.lineage import LineageEntry, LineageState
from lamina.core.model import Commit, TableRecord
from lamina.core.segment import Segment


def table_record(row: Any) -> TableRecord:
    """A ``lamina_tables`` row as a :class:`TableRecord` (its schema decoded on use)."""
    return TableRecord(
        id=int(row.id),
        name=row.name,
        schema=bytes(row.schema_ipc),
        time_column=row.time_column,
        granularity=Granularity(row.granularity),
        properties=json.loads(row.properties),
    )


def segment_of(m: Mapping[str, Any], table: str, root: str | None = None) -> Segment:
    """A ``lamina_segments`` row (mapping) as a Segment; ``root`` makes its location
    absolute."""
    loc = m["location"]
    return Segment(
        table=table,
        interval=Interval.of(m["start_us"], m["end_us"]),
        version=m["version"],
        partition_id=m["partition_id"],
        num_core_partitions=m["num_core_partitions"],
        location=(f"{root}/{loc}" if root is not None else loc) if loc else None,
        row_count=m["row_count"],
        size_bytes=m["size_bytes"],
        min_time=m["min_time"],
        max_time=m["max_time"],
        commit_id=m.get("commit_id"),
        suffix=m.get("suffix") or "",
        minor_version=m.get("minor_version") or 0,
        root_partition_range=(m["root_start"], m["root_end"]) if m.get("minor_version") else None,
        atomic_update_group_size=(m.get("aug_size") or 1) if m.get("minor_version") else 1,
    )


def segment_values(seg: Segment) -> dict[str, Any]:
    """Insert values of a new segment (its location relative to the warehouse)."""
    return {
        "segment_id": seg.id,
        "suffix": seg.suffix,
        "start_us": seg.interval.start,
        "end_us": seg.interval.end,
        "version": seg.version,
        "partition_id": seg.partition_id,
        "num_core_partitions": seg.num_core_partitions,
        "location": seg.location,
        "row_count": seg.row_count,
        "size_bytes": seg.size_bytes,
        "min_time": seg.min_time,
        "max_time": seg.max_time,
        "minor_version": seg.minor_version,
        "root_start": seg.root_range[0],
        "root_end": seg.root_range[1],
        "aug_size": seg.atomic_update_group_size,
    }


def commit_of(
    row: Any,
    table: str,
    added: tuple[str, ...] = (),
    removed: tuple[str, ...] = (),
) -> Commit:
    """A ``lamina_commits`` row as a Commit."""
    return Commit(
        id=int(row.id),
        action=row.action,
        state=row.state,
        started_at=from_us(row.started_at),
        completed_at=Commit.time(row.completed_at),
        table=table,
        added=added,
        removed=removed,
        metadata=json.loads(row.metadata),
        seq=None if row.seq is None else int(row.seq),
        base_seq=None if row.base_seq is None else int(row.base_seq),
        inflight_at=Commit.time(getattr(row, "inflight_at", None)),
    )


def entry_of(
    row: Any, lists: Mapping[tuple[str, str], list[str]], seq: int | None = None
) -> LineageEntry | None:
    """A lineage row as the entry stood at snapshot ``seq`` (None: now); None if it
    had not started by then."""
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
