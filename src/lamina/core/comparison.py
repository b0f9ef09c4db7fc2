"""Comparison values of upsert tables as the key index holds them: one 64-bit number
per record (int64 for integers, booleans, dates, times, timestamps and decimals of
precision <= 18, float64 for floats), ordered as the column's values are — floats as
:func:`total_order` puts them (Java's order, where -0.0 is below 0.0)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from lamina.errors import UpsertError

__all__ = ["cmp_arrow", "cmp_dtype", "cmp_values", "total_order"]


#: decimals of up to this precision compare as their unscaled int64 value
_DECIMAL_DIGITS = 18


def _small_decimal(t: pa.DataType) -> bool:
    return pa.types.is_decimal(t) and t.precision <= _DECIMAL_DIGITS


def cmp_dtype(t: pa.DataType) -> np.dtype:
    """The index's type for comparison values of Arrow type ``t``. Raises UpsertError
    for a type the index cannot order numerically (strings, wide decimals)."""
    if pa.types.is_floating(t):
        return np.dtype(np.float64)
    if (
        pa.types.is_integer(t) or pa.types.is_temporal(t) or pa.types.is_boolean(t)
    ) and not pa.types.is_uint64(t):
        return np.dtype(np.int64)
    if _small_decimal(t):  # one scale for the column: unscaled values keep the order
        return np.dtype(np.int64)
    raise UpsertError(
        f"a comparison column of type {t} is not supported by the key index yet: use a "
        f"numeric, date or timestamp column, or a decimal of precision <= {_DECIMAL_DIGITS}"
    )


def cmp_values(values: pa.Array | pa.ChunkedArray, dtype: np.dtype) -> np.ndarray:
    """Comparison values as the index holds them."""
    if _small_decimal(values.type):
        arr = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
        arr = arr.cast(pa.decimal128(arr.type.precision, arr.type.scale))
        words = np.frombuffer(arr.buffers()[1], "<i8")  # 128-bit little-endian: low, high
        return words[2 * arr.offset : 2 * (arr.offset + len(arr)) : 2].astype(dtype)
    if pa.types.is_temporal(values.type):  # date32 and time32 only cast to int32
        values = values.cast(pa.int32() if values.type.bit_width == 32 else pa.int64())
    return np.asarray(values.to_numpy(zero_copy_only=False), dtype=dtype)


def cmp_arrow(values: np.ndarray, t: pa.DataType) -> pa.Array:
    """Index comparison values back as Arrow type ``t``."""
    if _small_decimal(t):  # unscaled int64 -> 128-bit two's complement
        low = np.asarray(values, "<i8")
        words = np.stack([low, low >> 63], axis=1).ravel()
        dec = pa.Array.from_buffers(
            pa.decimal128(t.precision, t.scale), len(low), [None, pa.py_buffer(words)]
        )
        return dec.cast(t)
    arr = pa.array(values)
    if pa.types.is_temporal(t) and t.bit_width == 32:  # date32, time32: from int32
        return arr.cast(pa.int32()).cast(t)
    return arr.cast(t)


#: flips a negative float's magnitude bits: its int64 key then sorts as the float does
_MAGNITUDE = np.int64(0x7FFF_FFFF_FFFF_FFFF)


def total_order(values: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """Comparison values as they are compared and ranked: floats as int64 keys in the
    order of Java's ``Double.compareTo`` (Pinot's), where -0.0 is below 0.0; other
    types as they are. Nulls stay null (NaN is refused before)."""
    if not pa.types.is_floating(values.type):
        return values
    arr = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    f = arr.cast(pa.float64())
    bits = np.frombuffer(f.buffers()[1], np.int64)[f.offset : f.offset + len(f)]
    keys = bits ^ ((bits >> 63) & _MAGNITUDE)
    mask = f.is_null().to_numpy(zero_copy_only=False) if f.null_count else None
    return pa.array(keys, pa.int64(), mask=mask)
