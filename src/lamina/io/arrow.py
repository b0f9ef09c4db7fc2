"""Arrow-side helpers: input normalization, schema checks, time column arithmetic."""

from __future__ import annotations

import io
from collections.abc import Collection, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from lamina.core.columns import EPOCH_UNIT, match_columns
from lamina.core.interval import US_PER_DAY, Granularity, Interval
from lamina.errors import (
    SchemaError,
    TimeColumnError,
    UnsupportedInputError,
    UnsupportedTypeError,
)
from lamina.io.arrow_checks import check_floats, check_zones, is_list_like

if TYPE_CHECKING:  # pyarrow.compute is imported where it is used: the CLI starts faster
    import pyarrow.compute as pc


def is_spark_dataframe(data: Any) -> bool:
    """Whether ``data`` is a Spark DataFrame (classic or Connect) to write. Raises
    UnsupportedInputError for a pandas-on-Spark DataFrame or a streaming DataFrame,
    which a write cannot take as they are."""
    module = type(data).__module__
    if module.startswith("pyspark.pandas"):
        raise UnsupportedInputError(
            f"cannot write a pandas-on-Spark {type(data).__name__}: pass its Spark "
            "DataFrame (psdf.to_spark()), or the Spark DataFrame you made it from"
        )
    if not (module.startswith("pyspark.") and type(data).__name__ == "DataFrame"):
        return False
    if data.isStreaming:
        raise UnsupportedInputError(
            "cannot write a streaming DataFrame in one call: start a streaming query "
            "that writes each micro-batch exactly once, "
            'df.writeStream.foreachBatch(t.foreach_batch("app-id")).option('
            '"checkpointLocation", ...).start() (or df.writeStream.format("lamina") '
            "where that data source is installed)"
        )
    return True


def is_spark_connect(obj: Any) -> bool:
    """Whether ``obj`` (a DataFrame or a session) is Spark Connect's: a client without
    a JVM, whose work runs on a Connect server."""
    return type(obj).__module__.startswith("pyspark.sql.connect")


def to_arrow_table(data: Any) -> pa.Table:
    """Read a pyarrow Table/RecordBatch/RecordBatchReader, pandas DataFrame or any
    object exporting ``__arrow_c_stream__`` (Polars, DuckDB, DataFusion...) into one Arrow
    table. Raises UnsupportedInputError for other objects, UnsupportedTypeError when the
    stream's schema cannot be imported, SchemaError for a pandas DataFrame Arrow cannot
    take (a repeated column name, an object column of mixed types)."""
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if isinstance(data, pa.RecordBatchReader):
        return data.read_all()
    if type(data).__module__.startswith("pandas") and type(data).__name__ == "DataFrame":
        try:
            return pa.Table.from_pandas(data, preserve_index=False)
        except (pa.ArrowException, ValueError) as exc:  # mixed object columns, repeated names
            raise SchemaError(
                f"cannot convert the pandas DataFrame to Arrow: {exc}; give each column "
                "one name and values of one type"
            ) from None
    if hasattr(data, "__arrow_c_stream__"):
        try:
            reader = pa.RecordBatchReader.from_stream(data)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise UnsupportedTypeError(
                f"cannot import the {type(data).__name__}'s Arrow stream ({exc}); a column has "
                "a type Arrow does not define (e.g. Polars Int128): cast it, e.g. to a decimal"
            ) from None
        return reader.read_all()
    hint = " (a function: call it and pass what it returns)" if callable(data) else ""
    raise UnsupportedInputError(
        f"cannot write a {type(data).__name__}{hint}; pass a pyarrow Table or "
        "RecordBatchReader, a pandas or Spark DataFrame, or an object with __arrow_c_stream__"
    )


