"""Rolling rows up (see :mod:`lamina.core.rollup`) with Arrow's hash aggregation."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from lamina.core.rollup import Rollup
from lamina.io.arrow import chunk_starts, int64_arrow, time_values_us


def roll_up(data: pa.Table, spec: Rollup, time_column: str | None) -> pa.Table:
    """One row per (floored time, dimensions); metrics aggregated; the table's schema
    kept (dropped columns null)."""
    schema = data.schema
    work = data
    keys = list(spec.dimensions)
    if time_column is not None:
        us = time_values_us(data.column(time_column))
        if spec.query_granularity is not None:
            us = chunk_starts(us, spec.query_granularity)
        work = work.append_column("__t", int64_arrow(us))
        keys.append("__t")
    aggs = []
    for col, agg in spec.metrics:
        if agg == "count":  # rows each row stands for: a null is one raw row
            work = work.set_column(
                work.schema.get_field_index(col), col, pc.fill_null(work.column(col), 1)
            )
            agg = "sum"
        aggs.append((col, agg))
    out = work.group_by(keys, use_threads=False).aggregate(aggs)
    cols = {}
    for field in schema:
        name = field.name
        if name == time_column:
            ts = out.column("__t").cast(pa.timestamp("us", tz=_tz(field.type)))
            cols[name] = ts.cast(field.type)
        elif name in spec.dimensions:
            cols[name] = out.column(name)
        elif any(name == m for m, _ in spec.metrics):
            agg = dict(spec.metrics)[name]
            agg = "sum" if agg == "count" else agg
            cols[name] = out.column(f"{name}_{agg}").cast(field.type)
        else:
            cols[name] = pa.nulls(out.num_rows, field.type)
    return pa.table(cols, schema=schema)


def _tz(t: pa.DataType) -> str | None:
    return t.tz if pa.types.is_timestamp(t) else None
