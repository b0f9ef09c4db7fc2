"""Segments: immutable Parquet files covering one time chunk at one version."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from lamina.core.interval import Interval, format_us

#: First partition id of the non-root space: segments of later generations (written by
#: an overwrite at the chunk's own version, e.g. a minor compaction) take ids from
#: here up, so first-generation ids (appends) stay consecutive below it (Druid's
#: split of the id space at 32768).
OVERWRITE_PARTITION_START = 32_768


def in_own_naming(table: str, name: str) -> bool:
    """True when ``name`` has the form of the ids lamina gives the table's segments
    (:attr:`Segment.id`): a segment written later could take it."""
    own = rf"{re.escape(table)}_[^_]+_[^_]+_v\d+_p\d+(?:_.+)?"
    return re.fullmatch(own, name, re.DOTALL) is not None


@lru_cache(maxsize=1 << 16)  # chunk bounds repeat across a table's segments
def _compact(us: int) -> str:
    text = format_us(us)
    return text.replace(":", "").replace("-", "") if text[0] not in "-+" else text[0] + "inf"


@dataclass(frozen=True, slots=True, init=False)
class Segment:
    """One immutable data file of a table.

    Identity is ``(table, interval, version, partition_id)``; everything else is
    description. ``num_core_partitions`` = n > 0 means the chunk of this version is
    complete only once partitions ``0..n-1`` are all present; n = 0 means any set
    of partitions is complete. A segment without ``location`` is a tombstone: it
    holds no rows but overshadows what lies below it.

    Overwrite fields (Druid's overwrite shard spec; keyword-only): a first-generation
    segment has ``minor_version`` 0, root partition range ``(partition_id,
    partition_id + 1)`` and an atomic update group of 1. A later-generation segment
    (``minor_version`` > 0, ``partition_id`` >= :data:`OVERWRITE_PARTITION_START`)
    replaces, inside its own chunk, the segments whose root ranges its
    ``root_partition_range`` (start inclusive, end exclusive) contains and whose
    minor version is lower; the ``atomic_update_group_size`` segments sharing its
    root range and minor version show only together.
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
    # (minor version, root partition range or None, group size); None: all defaults
    _overwrite: tuple[int, tuple[int, int] | None, int] | None = field(
        default=None, compare=False, repr=False
    )

    # Written out (not generated) so that the three overwrite fields cost one slot and
    # one assignment (None when left at their defaults), not three: construction stays
    # as cheap as before, and a million segments are built per snapshot of a big table.
    def __init__(
        self,
        table: str,
        interval: Interval,
        version: int,
        partition_id: int,
        num_core_partitions: int = 0,
        location: str | None = None,
        row_count: int = 0,
        size_bytes: int = 0,
        min_time: int | None = None,
        max_time: int | None = None,
        commit_id: int | None = None,
        suffix: str = "",
        *,
        minor_version: int = 0,
        root_partition_range: tuple[int, int] | None = None,
        atomic_update_group_size: int = 1,
    ) -> None:
        put = object.__setattr__
        put(self, "table", table)
        put(self, "interval", interval)
        put(self, "version", version)
        put(self, "partition_id", partition_id)
        put(self, "num_core_partitions", num_core_partitions)
        put(self, "location", location)
        put(self, "row_count", row_count)
        put(self, "size_bytes", size_bytes)
        put(self, "min_time", min_time)
        put(self, "max_time", max_time)
        put(self, "commit_id", commit_id)
        put(self, "suffix", suffix)
        if minor_version or root_partition_range is not None or atomic_update_group_size != 1:
            rng = None if root_partition_range is None else tuple(root_partition_range)
            put(self, "_overwrite", (minor_version, rng, atomic_update_group_size))
            _check_overwrite_fields(self)
        else:
            put(self, "_overwrite", None)

    @property
    def minor_version(self) -> int:
        """0 for a first-generation segment; higher for each overwrite at the chunk's
        own version (compaction) that produced it."""
        ow = self._overwrite
        return 0 if ow is None else ow[0]

    @property
    def root_partition_range(self) -> tuple[int, int] | None:
        """The first-generation partitions ``[start, end)`` this segment stands for;
        None: ``(partition_id, partition_id + 1)`` (see :attr:`root_range`)."""
        ow = self._overwrite
        return None if ow is None else ow[1]

    @property
    def atomic_update_group_size(self) -> int:
        """How many segments (same root range and minor version) show only together."""
        ow = self._overwrite
        return 1 if ow is None else ow[2]

    @property
    def root_range(self) -> tuple[int, int]:
        """The root partition range, ``(partition_id, partition_id + 1)`` by default."""
        ow = self._overwrite
        if ow is None or ow[1] is None:
            return (self.partition_id, self.partition_id + 1)
        return ow[1]

    @property
    def is_first_generation(self) -> bool:
        """True for a segment no overwrite at its own version wrote (minor version 0)."""
        ow = self._overwrite
        return ow is None or ow[0] == 0

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


def _check_overwrite_fields(seg: Segment) -> None:
    pid, rng, size = seg.partition_id, seg.root_partition_range, seg.atomic_update_group_size
    if seg.minor_version < 0:
        raise ValueError(f"segment {seg.id}: minor_version must be >= 0")
    if seg.minor_version == 0:
        if (rng is not None and tuple(rng) != (pid, pid + 1)) or size != 1:
            raise ValueError(
                f"segment {seg.id}: a first-generation segment (minor_version 0) has root "
                f"partition range ({pid}, {pid + 1}) and atomic_update_group_size 1"
            )
        return
    if pid < OVERWRITE_PARTITION_START:
        raise ValueError(
            f"segment {seg.id}: a segment with minor_version > 0 takes its partition id "
            f"from {OVERWRITE_PARTITION_START} up"
        )
    if rng is None or not 0 <= rng[0] < rng[1] <= OVERWRITE_PARTITION_START:
        raise ValueError(
            f"segment {seg.id}: root_partition_range must be (start, end) with "
            f"0 <= start < end <= {OVERWRITE_PARTITION_START}, got {rng}"
        )
    if size < 1:
        raise ValueError(f"segment {seg.id}: atomic_update_group_size must be >= 1")