def check_time_column(schema: pa.Schema, time_column: str | None) -> None:
    """The time column must exist and be a timestamp or a date."""
    if time_column is None:
        return
    if not isinstance(time_column, str):
        raise TimeColumnError(
            f"time_column must be a column's name (a string) or None, not {time_column!r}"
        )
    if len(time_column) > 256:  # the catalog's column
        raise TimeColumnError(
            f"time column name {time_column[:40]!r}... is {len(time_column)} characters "
            "long; the time column's name may have at most 256: rename it"
        )
    if time_column not in schema.names:
        raise TimeColumnError(
            f"time column {time_column!r} is not in the schema (columns: "
            f"{', '.join(schema.names)}); name an existing timestamp or date column"
        )
    t = schema.field(time_column).type
    if not (pa.types.is_timestamp(t) or pa.types.is_date(t)):
        epoch = (
            " (epoch numbers: give their unit, create_table(..., time_unit='ms'))"
            if pa.types.is_integer(t)
            else ""
        )
        raise TimeColumnError(
            f"time column {time_column!r} has type {t}; it must be a timestamp or a date{epoch}"
        )


_HINTS = {
    "union": "cast it to one of its member types, or split it into one column per member",
    "interval": "cast it to a duration, or split months, days and nanoseconds into columns",
}


def _unsupported(column: str, t: pa.DataType, kind: str | None) -> UnsupportedTypeError:
    hint = _HINTS.get(kind or "", "cast it to a supported type (see Column types in the docs)")
    return UnsupportedTypeError(
        f"column {column!r} has type {t}, which lamina cannot store in Parquet; {hint}"
    )


def _with_value_field(t: pa.DataType, value: pa.Field) -> pa.DataType:
    """A list-like type of the same kind as ``t`` around a new value field."""
    if pa.types.is_fixed_size_list(t):
        return pa.list_(value, t.list_size)
    if pa.types.is_large_list(t):
        return pa.large_list(value)
    if pa.types.is_list_view(t):
        return pa.list_view(value)
    if pa.types.is_large_list_view(t):
        return pa.large_list_view(value)
    return pa.list_(value)


def _storage_field(f: pa.Field, column: str) -> pa.Field:
    t = storage_type(f.type, column)
    return pa.field(f.name, t, f.nullable, f.metadata if t == f.type else None)


def storage_type(t: pa.DataType, column: str) -> pa.DataType:
    """The type lamina stores for input type ``t`` of ``column`` (docs: Column types).

    Views become their large non-view types, list views lists, dictionaries and
    run-end encodings their value type, float16 float32, date64 date32, decimal32 and
    decimal64 decimal128 — recursively.
    Raises UnsupportedTypeError for types Parquet cannot hold (unions, intervals).
    """
    if pa.types.is_string_view(t):
        return pa.large_string()
    if pa.types.is_binary_view(t):
        return pa.large_binary()
    if pa.types.is_dictionary(t) or pa.types.is_run_end_encoded(t):
        return storage_type(t.value_type, column)
    if pa.types.is_float16(t):
        return pa.float32()
    if pa.types.is_date64(t):
        return pa.date32()
    if pa.types.is_decimal32(t) or pa.types.is_decimal64(t):  # Parquet reads decimal128
        return pa.decimal128(t.precision, t.scale)
    if is_list_like(t):
        value = _storage_field(t.value_field, column)
        if pa.types.is_list_view(t):
            return pa.list_(value)
        if pa.types.is_large_list_view(t):
            return pa.large_list(value)
        return _with_value_field(t, value)
    if pa.types.is_map(t):
        key, item = _storage_field(t.key_field, column), _storage_field(t.item_field, column)
        return pa.map_(key, item, keys_sorted=t.keys_sorted)
    if pa.types.is_struct(t):
        return pa.struct([_storage_field(f, column) for f in t])
    if pa.types.is_union(t):
        raise _unsupported(column, t, "union")
    if pa.types.is_interval(t):
        raise _unsupported(column, t, "interval")
    if isinstance(t, pa.BaseExtensionType) and storage_type(t.storage_type, column) != (
        t.storage_type
    ):
        raise _unsupported(column, t, None)
    return t


def storage_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with every column's :func:`storage_type`; raises UnsupportedTypeError."""
    fields = [_storage_field(f, f.name) for f in schema]
    return pa.schema(fields, metadata=schema.metadata)


