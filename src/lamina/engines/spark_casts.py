"""Casting a Spark DataFrame to a table's schema as pyarrow's safe cast would: the
columns selected and cast, and every value (members of lists, maps and structs too)
checked in the write job itself, which fails with a marked error a lossy one."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lamina.engines.spark_schema import arrow_to_spark_schema, ref, spark_to_arrow_schema
from lamina.errors import SchemaError
from lamina.io.arrow import castable

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

_LOSSY = "[lamina: lossy cast] "


def conform(df: DataFrame, schema: pa.Schema) -> DataFrame:
    """Select and cast the DataFrame's columns to the table schema, or SchemaError."""
    from pyspark.sql import functions as F  # loads pyspark

    have = df.columns
    missing = [n for n in schema.names if n not in have]
    extra = [n for n in have if n not in schema.names]
    if missing or extra:
        raise SchemaError(
            f"data does not match the table schema: missing columns {missing}, unknown "
            f"columns {extra}; the table has columns {schema.names}"
        )
    src = spark_to_arrow_schema(df.schema)
    target = arrow_to_spark_schema(schema)
    bad = [
        f"{f.name}: {src.field(f.name).type} -> {f.type}"
        for f in schema
        if not castable(src.field(f.name).type, f.type)
    ]
    if bad:
        raise SchemaError(f"column types do not match the table schema: {', '.join(bad)}")
    cols = []
    for f in target.fields:
        c = F.col(ref(f.name))
        ok = _fits(c, src.field(f.name).type, schema.field(f.name).type, f.dataType)
        if ok is None and df.schema[f.name].dataType == f.dataType:
            cols.append(c)
            continue
        if ok is not None:  # a value that would change is refused in the write job itself
            why = F.concat(
                F.lit(f"{_LOSSY}column {f.name!r}: "),
                c.cast("string"),
                F.lit(f" does not fit {schema.field(f.name).type} without loss{_LOSSY}"),
            )
            c = F.when(c.isNull() | ok, c).otherwise(F.raise_error(why))
        cols.append(c.cast(f.dataType).alias(f.name))
    return df.select(*cols)


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
    what = text[start + len(_LOSSY) : end if end > 0 else None]
    return SchemaError(f"{what}; cast it in Spark first (or widen the table's column)")
