"""Checks of Arrow values a safe cast lets through: time zones the time zone
database lacks, and floats a narrowing cast made infinite or zero (at any depth)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from lamina.errors import SchemaError


def is_list_like(t: pa.DataType) -> bool:
    """Lists of any kind: variable, large, fixed-size, views."""
    return bool(
        pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or pa.types.is_fixed_size_list(t)
        or pa.types.is_list_view(t)
        or pa.types.is_large_list_view(t)
    )


def check_zones(column: str, t: pa.DataType) -> None:
    """Raise SchemaError for a timestamp (at any depth) whose time zone Arrow cannot
    find: the table would take rows and fail every read that converts them."""
    import pyarrow.compute as pc  # loads pyarrow

    if pa.types.is_timestamp(t) and t.tz is not None:
        try:
            pc.hour(pa.array([0], t))
        except pa.ArrowInvalid:
            raise SchemaError(
                f"column {column!r} has time zone {t.tz!r}, which is not in the time zone "
                "database: use a name such as 'UTC' or 'Europe/Paris', or an offset such "
                "as '+01:00'"
            ) from None
    for i in range(t.num_fields):  # list values, struct fields, map keys and items
        check_zones(column, t.field(i).type)


def check_floats(wide: pa.Array, narrow: pa.Array) -> None:
    """:func:`_check_narrowed` on every float (top level, or a member of lists, maps
    and structs) that a cast narrowed."""
    a, b = wide.type, narrow.type
    if pa.types.is_floating(a) and pa.types.is_floating(b):
        if b.bit_width < a.bit_width:
            _check_narrowed(wide, narrow)
    elif pa.types.is_map(a) and pa.types.is_map(b):
        check_floats(wide.keys, narrow.keys)
        check_floats(wide.items, narrow.items)
    elif is_list_like(a) and is_list_like(b):
        check_floats(wide.flatten(), narrow.flatten())
    elif pa.types.is_struct(a) and pa.types.is_struct(b):
        for x, y in zip(wide.flatten(), narrow.flatten(), strict=True):
            check_floats(x, y)


def _check_narrowed(wide: pa.Array, narrow: pa.Array) -> None:
    """A float cast keeps every value in range: rounding is a float's nature, but a
    finite value that becomes infinite, or a non-zero one that becomes zero, is lost
    (pyarrow's safe cast checks neither). Raises ArrowInvalid naming the first."""
    a = wide.to_numpy(zero_copy_only=False)  # nulls read as NaN: never flagged
    b = narrow.to_numpy(zero_copy_only=False)
    with np.errstate(invalid="ignore"):
        lost = (np.isfinite(a) & ~np.isfinite(b)) | ((a != 0) & (b == 0))
    if lost.any():
        value = float(a[int(np.argmax(lost))])
        raise pa.ArrowInvalid(f"value {value!r} is out of {narrow.type}'s range")