#: the type lamina infers for timestamps (CSV and JSON files, Parquet files a table is
#: made from, a column a write's ``evolve=True`` adds): instants in µs, UTC
INFERRED_TIMESTAMP = pa.timestamp("us", tz="UTC")


def inferred_type(t: pa.DataType) -> pa.DataType:
    """The type of a column lamina infers from data of type ``t``: a timestamp of any
    unit and zone (or none: a UTC wall-clock time) is :data:`INFERRED_TIMESTAMP`,
    also inside lists, maps and structs; the rest as given."""
    if pa.types.is_timestamp(t):
        return INFERRED_TIMESTAMP
    if is_list_like(t):
        return _with_value_field(t, t.value_field.with_type(inferred_type(t.value_type)))
    if pa.types.is_map(t):
        key, item = t.key_field, t.item_field
        return pa.map_(
            key.with_type(inferred_type(key.type)),
            item.with_type(inferred_type(item.type)),
            keys_sorted=t.keys_sorted,
        )
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(inferred_type(f.type)) for f in t])
    return t


def inferred_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with each column's :func:`inferred_type` (the one timestamp rule)."""
    return pa.schema([f.with_type(inferred_type(f.type)) for f in schema], metadata=schema.metadata)


def table_schema(schema: pa.Schema) -> pa.Schema:
    """The schema a new table stores: :func:`storage_schema`, checked against the
    Parquet writer. Raises UnsupportedTypeError naming the first column it cannot write."""
    import pyarrow.parquet as pq  # loads pyarrow

    stored = storage_schema(schema)
    for f in stored:
        try:
            pq.write_table(pa.schema([f]).empty_table(), io.BytesIO())
        except (pa.ArrowException, OSError):  # a decimal of negative scale: an OSError
            raise _unsupported(f.name, f.type, None) from None
        check_zones(f.name, f.type)
    return stored


_FAMILIES = [
    ("int", pa.types.is_integer),
    ("float", pa.types.is_floating),
    ("string", lambda x: pa.types.is_string(x) or pa.types.is_large_string(x)),
    ("string", pa.types.is_string_view),
    ("binary", lambda x: pa.types.is_binary(x) or pa.types.is_large_binary(x)),
    ("binary", pa.types.is_binary_view),
    ("timestamp", pa.types.is_timestamp),
    ("date", pa.types.is_date),
    ("time", pa.types.is_time),
    ("duration", pa.types.is_duration),
    ("decimal", pa.types.is_decimal),
    ("bool", pa.types.is_boolean),
    ("list", is_list_like),
    ("struct", pa.types.is_struct),
    ("map", pa.types.is_map),
]


def _family(t: pa.DataType) -> str:
    return next((name for name, test in _FAMILIES if test(t)), str(t))


def castable(src: pa.DataType, dst: pa.DataType) -> bool:
    """Whether values of ``src`` may go into a ``dst`` column (a safe cast still checks
    the values). Nested types: by member; dictionaries and run-end encodings: by value."""
    if src == dst or pa.types.is_null(src):
        return True
    if pa.types.is_dictionary(src) or pa.types.is_run_end_encoded(src):
        return castable(src.value_type, dst)
    if pa.types.is_dictionary(dst):
        return castable(src, dst.value_type)
    fam = _family(src)
    if fam != _family(dst):
        return fam == "int" and _family(dst) == "float"
    if fam == "timestamp":  # naive times are UTC wall-clock times: converted both ways
        return True
    if fam == "list":
        fixed = pa.types.is_fixed_size_list(dst)
        if fixed and not (pa.types.is_fixed_size_list(src) and src.list_size == dst.list_size):
            return False
        return castable(src.value_type, dst.value_type)
    if fam == "map":
        return castable(src.key_type, dst.key_type) and castable(src.item_type, dst.item_type)
    if fam == "struct":
        return [f.name for f in src] == [f.name for f in dst] and all(
            castable(a.type, b.type) for a, b in zip(src, dst, strict=True)
        )
    return fam in ("int", "float", "string", "binary", "date", "time", "duration", "decimal")


