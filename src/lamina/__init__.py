"""lamina: time-partitioned analytical tables of immutable Parquet segments.

The public names are imported on first use (``lamina.Catalog`` loads the catalog and
its SQLAlchemy/pyarrow dependencies then), so importing a submodule stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from lamina import errors

if TYPE_CHECKING:
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

_HOMES = {
    "Catalog": "lamina.catalog",
    "connect": "lamina.catalog",
    "Granularity": "lamina.core.interval",
    "Interval": "lamina.core.interval",
    "Commit": "lamina.core.model",
    "CommitState": "lamina.core.model",
    "Segment": "lamina.core.segment",
    "LaminaError": "lamina.errors",
    "Table": "lamina.table",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None and name.endswith("Error"):  # every error: lamina.CommitConflictError
        home = "lamina.errors"
    if home is None or (home == "lamina.errors" and not _is_error(name)):
        raise AttributeError(f"module 'lamina' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later lookups skip this function
    return value


def _is_error(name: str) -> bool:

    return isinstance(getattr(errors, name, None), type)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
