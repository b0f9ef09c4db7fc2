"""Columns of an input matched to a table's, as Spark and Delta match them: by name,
ignoring case, keeping the table's spelling; and the columns every write must give.
Pure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lamina.core.model import TableRecord
from lamina.errors import SchemaError

#: field metadata of a time column holding epoch numbers: their unit (``create_table``'s
#: ``time_unit``); writes may give the numbers, which are stored as timestamps
EPOCH_UNIT = b"lamina.epoch_unit"
EPOCH_UNITS = ("s", "ms", "us", "ns")


@dataclass(frozen=True)
class Matched:
    """An input's columns against a table's: ``renames`` (input name -> the table's
    spelling, for names that differ in case only), the table's columns the input
    lacks (``missing``), and the input's columns the table lacks (``extra``)."""

    renames: dict[str, str]
    missing: list[str]
    extra: list[str]


def match_columns(given: Sequence[str], table: Sequence[str]) -> Matched:
    """Match ``given`` names to ``table``'s: exactly, else ignoring case. Raises
    SchemaError when the input names a column twice (in any case), so that two of its
    columns would fill one of the table's."""
    by_lower: dict[str, str] = {}
    for name in given:
        other = by_lower.get(name.lower())
        if other is not None:
            raise SchemaError(
                f"the data has columns {other!r} and {name!r}, which name one column (names "
                "match ignoring case, as in Spark and SQL): keep one"
            )
        by_lower[name.lower()] = name
    exact = set(table)
    lower = {n.lower(): n for n in table}
    renames: dict[str, str] = {}
    extra: list[str] = []
    for name in given:
        if name in exact:
            continue
        spelled = lower.get(name.lower())
        if spelled is None:
            extra.append(name)
        else:
            renames[name] = spelled
    have = {renames.get(n, n) for n in given}
    missing = [n for n in table if n not in have]
    return Matched(renames, missing, extra)


def required_columns(rec: TableRecord) -> tuple[str, ...]:
    """The columns a write must give even when they are nullable: the time column, and
    an upsert table's key and comparison columns (a missing nullable column is written
    as nulls; a NOT NULL one is required anyway)."""
    from lamina.core.upsert_spec import UpsertSpec  # numpy, pyarrow

    out = [rec.time_column] if rec.time_column else []
    spec = UpsertSpec.from_properties(rec.properties, rec.schema, rec.time_column)
    if spec is not None:
        out += [*spec.primary_key, spec.comparison_column]
    return tuple(dict.fromkeys(out))