def _mask(arr: pa.Array) -> pa.Array | None:
    return arr.is_null() if arr.null_count else None


def _own_values(arr: pa.Array) -> tuple[pa.Array, pa.Array]:
    """Offsets from 0 and the child values of a (possibly sliced) list or map array."""
    import pyarrow.compute as pc  # loads pyarrow

    offsets = arr.offsets
    first, last = offsets[0].as_py(), offsets[-1].as_py()
    return pc.subtract(offsets, first), arr.values.slice(first, last - first)


def _list_from_view(arr: pa.Array, t: pa.DataType) -> pa.Array:
    """A list view as a list (pyarrow's own cast builds invalid offsets)."""
    child = _to_storage(arr.values)
    sizes = np.where(arr.is_valid().to_numpy(zero_copy_only=False), arr.sizes.to_numpy(), 0)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    index = np.arange(offsets[-1]) + np.repeat(arr.offsets.to_numpy() - offsets[:-1], sizes)
    large = pa.types.is_large_list(t)
    cls = pa.LargeListArray if large else pa.ListArray
    bounds = pa.array(offsets, pa.int64() if large else pa.int32())
    return cls.from_arrays(bounds, child.take(pa.array(index)), type=t, mask=_mask(arr))


def _to_storage(arr: pa.Array) -> pa.Array:
    """``arr`` as its :func:`storage_type`, value for value. Built by hand for nested
    types: pyarrow can neither take from views nor cast list views correctly."""
    import pyarrow.compute as pc  # loads pyarrow

    t = storage_type(arr.type, "")
    if t == arr.type:
        return arr
    src = arr.type
    if pa.types.is_run_end_encoded(src):
        return _to_storage(pc.run_end_decode(arr))
    if pa.types.is_dictionary(src):
        return _to_storage(arr.dictionary).take(arr.indices)
    if pa.types.is_list_view(src) or pa.types.is_large_list_view(src):
        return _list_from_view(arr, t)
    if pa.types.is_fixed_size_list(src):
        size = src.list_size
        child = _to_storage(arr.values.slice(arr.offset * size, len(arr) * size))
        return pa.FixedSizeListArray.from_arrays(child, type=t, mask=_mask(arr))
    if pa.types.is_list(src) or pa.types.is_large_list(src):
        cls = pa.LargeListArray if pa.types.is_large_list(src) else pa.ListArray
        offsets, values = _own_values(arr)
        return cls.from_arrays(offsets, _to_storage(values), type=t, mask=_mask(arr))
    if pa.types.is_map(src):
        offsets, entries = _own_values(arr)
        keys, items = (_to_storage(entries.field(i)) for i in (0, 1))
        return pa.MapArray.from_arrays(offsets, keys, items, type=t, mask=_mask(arr))
    if pa.types.is_struct(src):
        children = [_to_storage(arr.field(i)) for i in range(src.num_fields)]
        return pa.StructArray.from_arrays(children, fields=list(t), mask=_mask(arr))
    return arr.cast(t, safe=True)  # views, float16, date64


def _cast_chunk(arr: pa.Array, t: pa.DataType) -> pa.Array:
    arr = _to_storage(arr)
    if arr.type == t:
        return arr
    out = arr.cast(t, safe=True)
    check_floats(arr, out)
    return out


def _cast_column(column: pa.ChunkedArray, field: pa.Field) -> pa.ChunkedArray:
    try:
        chunks = [_cast_chunk(c, field.type) for c in column.chunks]
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        if _finer_times(column.type, field.type):
            raise SchemaError(
                f"column {field.name!r} holds times finer than its table type {field.type} "
                f"keeps, which it cannot take without loss ({exc}); lamina never truncates "
                "them: round them first (pandas: "
                f"df[{field.name!r}].dt.floor('{field.type.unit}')), or create the table "
                "with a finer unit"
            ) from None
        raise SchemaError(
            f"column {field.name!r} cannot be cast from {column.type} to {field.type} "
            f"without loss: {exc}; fix or cast the values"
        ) from None
    return pa.chunked_array(chunks, type=field.type)


