"""lamina: time-partitioned analytical tables of immutable Parquet segments."""

from lamina.catalog import Catalog, connect
from lamina.core.interval import Granularity, Interval
from lamina.core.model import Commit, CommitState
from lamina.core.segment import Segment
from lamina.errors import LaminaError
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
