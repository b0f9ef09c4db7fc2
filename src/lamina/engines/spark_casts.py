"""Casting a Spark DataFrame to a table's schema as pyarrow's safe cast would: the
columns selected and cast, and every value (members of lists, maps and structs too)
checked in the write job itself, which fails with a marked error a lossy one."""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lamina.core.columns import EPOCH_UNIT, match_columns
from lamina.engines.spark_schema import arrow_to_spark_schema, ref, spark_to_arrow_schema
from lamina.errors import SchemaError
from lamina.io.arrow import castable

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

_LOSSY = "[lamina: refused] "  # marks the message of a value a write job refused


def conform(
    df: DataFrame,
    schema: pa.Schema,
    required: Collection[str] = (),
    time_column: str | None = None,
) -> DataFrame:
    """Select and cast the DataFrame's columns to the table schema, or SchemaError.
    Names match ignoring case (the table's spelling is kept); a nullable column the
    DataFrame lacks is written as nulls unless it is one of ``required``; naive and
    zone-aware timestamps convert into each other as UTC wall-clock times, whatever
    the session's time zone; integers go into a time column of epoch numbers; a null
    in a NOT NULL column fails the write job, naming the row (in ``time_column``: the
    write refuses it, TimeColumnError)."""
    from pyspark.sql import functions as F  # loads pyspark

    matched = match_columns(df.columns, schema.names)
    need = {n.lower() for n in required}
    missing = [n for n in matched.missing if not schema.field(n).nullable or n.lower() in need]
    if missing or matched.extra:
        raise SchemaError(
            f"data does not match the table schema: missing columns {missing}, unknown "
            f"columns {matched.extra}; the table has columns {schema.names} (nullable "
            "columns a write lacks are nulls, except the time, key and comparison columns)"
        )
    given = {matched.renames.get(n, n): n for n in df.columns}  # table name -> the input's
    src = spark_to_arrow_schema(df.schema)
    target = arrow_to_spark_schema(schema)
    bad = [
        f"{f.name}: {src.field(given[f.name]).type} -> {f.type}"
        for f in schema
        if f.name in given
        and not castable(src.field(given[f.name]).type, f.type)
        and not _epoch(src.field(given[f.name]).type, f)
    ]
    if bad:
        raise SchemaError(f"column types do not match the table schema: {', '.join(bad)}")
    row = _row_text(df)
    cols = []
    for f in target.fields:
        field = schema.field(f.name)
        if f.name not in given:
            cols.append(F.lit(None).cast(f.dataType).alias(f.name))
            continue
        name = given[f.name]
        c = F.col(ref(name))
        src_type = src.field(name).type
        plain = True  # the column as it comes
        if _epoch(src_type, field):
            c, src_type, plain = from_epoch(c, field), pa.timestamp("us", tz="UTC"), False
        elif _zone_differs(src_type, field.type):
            c, plain = _utc_wall(c, src_type.tz is None), False
            src_type = pa.timestamp("us", tz=field.type.tz)
        ok = _fits(c, src_type, field.type, f.dataType)
        if ok is not None:  # a value that would change is refused in the write job itself
            why = F.concat(
                F.lit(f"{_LOSSY}column {f.name!r}: "),
                c.cast("string"),
                F.lit(
                    f" does not fit {field.type} without loss; cast it in Spark first (or "
                    f"widen the table's column){_LOSSY}"
                ),
            )
            c, plain = F.when(c.isNull() | ok, c).otherwise(F.raise_error(why)), False
        if not field.nullable and f.name != time_column:  # the row named in the job's error
            why = F.concat(
                F.lit(
                    f"{_LOSSY}column {f.name!r} is NOT NULL in the table, but a row of the "
                    "data holds null there: "
                ),
                row,
                F.lit(f"; fill or drop such rows{_LOSSY}"),
            )
            c, plain = F.when(c.isNull(), F.raise_error(why)).otherwise(c), False
        if plain and name == f.name and df.schema[name].dataType == f.dataType:
            cols.append(c)
        else:
            cols.append(c.cast(f.dataType).alias(f.name))
    return df.select(*cols)


def _row_text(df: DataFrame) -> Any:
    """A row's values of simple types as JSON text (an error names the row by them)."""
    from pyspark.sql import functions as F  # loads pyspark

    simple = (
        "StringType", "IntegerType", "LongType", "ShortType", "ByteType", "DoubleType",
        "FloatType", "BooleanType", "DateType", "TimestampType", "TimestampNTZType",
        "DecimalType",
    )  # fmt: skip
    names = [f.name for f in df.schema.fields if type(f.dataType).__name__ in simple]
    if not names:
        return F.lit("(no values to show)")
    return F.to_json(F.struct(*[F.col(ref(n)).alias(n) for n in names]))


def _zone_differs(src: pa.DataType, dst: pa.DataType) -> bool:
    """Whether one of two timestamp types is naive and the other zone-aware."""
    both = pa.types.is_timestamp(src) and pa.types.is_timestamp(dst)
    return both and (src.tz is None) != (dst.tz is None)


def _epoch(src: pa.DataType, field: pa.Field) -> bool:
    """Whether ``src`` integers go into ``field``, a time column of epoch numbers."""
    return pa.types.is_integer(src) and EPOCH_UNIT in (field.metadata or {})