_UNIT_ORDER = ("s", "ms", "us", "ns")


def _finer_times(src: pa.DataType, dst: pa.DataType) -> bool:
    """Whether ``src`` timestamps have a finer unit than ``dst``'s."""
    if not (pa.types.is_timestamp(src) and pa.types.is_timestamp(dst)):
        return False
    return _UNIT_ORDER.index(src.unit) > _UNIT_ORDER.index(dst.unit)


def conform(
    data: pa.Table,
    schema: pa.Schema,
    required: Collection[str] = (),
    first_row: int = 0,
) -> pa.Table:
    """Reorder and safely cast ``data`` to the storage form of ``schema``
    (:func:`storage_schema`). Columns match by name ignoring case (the table's spelling
    is kept); a nullable column the data lacks is written as nulls, unless it is one of
    ``required`` (the time column, an upsert table's key and comparison columns).
    Naive and zone-aware timestamps are converted into each other (naive ones are UTC
    wall-clock times); integers go into a time column of epoch numbers
    (:data:`lamina.core.columns.EPOCH_UNIT`). ``first_row``: the position of the data's
    first row in the whole input (errors name rows by it). Raises UnsupportedTypeError
    for a column type lamina cannot store, SchemaError for missing, unknown or repeated
    columns, a lossy cast or a null in a NOT NULL column."""
    schema = storage_schema(schema)  # tables created before normalization may hold views
    repeated = sorted({n for n in data.column_names if data.column_names.count(n) > 1})
    if repeated:
        raise SchemaError(f"the data has column {repeated[0]!r} more than once: keep one")
    matched = match_columns(data.column_names, schema.names)
    if matched.renames:
        data = data.rename_columns([matched.renames.get(n, n) for n in data.column_names])
    need = {n.lower() for n in required}
    missing = [n for n in matched.missing if not schema.field(n).nullable or n.lower() in need]
    if missing or matched.extra:
        parts = []
        if missing:
            parts.append(f"missing columns {missing}")
        if matched.extra:
            parts.append(f"unknown columns {matched.extra}")
        raise SchemaError(
            f"data does not match the table schema: {'; '.join(parts)}; "
            f"the table has columns {schema.names}"
            + (_required_note(schema, missing, need) if missing else "")
        )
    for name in matched.missing:  # nullable: written as nulls
        data = data.append_column(
            schema.field(name), pa.nulls(data.num_rows, schema.field(name).type)
        )
    data = _epoch_numbers(data.select(schema.names), schema)
    for f in data.schema:
        storage_type(f.type, f.name)  # name the column whose type cannot be stored
    bad = [
        f"{f.name}: {data.schema.field(f.name).type} -> {f.type}"
        for f in schema
        if not castable(data.schema.field(f.name).type, f.type)
    ]
    if bad:
        raise SchemaError(
            f"column types do not match the table schema: {', '.join(bad)}; "
            "cast those columns to the table's types"
        )
    if data.schema.remove_metadata() != schema.remove_metadata():
        columns = [_cast_column(data.column(f.name), f) for f in schema]
        data = pa.Table.from_arrays(columns, schema=schema)
    for f in schema:
        if not f.nullable and data.column(f.name).null_count:
            raise SchemaError(null_rows_message(data, f.name, first_row))
    return data


def _required_note(schema: pa.Schema, missing: list[str], need: set[str]) -> str:
    """Why the ``missing`` columns are required (a nullable column a write lacks is
    written as nulls)."""
    fixed = [n for n in missing if not schema.field(n).nullable]
    named = [n for n in missing if n.lower() in need and schema.field(n).nullable]
    why = []
    if fixed:
        why.append(f"its NOT NULL columns {fixed}")
    if named:
        why.append(f"its time, key and comparison columns {named}")
    return f"; a write must give {' and '.join(why)} (other columns it lacks are nulls)"


