"""A table's definition given again (``create_table(..., exist_ok=True)``, a rerun of a
pipeline) against the table found: what differs, and the time column of epoch numbers
(``time_unit``). Pure."""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa

from lamina.core.columns import EPOCH_UNIT, EPOCH_UNITS
from lamina.core.interval import Granularity
from lamina.core.model import TableRecord
from lamina.errors import TimeColumnError


def epoch_time_column(
    schema: pa.Schema, time_column: str | None, time_unit: str | None
) -> pa.Schema:
    """``schema`` with its time column of epoch numbers (integers counting ``time_unit``:
    s, ms, us or ns since 1970-01-01 UTC) stored as ``timestamp[time_unit, tz=UTC]``,
    its field's metadata saying the unit (:data:`EPOCH_UNIT`: writes may give the
    numbers). Raises TimeColumnError for a unit without a time column, an unknown unit,
    or a time column that holds no integers."""
    if time_unit is None:
        return schema
    if not isinstance(time_unit, str) or time_unit not in EPOCH_UNITS:
        raise TimeColumnError(
            f"time_unit={time_unit!r}: give the unit of the time column's epoch numbers, "
            f"one of {', '.join(EPOCH_UNITS)}"
        )
    if time_column is None or time_column not in schema.names:
        raise TimeColumnError(
            "time_unit is the unit of the time column's epoch numbers: name that column "
            "(time_column=...)"
        )
    f = schema.field(time_column)
    if not pa.types.is_integer(f.type):
        raise TimeColumnError(
            f"time_unit={time_unit!r} is for a time column of epoch numbers (integers), but "
            f"{time_column!r} has type {f.type}: drop time_unit"
        )
    meta = {**(f.metadata or {}), EPOCH_UNIT: time_unit.encode()}
    stored = f.with_type(pa.timestamp(time_unit, tz="UTC")).with_metadata(meta)
    return schema.set(schema.get_field_index(time_column), stored)


def _column_text(f: pa.Field) -> str:
    unit = (f.metadata or {}).get(EPOCH_UNIT)
    epoch = f" of epoch {unit.decode()}" if unit else ""
    return f"{f.type}{'' if f.nullable else ' not null'}{epoch}"


def schema_differences(given: pa.Schema, found: pa.Schema) -> list[str]:
    """How the ``given`` schema (stored form) differs from the table's ``found``."""
    if given.names != found.names:
        return [f"columns {given.names} given, the table has {found.names}"]
    return [
        f"column {g.name!r}: {_column_text(g)} given, {_column_text(f)} in the table"
        for g, f in zip(given, found, strict=True)
        if _column_text(g) != _column_text(f)
    ]


def differences(
    rec: TableRecord,
    created_with: pa.Schema,
    schema: pa.Schema,
    time_column: str | None,
    granularity: Granularity,
    properties: Mapping[str, str],
) -> list[str]:
    """What a definition given again differs in from table ``rec`` (none: it matches):
    the schema (the table's now, or the one it was created with: columns added since
    do not count), the time column, the granularity, and each property given (the
    upsert definition among them)."""
    out: list[str] = []
    now, then = schema_differences(schema, rec.schema), schema_differences(schema, created_with)
    if now and then:  # against the schema it was created with, when it changed since
        out += then if created_with != rec.schema else now
    if time_column != rec.time_column:
        out.append(f"time column {time_column!r} given, the table has {rec.time_column!r}")
    if granularity is not rec.granularity:
        out.append(f"granularity {granularity.value} given, the table has {rec.granularity.value}")
    for key, value in sorted(properties.items()):
        have = rec.properties.get(key)
        if have != value:
            out.append(f"property {key}={value!r} given, the table has {have!r}")
    return out
