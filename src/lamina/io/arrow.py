"""Arrow-side helpers: input normalization, schema checks, time column arithmetic."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from lamina.core.interval import US_PER_DAY, Granularity, Interval
from lamina.errors import SchemaError, TimeColumnError, UnsupportedInputError

if TYPE_CHECKING:  # pyarrow.compute is imported where it is used: the CLI starts faster
    import pyarrow.compute as pc


def is_spark_dataframe(data: Any) -> bool:
    return type(data).__module__.startswith("pyspark.") and type(data).__name__ == "DataFrame"


def to_arrow_table(data: Any) -> pa.Table:
    """Read a pyarrow Table/RecordBatch/RecordBatchReader, pandas DataFrame or any
    object exporting ``__arrow_c_stream__`` into one Arrow table."""
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if isinstance(data, pa.RecordBatchReader):
        return data.read_all()
    if type(data).__module__.startswith("pandas") and type(data).__name__ == "DataFrame":
        return pa.Table.from_pandas(data, preserve_index=False)
    if hasattr(data, "__arrow_c_stream__"):
        return pa.RecordBatchReader.from_stream(data).read_all()
    raise UnsupportedInputError(
        f"cannot write a {type(data).__name__}; pass a pyarrow Table or RecordBatchReader, "
        "a pandas or Spark DataFrame, or an object with __arrow_c_stream__"
    )


def check_time_column(schema: pa.Schema, time_column: str | None) -> None:
    """The time column must exist and be a timestamp or a date."""
    if time_column is None:
        return
    if time_column not in schema.names:
        raise TimeColumnError(
            f"time column {time_column!r} is not in the schema (columns: "
            f"{', '.join(schema.names)}); name an existing timestamp or date column"
        )
    t = schema.field(time_column).type
    if not (pa.types.is_timestamp(t) or pa.types.is_date(t)):
        raise TimeColumnError(
            f"time column {time_column!r} has type {t}; it must be a timestamp or a date"
        )


def _family(t: pa.DataType) -> str:
    checks = [
        ("int", pa.types.is_integer),
        ("float", pa.types.is_floating),
        (
            "string",
            lambda x: (
                pa.types.is_string(x) or pa.types.is_large_string(x) or pa.types.is_string_view(x)
            ),
        ),
        (
            "binary",
            lambda x: (
                pa.types.is_binary(x) or pa.types.is_large_binary(x) or pa.types.is_binary_view(x)
            ),
        ),
        ("timestamp", pa.types.is_timestamp),
        ("date", pa.types.is_date),
        ("decimal", pa.types.is_decimal),
        ("bool", pa.types.is_boolean),
    ]
    for name, test in checks:
        if test(t):
            return name
    return str(t)


def _castable(src: pa.DataType, dst: pa.DataType) -> bool:
    if src == dst or pa.types.is_null(src):
        return True
    fam = _family(src)
    if fam != _family(dst):
        return fam == "int" and _family(dst) == "float"
    if fam == "timestamp":
        # a zone-aware instant and a naive wall-clock time are different things
        return (src.tz is None) == (dst.tz is None)
    return fam in ("int", "float", "string", "binary", "date", "decimal")


def conform(data: pa.Table, schema: pa.Schema) -> pa.Table:
    """Reorder and safely cast ``data`` to ``schema``; SchemaError if it does not fit."""
    missing = [n for n in schema.names if n not in data.column_names]
    extra = [n for n in data.column_names if n not in schema.names]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing columns {missing}")
        if extra:
            parts.append(f"unknown columns {extra}")
        raise SchemaError(
            f"data does not match the table schema: {'; '.join(parts)}; "
            f"the table has columns {schema.names}"
        )
    data = data.select(schema.names)
    bad = [
        f"{f.name}: {data.schema.field(f.name).type} -> {f.type}"
        for f in schema
        if not _castable(data.schema.field(f.name).type, f.type)
    ]
    if bad:
        raise SchemaError(f"column types do not match the table schema: {', '.join(bad)}")
    if data.schema.remove_metadata() == schema.remove_metadata():
        return data
    try:
        return data.cast(schema, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise SchemaError(f"data cannot be cast to the table schema without loss: {exc}") from None


def int64_numpy(values: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Integer values (no nulls) as an int64 numpy array, without ``to_numpy``: pyarrow's
    imports pandas (a third of a second that a command line write does not need)."""
    if values.type != pa.int64():
        values = values.cast(pa.int64())
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if values.null_count or len(values) == 0:
        return np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.int64)
    data = values.buffers()[1]
    assert data is not None
    return np.frombuffer(data, dtype=np.int64, count=len(values), offset=values.offset * 8)


def int64_arrow(values: np.ndarray) -> pa.Array:
    """An int64 numpy array as an Arrow array, without ``pa.array`` (which, given numpy,
    imports pandas)."""
    data = np.ascontiguousarray(values, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), len(data), [None, pa.py_buffer(data)])


def time_values_us(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Microseconds since epoch (UTC; naive timestamps read as UTC) as int64 numpy."""
    import pyarrow.compute as pc

    t = column.type
    if pa.types.is_date(t):
        days = pc.cast(column, pa.date32()).cast(pa.int32())
        return int64_numpy(days) * US_PER_DAY
    us = column.cast(pa.timestamp("us", tz=t.tz), safe=False)
    return int64_numpy(us.cast(pa.int64()))


_FLOOR_UNITS = {
    Granularity.HOUR: "hour",
    Granularity.DAY: "day",
    Granularity.WEEK: "week",
    Granularity.MONTH: "month",
    Granularity.QUARTER: "quarter",
    Granularity.YEAR: "year",
}


def chunk_starts(values_us: np.ndarray, granularity: Granularity) -> np.ndarray:
    """Vectorized :meth:`Granularity.floor` over µs values."""
    if granularity is Granularity.ALL:
        return np.full(len(values_us), Granularity.ALL.floor(0), dtype=np.int64)
    if granularity in (Granularity.HOUR, Granularity.DAY, Granularity.WEEK):
        width = Granularity.chunk(granularity, 0)
        step = width.end - width.start
        offset = width.start % step
        return values_us - (values_us - offset) % step
    import pyarrow.compute as pc

    ts = int64_arrow(values_us).cast(pa.timestamp("us"))
    floored = pc.floor_temporal(ts, unit=_FLOOR_UNITS[granularity])
    return int64_numpy(floored)


def time_filter(field: pa.Field, interval: Interval) -> pc.Expression:
    """Expression ``interval.start <= field < interval.end`` in the field's own type."""
    return _bound(field, interval.start, ">=") & _bound(field, interval.end, "<")


def _ceil_div(a: int, b: int) -> int:
    return -((-a) // b)


def _bound(field: pa.Field, us: int, op: str) -> pc.Expression:
    # Values are integers in the column's unit, so x >= b <=> x >= ceil(b) and
    # x < b <=> x < ceil(b): one rounding serves both bounds, with no cast of the column.
    t = field.type
    if pa.types.is_date(t):
        value = pa.scalar(_ceil_div(us, US_PER_DAY), pa.int32()).cast(pa.date32()).cast(t)
    else:
        unit = t.unit
        raw = us * 1000 if unit == "ns" else _ceil_div(us, {"s": 10**6, "ms": 1000, "us": 1}[unit])
        value = pa.scalar(raw, pa.int64()).cast(t)
    import pyarrow.compute as pc

    col = pc.field(field.name)
    return col >= value if op == ">=" else col < value
