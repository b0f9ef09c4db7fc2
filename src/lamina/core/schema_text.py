"""Schemas written as text (pure): lamina's ``"ts:timestamp[us, tz=UTC],k:int64"``, or
a Spark DDL string, ``"ts timestamp, k long not null, tags array<string>"``.

Type names are Arrow's (``int64``, ``timestamp[ms, tz=UTC]``, ``decimal(10,2)``) or
Spark's (``string``, ``int``, ``long``/``bigint``, ``short``, ``byte``, ``double``,
``float``, ``boolean``, ``date``, ``timestamp``, ``timestamp_ntz``, ``decimal(p,s)``,
``binary``, ``array<T>``, ``map<K,V>``, ``struct<a:T,b:U>``). A bare ``timestamp`` is
Spark's: an instant, ``timestamp[us, tz=UTC]`` (lamina's one inferred timestamp type);
``timestamp_ntz`` a naive one, ``timestamp[us]``."""

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
    "byte": pa.int8(),
    "tinyint": pa.int8(),
    "short": pa.int16(),
    "smallint": pa.int16(),
    "int": pa.int32(),
    "integer": pa.int32(),
    "long": pa.int64(),
    "bigint": pa.int64(),
    "float16": pa.float16(),
    "halffloat": pa.float16(),
    "float32": pa.float32(),
    "float": pa.float32(),
    "real": pa.float32(),
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
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ltz": pa.timestamp("us", tz="UTC"),
    "timestamptz": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
    "decimal": pa.decimal128(10, 0),  # Spark's default precision and scale
}
_TIMESTAMP = re.compile(r"timestamp\[\s*(s|ms|us|ns)\s*(?:,\s*tz\s*=\s*([^\]\s]+)\s*)?\]", re.I)
_DECIMAL = re.compile(r"decimal(128|256)?\(\s*(\d+)\s*,\s*(-?\d+)\s*\)", re.I)
_TEXT = re.compile(r"(?:var)?char\(\s*\d+\s*\)", re.I)
_NESTED = re.compile(r"(array|map|struct)\s*<(.*)>", re.I | re.S)
_NOT_NULL = re.compile(r"\s+not\s+null\s*$", re.I)


def parse_type(text: str) -> pa.DataType:
    """An Arrow type from its name: ``int64``, ``long``, ``timestamp[us, tz=UTC]``,
    ``decimal(10,2)``, ``array<string>``...

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
    if _TEXT.fullmatch(name):
        return pa.string()
    m = _NESTED.fullmatch(name)
    if m:
        return _nested(m.group(1).lower(), m.group(2), name)
    raise SchemaError(
        f"unknown column type {name!r}; use int8..int64, uint8..uint64, float32, float64, "
        "string, large_string, bool, date32, date64, binary, large_binary, decimal(P,S), "
        "timestamp[UNIT] or timestamp[UNIT, tz=ZONE] with UNIT s, ms, us or ns, or Spark's "
        "names (int, long, double, timestamp, timestamp_ntz, array<T>, map<K,V>, "
        "struct<a:T>...)"
    )


def _nested(kind: str, inner: str, name: str) -> pa.DataType:
    """``array<T>``, ``map<K,V>`` or ``struct<a:T,...>`` from the text inside ``<>``."""
    parts = _split_top_level(inner)
    if kind == "array" and len(parts) == 1:
        return pa.list_(parse_type(parts[0]))
    if kind == "map" and len(parts) == 2:
        return pa.map_(parse_type(parts[0]), parse_type(parts[1]))
    if kind == "struct" and all(p.strip() for p in parts):
        return pa.struct([_field(p) for p in parts])
    raise SchemaError(f"cannot read type {name!r}: write array<T>, map<K,V> or struct<name:T,...>")


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside brackets, parentheses or ``<>``."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "[(<":
            depth += 1
        elif ch in "])>":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _field(part: str) -> pa.Field:
    """One ``NAME:TYPE`` or ``NAME TYPE`` (Spark DDL), optionally ``NOT NULL``; a name
    in backticks may hold anything (a doubled backtick is one)."""
    text = part.strip()
    nullable = True
    m = _NOT_NULL.search(text)
    if m:
        text, nullable = text[: m.start()], False
    if text.startswith("`"):
        end = text.find("`", 1)
        while end > 0 and text[end : end + 2] == "``":
            end = text.find("`", end + 2)
        if end < 0:
            raise SchemaError(f"column {part.strip()!r}: its name's backtick is not closed")
        name, rest = text[1:end].replace("``", "`"), text[end + 1 :]
        type_text = rest.strip().removeprefix(":")
    else:
        colon = re.match(r"([^:\s<>(\[]+)\s*:(.*)", text, re.S)
        spaced = re.match(r"(\S+)\s+(.+)", text, re.S)
        m2 = colon or spaced
        name, type_text = (m2.group(1), m2.group(2)) if m2 else (text, "")
    name = name.strip()
    if not name or not type_text.strip():
        raise SchemaError(
            f"cannot read column {part.strip()!r} of the schema; write NAME:TYPE pairs "
            "separated by commas, e.g. ts:timestamp[us, tz=UTC],k:int64,v:float64, or "
            "Spark's DDL, e.g. ts timestamp, k long"
        )
    return pa.field(name, parse_type(type_text), nullable)


def parse_schema(text: str) -> pa.Schema:
    """``"ts:timestamp[us, tz=UTC],k:int64,v:float64"`` or ``"ts timestamp, k long not
    null"`` -> an Arrow schema.

    Raises :class:`SchemaError` for a malformed column, a repeated one or an unknown
    type.
    """
    fields: list[pa.Field] = []
    for part in _split_top_level(text):
        f = _field(part)
        if f.name in (g.name for g in fields):
            raise SchemaError(f"column {f.name!r} appears twice in the schema")
        fields.append(f)
    return pa.schema(fields)
