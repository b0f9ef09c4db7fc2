"""Rollup specifications of a major compaction, checked against a table's schema.

``{"dimensions": [...], "metrics": {"col": "sum"|"min"|"max"|"count"}, "query_granularity":
"HOUR"}``: rows with equal dimensions and equal time floored to the query granularity
become one row; each metric column aggregates. ``count`` stores how many raw rows a
row stands for — it sums the column (a null counts one raw row), so rolling up a
rolled-up table again keeps every aggregate. A count column the table lacks is added
(int64, nullable) by the compaction that rolls up, in its own commit: rows it did not
rewrite read it as null, one raw row each. Other columns (neither the time column, a
dimension nor a metric) are dropped to null, and must be nullable. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from lamina.core.args import names as name_list
from lamina.core.interval import Granularity
from lamina.errors import CompactionError, InvalidGranularityError

AGGREGATES = ("sum", "min", "max", "count")


@dataclass(frozen=True)
class Rollup:
    """A checked rollup: dimensions, metric -> aggregate, query granularity, the
    columns it drops to null and the count columns it adds (the table lacks them)."""

    dimensions: tuple[str, ...]
    metrics: tuple[tuple[str, str], ...]
    query_granularity: Granularity | None
    dropped: tuple[str, ...]
    added: tuple[str, ...] = ()

    def added_fields(self) -> list[pa.Field]:
        """The columns the rollup adds to the table: one nullable int64 per count
        metric the table lacks."""
        return [pa.field(name, pa.int64()) for name in self.added]

    @classmethod
    def parse(cls, spec: Mapping[str, Any], schema: pa.Schema, time_column: str | None) -> Rollup:
        """Raises CompactionError naming what to fix."""
        if not isinstance(spec, Mapping):
            raise CompactionError(
                "rollup must be a dict: {'dimensions': [...], 'metrics': {'col': 'sum'}, "
                "'query_granularity': 'HOUR'}"
            )
        unknown_keys = sorted(set(spec) - {"dimensions", "metrics", "query_granularity"})
        if unknown_keys:
            raise CompactionError(
                f"rollup has unknown key {unknown_keys[0]!r}; use dimensions, metrics, "
                "query_granularity"
            )
        dims = tuple(name_list(spec.get("dimensions") or (), "rollup dimensions", CompactionError))
        raw = spec.get("metrics") or {}
        if not isinstance(raw, Mapping) or not all(isinstance(c, str) for c in raw):
            raise CompactionError(
                f"rollup metrics must be a dict of column -> aggregate, e.g. {{'v': 'sum'}}, "
                f"not {raw!r}"
            )
        metrics = dict(raw)
        if not dims and not metrics:
            raise CompactionError(
                "rollup names no dimensions and no metrics: it would keep only the time "
                "column; name the columns to group by (dimensions) and to aggregate (metrics)"
            )
        names = set(schema.names)
        lower = {n.lower(): n for n in schema.names}
        added = tuple(c for c, agg in metrics.items() if agg == "count" and c not in names)
        for col in added:
            if col.lower() in lower:
                raise CompactionError(
                    f"count metric {col!r} is not a column of the table, and the column it "
                    f"would add differs only in case from {lower[col.lower()]!r} (SQL does "
                    "not tell them apart): count into another name"
                )
        for col in (*dims, *metrics):
            if col in added:
                continue
            if col not in names:
                raise CompactionError(
                    f"rollup column {col!r} is not a column of the table "
                    f"(columns: {', '.join(schema.names)})"
                )
            if col == time_column:
                raise CompactionError(
                    f"the time column {col!r} cannot be a rollup dimension or metric: "
                    "it is floored to query_granularity"
                )
        both = sorted(set(dims) & set(metrics))
        if both:
            raise CompactionError(f"column {both[0]!r} is both a dimension and a metric")
        for col, agg in metrics.items():
            if agg not in AGGREGATES:
                raise CompactionError(
                    f"metric {col!r}: unknown aggregate {agg!r}; use one of {', '.join(AGGREGATES)}"
                )
            if col in added:  # an int64 column, added
                continue
            t = schema.field(col).type
            numeric = pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)
            if agg in ("sum", "count") and not numeric:
                raise CompactionError(
                    f"metric {col!r} ({agg}) needs a numeric column, not {t}; make it a "
                    "dimension, or aggregate it with min/max"
                )
            if agg == "count" and not pa.types.is_integer(t):
                raise CompactionError(f"metric {col!r} (count) needs an integer column, not {t}")
        dropped = tuple(n for n in schema.names if n not in {*dims, *metrics, time_column})
        strict = [n for n in dropped if not schema.field(n).nullable]
        if strict:
            raise CompactionError(
                f"column {strict[0]!r} is neither a dimension nor a metric and not nullable: "
                "name it in the rollup"
            )
        qg = spec.get("query_granularity")
        try:
            query = None if qg is None else Granularity.parse(qg)
        except InvalidGranularityError as exc:
            raise CompactionError(f"query_granularity: {exc}") from None
        if query is not None and time_column is None:
            raise CompactionError("query_granularity needs a table with a time column")
        return cls(dims, tuple(metrics.items()), query, dropped, added)


def check_query_granularity(query: Granularity | None, segments: Granularity) -> None:
    """Raises CompactionError unless a rollup's ``query`` granularity nests in the
    segment granularity: a time floored to a coarser one would leave its chunk."""
    if query is not None and not query.nests_in(segments):
        raise CompactionError(
            f"query_granularity {query.value} does not nest in the segment granularity "
            f"{segments.value}: a time floored to it could leave its segment's chunk; "
            f"roll up to a granularity that nests in {segments.value}, or compact to a "
            "coarser segment granularity"
        )
