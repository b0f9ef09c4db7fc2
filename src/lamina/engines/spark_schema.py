"""Spark ⇄ Arrow schema mapping: the Spark struct of a table schema, the Arrow schema
of a Spark one, which stored types Spark cannot read (or write back), and how Spark
SQL names a column. pyspark is imported only when a mapping needs it."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from lamina.errors import SchemaError, UnsupportedTypeError
from lamina.io.arrow import inferred_schema, storage_schema

#: Spark types lamina cannot store, and what to do instead
_SPARK_UNSUPPORTED = {
    "VariantType": "a variant, which lamina cannot store: turn it into a string "
    "(to_json(c)) or into typed columns (variant_get(c, '$.field', 'type'))",
    "YearMonthIntervalType": "a year-month interval, which lamina cannot store: store "
    "its months as an integer (extract(YEAR FROM c) * 12 + extract(MONTH FROM c))",
    "CalendarIntervalType": "a calendar interval, which lamina cannot store: split it "
    "into columns (extract(MONTH FROM c), extract(DAY FROM c), ...) or use a day-time "
    "interval",
}


def _spark_unsupported(t: Any, path: str) -> UnsupportedTypeError | None:
    """The error for the first type in ``t`` (a Spark type, nested types searched too)
    lamina cannot store; None when there is none."""
    why = _SPARK_UNSUPPORTED.get(type(t).__name__)
    if why is not None:
        return UnsupportedTypeError(f"column {path!r} is {why}")
    if hasattr(t, "fields"):  # a struct
        members = [(f.dataType, f"{path}.{f.name}") for f in t.fields]
    elif hasattr(t, "elementType"):  # an array
        members = [(t.elementType, f"{path}[]")]
    elif hasattr(t, "keyType"):  # a map
        members = [(t.keyType, f"{path} (keys)"), (t.valueType, f"{path} (values)")]
    else:
        members = []
    for member, where in members:
        err = _spark_unsupported(member, where)
        if err is not None:
            return err
    return None


def spark_to_arrow_schema(schema: Any) -> pa.Schema:
    """The Arrow schema of a Spark struct. Raises UnsupportedTypeError, naming the
    column, for a type lamina cannot store (variants, year-month and calendar
    intervals, anything else pyspark cannot map to Arrow)."""
    from pyspark.errors import PySparkException  # loads pyspark
    from pyspark.sql.pandas.types import to_arrow_schema

    for f in getattr(schema, "fields", ()):
        err = _spark_unsupported(f.dataType, f.name)
        if err is not None:
            raise err
    try:
        return to_arrow_schema(schema, timezone="UTC")
    except (PySparkException, TypeError) as exc:
        raise UnsupportedTypeError(
            f"a column's Spark type has no Arrow equivalent lamina can store ({exc}): cast "
            "it to a supported type (see Column types in the docs)"
        ) from None


def inferred_spark_or_arrow(schema: Any) -> pa.Schema:
    """:func:`lamina.io.arrow.inferred_schema` of an Arrow schema or a Spark struct (a
    table made from the files a command reads: timestamps µs, UTC). Raises
    UnsupportedTypeError (a Spark type lamina cannot store)."""
    if not isinstance(schema, pa.Schema):
        schema = spark_to_arrow_schema(schema)
    return inferred_schema(schema)


def _spark_arrow_type(t: pa.DataType) -> pa.DataType:
    """A stored type as Spark reads it: µs timestamps, decimal128 (Spark has neither
    other units nor 256-bit decimals; nested types are mapped by pyspark)."""
    if pa.types.is_timestamp(t) and t.unit != "us":
        return pa.timestamp("us", tz=t.tz)
    if pa.types.is_decimal(t) and t.precision <= 38:
        return pa.decimal128(t.precision, t.scale)
    return t


def _spark_problem(t: pa.DataType, exact: bool) -> str | None:
    """Why Spark cannot read a stored column of type ``t`` (``exact``: or write it back
    as the same type, as a compaction must); None when it can."""
    if pa.types.is_timestamp(t) and t.unit == "ns":
        return "nanosecond timestamps (Spark reads micro- and milliseconds)"
    if pa.types.is_time(t):
        return "times of day"
    if pa.types.is_decimal(t) and t.precision > 38:
        return "decimals of more than 38 digits"
    if pa.types.is_unsigned_integer(t):
        return f"unsigned integers ({t}: Spark has none)"
    if exact and (pa.types.is_fixed_size_binary(t) or pa.types.is_duration(t)):
        return f"{t} (Spark writes it back as another type)"
    if pa.types.is_nested(t):
        for i in range(t.num_fields):
            why = _spark_problem(t.field(i).type, exact)
            if why is not None:
                return why
    return None


def spark_problem(schema: pa.Schema, exact: bool = False) -> str | None:
    """The first column of a table ``schema`` Spark cannot read (``exact``: nor write
    back unchanged, as compactions do), and why; None when there is none. Pure."""
    for f in storage_schema(schema):
        why = _spark_problem(f.type, exact)
        if why is not None:
            return f"column {f.name!r}: {why}"
    return None


def arrow_to_spark_schema(schema: pa.Schema) -> Any:
    """The Spark struct for a table schema, taken in its stored form (views -> large
    types -> Spark string/binary/array, dictionaries -> values; see ``storage_schema``).
    Raises SchemaError when a column has no Spark equivalent."""
    from pyspark.sql.pandas.types import from_arrow_schema  # loads pyspark

    stored = storage_schema(schema)
    fields = [pa.field(f.name, _spark_arrow_type(f.type), f.nullable) for f in stored]
    try:
        return from_arrow_schema(pa.schema(fields), prefer_timestamp_ntz=True)
    except (TypeError, ValueError) as exc:
        raise SchemaError(f"this table's schema has no Spark equivalent: {exc}") from None


def ref(name: str) -> str:
    """A column name as Spark SQL and ``F.col`` read it: in backticks, its own doubled."""
    return "`" + name.replace("`", "``") + "`"
