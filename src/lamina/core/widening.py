"""Type widening of a table column (``t.widen_column``): the changes of a column's type
that every value already stored survives, so files written before read as the new type
without rewriting (pure).

Allowed, as Iceberg's and Delta's type widening allow them: a signed integer to a wider
signed integer; an unsigned integer to a wider unsigned one, or to a signed one of more
bits; float32 to float64; a decimal to one of more digits before and the same after the
point (``decimal128(p, s)`` to ``decimal128(p2, s)``, ``p2 > p``, up to 38 digits). No
other change: not integer to float (float64 holds integers up to 2^53 exactly),
not narrowing, not a change of time unit or zone.
"""

from __future__ import annotations

import pyarrow as pa

#: bits of the integer types, and whether they are signed
_INTS = {
    pa.int8(): (8, True),
    pa.int16(): (16, True),
    pa.int32(): (32, True),
    pa.int64(): (64, True),
    pa.uint8(): (8, False),
    pa.uint16(): (16, False),
    pa.uint32(): (32, False),
    pa.uint64(): (64, False),
}
#: the widest decimal128
MAX_DIGITS = 38


def widens(old: pa.DataType, new: pa.DataType) -> bool:
    """Whether every value of type ``old`` is a value of type ``new`` (and they differ)."""
    if old in _INTS and new in _INTS:
        (ob, osigned), (nb, nsigned) = _INTS[old], _INTS[new]
        if osigned:
            return nsigned and nb > ob
        return nb > ob  # unsigned: a wider unsigned, or a signed one of more bits
    if pa.types.is_float32(old):
        return pa.types.is_float64(new)
    if pa.types.is_decimal128(old) and pa.types.is_decimal128(new):
        return new.scale == old.scale and old.precision < new.precision <= MAX_DIGITS
    return False


def widenings(old: pa.DataType) -> list[pa.DataType]:
    """The types a column of type ``old`` may be widened to (for messages)."""
    if pa.types.is_decimal128(old):
        return [pa.decimal128(MAX_DIGITS, old.scale)] if old.precision < MAX_DIGITS else []
    candidates = [*_INTS, pa.float64()]
    return [t for t in candidates if widens(old, t)]


def refusal(old: pa.DataType, new: pa.DataType) -> str:
    """Why a column of type ``old`` cannot become ``new`` (which does not widen it), in
    words for an error message."""
    allowed = ", ".join(str(t) for t in widenings(old)) or "none"
    if old == new:
        return f"it is {old} already: nothing to widen"
    ints = old in _INTS and new in _INTS
    floats = pa.types.is_floating(old) and pa.types.is_floating(new)
    decimals = pa.types.is_decimal(old) and pa.types.is_decimal(new)
    if decimals and new.scale != old.scale:
        return (
            f"a decimal keeps its scale ({old.scale} digits after the point) when it widens, "
            f"or values already written would change (widenings of {old}: {allowed})"
        )
    if ints or floats or decimals:
        return (
            f"values already written would not all survive: {new} does not hold every {old} "
            f"value (widenings of {old}: {allowed})"
        )
    return f"{new} is not a widening of {old} (widenings of {old}: {allowed})"
