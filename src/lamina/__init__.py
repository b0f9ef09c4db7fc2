"""lamina: time-partitioned analytical tables of immutable Parquet segments."""

from lamina.catalog import Catalog, connect
from lamina.commit import Commit, CommitState
from lamina.errors import LaminaError
from lamina.interval import Granularity, Interval
from lamina.segment import Segment
from lamina.table import Table

__all__ = [
    "Catalog",
    "Commit",
    "CommitState",
    "Granularity",
    "Interval",
    "LaminaError",
    "Segment",
    "Table",
    "connect",
]
__version__ = "0.1.0"
