"""Schemas written as text: ``"ts:timestamp[us, tz=UTC],k:int64,v:float64"`` (pure)."""

from __future__ import annotations

import re

import pyarrow as pa

from lamina.errors import SchemaError

_SIMPLE_TYPES: dict[str, pa.DataType] = {
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "uint8": pa.uint8(),
    "uint16": pa.uint16(),
    "uint32": pa.uint32(),
    "uint64": pa.uint64(),
    "float16": pa.float16(),
    "halffloat": pa.float16(),
    "float32": pa.float32(),
    "float": pa.float32(),
    "float64": pa.float64(),
    "double": pa.float64(),
    "string": pa.string(),
    "str": pa.string(),
    "utf8": pa.string(),
    "large_string": pa.large_string(),
    "large_utf8": pa.large_string(),
    "bool": pa.bool_(),
    "boolean": pa.bool_(),
    "date": pa.date32(),
    "date32": pa.date32(),
    "date32[day]": pa.date32(),
    "date64": pa.date64(),
    "date64[ms]": pa.date64(),
    "binary": pa.binary(),
    "bytes": pa.binary(),
    "large_binary": pa.large_binary(),
    "timestamp": pa.timestamp("us"),
    "timestamptz": pa.timestamp("us", tz="UTC"),
}
_TIMESTAMP = re.compile(r"timestamp\[\s*(s|ms|us|ns)\s*(?:,\s*tz\s*=\s*([^\]\s]+)\s*)?\]", re.I)
_DECIMAL = re.compile(r"decimal(128|256)?\(\s*(\d+)\s*,\s*(-?\d+)\s*\)", re.I)


def parse_type(text: str) -> pa.DataType:
    """An Arrow type from its name: ``int64``, ``timestamp[us, tz=UTC]``, ``decimal(10,2)``...

    Raises :class:`SchemaError` for an unknown name or an impossible decimal.
    """
    name = text.strip()
    simple = _SIMPLE_TYPES.get(name.lower())
    if simple is not None:
        return simple
    m = _TIMESTAMP.fullmatch(name)
    if m:
        return pa.timestamp(m.group(1).lower(), tz=m.group(2))
    m = _DECIMAL.fullmatch(name)
    if m:
        width, precision, scale = m.group(1), int(m.group(2)), int(m.group(3))
        if not 1 <= precision <= 76:
            raise SchemaError(f"decimal precision must be 1..76, not {precision}")
        if width == "128" or (width is None and precision <= 38):
            if precision > 38:
                raise SchemaError(f"decimal128 holds at most 38 digits, not {precision}")
            return pa.decimal128(precision, scale)
        return pa.decimal256(precision, scale)
    raise SchemaError(
        f"unknown column type {name!r}; use int8..int64, uint8..uint64, float32, float64, "
        "string, large_string, bool, date32, date64, binary, large_binary, decimal(P,S), "
        "timestamp[UNIT] or timestamp[UNIT, tz=ZONE] with UNIT s, ms, us or ns"
    )


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside brackets or parentheses."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def parse_schema(text: str) -> pa.Schema:
    """``"ts:timestamp[us, tz=UTC],k:int64,v:float64"`` -> an Arrow schema.

    Raises :class:`SchemaError` for a malformed pair, a repeated column or an unknown type.
    """
    fields: list[pa.Field] = []
    for part in _split_top_level(text):
        name, sep, type_text = part.partition(":")
        name = name.strip()
        if not sep or not name or not type_text.strip():
            raise SchemaError(
                f"cannot read column {part.strip()!r} of the schema; write NAME:TYPE pairs "
                "separated by commas, e.g. ts:timestamp[us, tz=UTC],k:int64,v:float64"
            )
        if name in (f.name for f in fields):
            raise SchemaError(f"column {name!r} appears twice in the schema")
        fields.append(pa.field(name, parse_type(type_text)))
    return pa.schema(fields)