def null_rows_message(data: pa.Table, column: str, first_row: int = 0) -> str:
    """What a null in NOT NULL ``column`` says: how many rows hold one, the first
    positions (from ``first_row``, 0-based) and the first such row's values."""
    nulls = data.column(column).is_null()
    if isinstance(nulls, pa.ChunkedArray):
        nulls = nulls.combine_chunks()
    at = np.flatnonzero(nulls.to_numpy(zero_copy_only=False))
    shown = ", ".join(str(first_row + int(i)) for i in at[:5]) + (", ..." if len(at) > 5 else "")
    row = data.slice(int(at[0]), 1).to_pylist()[0]
    values = ", ".join(f"{k}={'null' if v is None else v}" for k, v in row.items())
    if len(values) > 200:
        values = values[:200] + "..."
    return (
        f"column {column!r} is NOT NULL in the table, but the data holds {len(at)} null(s) "
        f"there: rows {shown} (counted from 0; the first: {values}); fill or drop them"
    )


def _epoch_numbers(data: pa.Table, schema: pa.Schema) -> pa.Table:
    """Integers given for a time column of epoch numbers (:data:`EPOCH_UNIT` in its
    field's metadata), as timestamps of their unit (UTC)."""
    for i, f in enumerate(schema):
        unit = (f.metadata or {}).get(EPOCH_UNIT)
        col = data.column(i)
        if unit is None or not pa.types.is_integer(col.type):
            continue
        try:
            as_int = col.cast(pa.int64(), safe=True)
        except pa.ArrowInvalid as exc:
            raise SchemaError(
                f"column {f.name!r}: {exc}; give epoch numbers within int64"
            ) from None
        stamps = as_int.cast(pa.timestamp(unit.decode(), tz="UTC"))
        data = data.set_column(i, f.name, stamps)
    return data


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


#: Microseconds per unit of a time column, its values as int64.
_US_PER = {"s": 1_000_000, "ms": 1_000, "us": 1, "date32": US_PER_DAY, "date64": 1_000}
_FAR_US = 2**62  # far outside years 1-9999, far inside int64: where wild values land


def time_values_us(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Microseconds since epoch (UTC; naive timestamps read as UTC) as int64 numpy:
    finer units rounded down (-500 ns is in 1969), and times too far out for int64
    microseconds held at ±2^62 (a time outside years 1-9999, as they are)."""
    t = column.type
    unit = "date32" if pa.types.is_date32(t) else "date64" if pa.types.is_date64(t) else t.unit
    storage = pa.int32() if unit == "date32" else pa.int64()
    raw = int64_numpy(column.cast(storage))
    if unit == "ns":
        return np.floor_divide(raw, 1000)
    per = _US_PER[unit]
    if per == 1:
        return raw
    cap = _FAR_US // per
    return np.clip(raw, -cap, cap) * per


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
    import pyarrow.compute as pc  # loads pyarrow

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
        if not -(2**63) <= raw < 2**63:  # past the nanosecond range (1677-2262): every
            import pyarrow.compute as pc  # value of the column is below or above it

            return pc.scalar((raw < 0) == (op == ">="))
        value = pa.scalar(raw, pa.int64()).cast(t)
    import pyarrow.compute as pc  # loads pyarrow

    col = pc.field(field.name)
    return col >= value if op == ">=" else col < value


def gathered(reader: pa.RecordBatchReader, flush_bytes: int) -> Iterator[pa.Table]:
    """The reader's rows as tables of consecutive batches holding at least
    ``flush_bytes`` each (the last one: the rest); an empty stream gives one empty
    table."""
    batches: list[pa.RecordBatch] = []
    size = 0
    given = False
    for batch in reader:
        batches.append(batch)
        size += batch.nbytes
        if size >= flush_bytes:
            yield pa.Table.from_batches(batches, reader.schema)
            given = True
            batches, size = [], 0
    if batches or not given:
        yield pa.Table.from_batches(batches, reader.schema)
