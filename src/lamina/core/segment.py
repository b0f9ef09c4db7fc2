"""Segments: immutable Parquet files covering one time chunk at one version."""

from __future__ import annotations

from dataclasses import dataclass, field

from lamina.core.interval import Interval, format_us


def _compact(us: int) -> str:
    text = format_us(us)
    return text.replace(":", "").replace("-", "") if text[0] not in "-+" else text[0] + "inf"


@dataclass(frozen=True, slots=True)
class Segment:
    """One immutable data file of a table.

    Identity is ``(table, interval, version, partition_id)``; everything else is
    description. ``num_core_partitions`` = n > 0 means the chunk of this version is
    complete only once partitions ``0..n-1`` are all present; n = 0 means any set
    of partitions is complete. A segment without ``location`` is a tombstone: it
    holds no rows but overshadows what lies below it.
    """

    table: str
    interval: Interval
    version: int
    partition_id: int
    num_core_partitions: int = field(default=0, compare=False)
    location: str | None = field(default=None, compare=False)
    row_count: int = field(default=0, compare=False)
    size_bytes: int = field(default=0, compare=False)
    min_time: int | None = field(default=None, compare=False)
    max_time: int | None = field(default=None, compare=False)
    commit_id: int | None = field(default=None, compare=False)
    suffix: str = field(default="", compare=False)

    @property
    def id(self) -> str:
        """Readable unique name: ``table_start_end_vVERSION_pPARTITION[_suffix]``."""
        iv = self.interval
        name = (
            f"{self.table}_{_compact(iv.start)}_{_compact(iv.end)}"
            f"_v{self.version}_p{self.partition_id}"
        )
        return f"{name}_{self.suffix}" if self.suffix else name

    @property
    def is_tombstone(self) -> bool:
        return self.location is None

    def __repr__(self) -> str:
        return f"Segment({self.id!r}, rows={self.row_count})"