def from_epoch(c: Any, field: pa.Field) -> Any:
    """Epoch numbers of the field's unit as a Spark timestamp (nanoseconds: those that
    are whole microseconds; others fail the job)."""
    from pyspark.sql import functions as F  # loads pyspark

    unit = (field.metadata or {})[EPOCH_UNIT].decode()
    n = c.cast("long")
    if unit == "s":
        return F.timestamp_seconds(n)
    if unit == "ms":
        return F.timestamp_millis(n)
    if unit == "us":
        return F.timestamp_micros(n)
    why = F.concat(
        F.lit(f"{_LOSSY}column {field.name!r}: "),
        n.cast("string"),
        F.lit(f" ns is no whole number of microseconds, which Spark keeps{_LOSSY}"),
    )
    return F.when(n % 1000 == 0, F.timestamp_micros(F.floor(n / 1000))).otherwise(
        F.raise_error(why)
    )


_DAY_US = 86_400_000_000


def _utc_wall(c: Any, to_aware: bool) -> Any:
    """A naive timestamp (TIMESTAMP_NTZ) as the instant of that UTC wall-clock time, or
    (``to_aware`` false) an instant as its UTC wall-clock time: exact, whatever the
    session's time zone (Spark's own casts go through it)."""
    from pyspark.sql import functions as F  # loads pyspark

    if to_aware:
        day = F.unix_date(F.to_date(c)).cast("long") * _DAY_US
        seconds = F.date_part(F.lit("SECOND"), c)  # with its fraction: decimal(8, 6)
        tod = (F.hour(c) * 3600 + F.minute(c) * 60).cast("long") * 1_000_000
        return F.timestamp_micros(day + tod + (seconds * 1_000_000).cast("long"))
    us = F.unix_micros(c)
    days = F.floor(us / _DAY_US)
    date = F.date_from_unix_date(days.cast("int"))
    tod = us - days * _DAY_US
    seconds = ((tod % 60_000_000) / F.lit(1_000_000)).cast("decimal(8,6)")
    return F.make_timestamp_ntz(
        F.year(date),
        F.month(date),
        F.dayofmonth(date),
        F.floor(tod / 3_600_000_000).cast("int"),
        (F.floor(tod / 60_000_000) % 60).cast("int"),
        seconds,
    )


def _fits(c: Any, src: pa.DataType, dst: pa.DataType, spark_dst: Any) -> Any:
    """Spark condition: the value casts to ``dst`` unchanged, as pyarrow's safe cast
    requires (Spark rounds decimals, and loses int64 digits in a float64, silently;
    None: every value does) — members of lists, maps and structs included."""
    from pyspark.sql import functions as F  # loads pyspark

    if pa.types.is_map(src) and pa.types.is_map(dst):
        keys = _every(F.map_keys(c), src.key_type, dst.key_type, spark_dst.keyType)
        items = _every(F.map_values(c), src.item_type, dst.item_type, spark_dst.valueType)
        return _both(keys, items)
    if _listed(src) and _listed(dst):
        return _every(c, src.value_type, dst.value_type, spark_dst.elementType)
    if pa.types.is_struct(src) and pa.types.is_struct(dst):
        out = None
        for f in dst:
            x = c.getField(f.name)
            ok = _fits(x, src.field(f.name).type, f.type, spark_dst[f.name].dataType)
            out = _both(out, None if ok is None else x.isNull() | ok)
        return out
    return _fits_value(c, src, dst, spark_dst)


def _listed(t: pa.DataType) -> bool:
    return bool(pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t))


def _every(array: Any, src: pa.DataType, dst: pa.DataType, spark_dst: Any) -> Any:
    """Spark condition: every element of ``array`` fits (None: every one does)."""
    from pyspark.sql import functions as F  # loads pyspark

    probe = _fits(F.lit(None), src, dst, spark_dst)  # does the member need a check?
    if probe is None:
        return None
    return F.forall(array, lambda x: x.isNull() | _fits(x, src, dst, spark_dst))


def _both(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else a & b


def _fits_value(c: Any, src: pa.DataType, dst: pa.DataType, spark_dst: Any) -> Any:
    """:func:`_fits` for a scalar."""
    if pa.types.is_integer(src) and pa.types.is_integer(dst):
        return c.try_cast(spark_dst) == c if dst.bit_width < src.bit_width else None
    if pa.types.is_integer(src) and pa.types.is_floating(dst):
        digits = 24 if dst.bit_width == 32 else 53  # exact below 2^digits, as pyarrow checks
        return c.between(-(2**digits), 2**digits) if src.bit_width > digits else None
    if pa.types.is_decimal(src) and pa.types.is_decimal(dst):
        narrower = dst.scale < src.scale or dst.precision - dst.scale < src.precision - src.scale
        return c.try_cast(spark_dst) == c if narrower else None
    if pa.types.is_floating(src) and pa.types.is_floating(dst) and dst.bit_width < src.bit_width:
        from pyspark.sql import functions as F  # loads pyspark

        def finite(x: Any) -> Any:
            return ~F.isnan(x) & (F.abs(x) != float("inf"))

        narrow = c.cast(spark_dst)  # as the pyarrow path: out of range, or to zero, is lost
        return ~((finite(c) & ~finite(narrow)) | ((c != 0) & (narrow == 0)))
    if pa.types.is_timestamp(dst) and dst.unit in ("s", "ms") and pa.types.is_timestamp(src):
        from pyspark.sql import functions as F  # loads pyspark

        per = 1_000_000 if dst.unit == "s" else 1_000  # Spark holds microseconds
        return F.unix_micros(c.cast("timestamp")) % per == 0
    return None


def lossy_cast_error(exc: Exception) -> SchemaError | None:
    """The SchemaError a write job failed with in ``_conform``'s check, if it did."""
    text = str(exc)
    start = text.find(_LOSSY)
    if start < 0:
        return None
    end = text.find(_LOSSY, start + len(_LOSSY))
    return SchemaError(text[start + len(_LOSSY) : end if end > 0 else None])
