"""Schema evolution: the columns a table can be given after it was created and the
wider types its columns can take, checked against its schema and upsert definition
(the catalog change is :func:`lamina.meta.schemas.change_schema`'s)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lamina.changes import CHANGE, COMMIT_ID, COMMIT_SEQ
from lamina.core.args import flag
from lamina.core.autocompact import check_policy, check_properties, policy_of
from lamina.core.columns import match_columns
from lamina.core.comparison import cmp_dtype
from lamina.core.model import Commit, TableRecord
from lamina.core.properties import as_text, check_reserved
from lamina.core.upsert_spec import UpsertSpec, refuse_consistent_push
from lamina.core.widening import refusal, widens
from lamina.errors import SchemaError, UpsertError
from lamina.io.arrow import (
    inferred_type,
    is_spark_dataframe,
    storage_type,
    table_schema,
    to_arrow_table,
)
from lamina.meta import tables
from lamina.meta.schemas import change_schema
from lamina.operations.handle import TableHandle

if TYPE_CHECKING:
    import pyarrow as pa


def change_properties(h: TableHandle, props: dict[str, Any], remove: tuple[str, ...]) -> None:
    """Set ``props`` and remove ``remove`` in one catalog change; the handle's record
    becomes the new one. Raises PropertyError (nothing changes then)."""
    values = as_text(props)
    check_reserved([*values, *remove], creating=False)
    if h.is_upsert:
        refuse_consistent_push(values)
    checked = check_properties(values)
    if any(k.startswith("compaction.") for k in [*checked, *remove]):  # on this table
        after = {**h.record.properties, **checked}
        after = {k: v for k, v in after.items() if k not in remove}
        pol = policy_of(after, h.target_rows_per_segment)
        check_policy(pol, h.schema, h.time_column, h.granularity, setting=True)
    h.record = tables.set_properties(h.ctx.db, h.name, checked, remove)


def add_columns(h: TableHandle, fields: Any) -> Commit:
    """Add nullable columns in one ALTER commit; the handle's record becomes the new
    one. Raises SchemaError, UpsertError (nothing changes then)."""
    wanted = new_fields(fields)
    h.record, commit = change_schema(h.ctx.db, h.name, lambda rec: added(rec, wanted))
    return commit


def widen_column(h: TableHandle, column: Any, new_type: Any) -> Commit:
    """Widen a column's type in one ALTER commit; the handle's record becomes the new
    one. Raises SchemaError, UpsertError (nothing changes then)."""
    h.record, commit = change_schema(h.ctx.db, h.name, lambda rec: widened(rec, column, new_type))
    return commit


def check_names(names: list[str]) -> None:
    """Raises SchemaError for an empty or repeated column name (ignoring case, as SQL
    does), one that incremental reads add, or one of lamina's own (``__lamina``...)."""

    seen: dict[str, str] = {}
    for name in names:
        if not name:
            raise SchemaError("a column has an empty name: name it")
        if name in seen.values():
            raise SchemaError(f"column {name!r} appears twice in the schema: rename one")
        if name.lower() in seen:
            raise SchemaError(
                f"columns {seen[name.lower()]!r} and {name!r} differ only in case, which SQL "
                "(DuckDB, Spark) does not tell apart: rename one"
            )
        seen[name.lower()] = name
        if name.lower().startswith("__lamina"):
            raise SchemaError(
                f"column {name!r}: names starting with __lamina are lamina's own (its Spark "
                "writes and reads add such columns): rename it"
            )
        if name in (CHANGE, COMMIT_ID, COMMIT_SEQ):
            raise SchemaError(
                f"column {name!r} has the name of a column t.read_changes adds "
                f"({CHANGE}, {COMMIT_ID}, {COMMIT_SEQ} are reserved): rename it"
            )


def new_fields(fields: Any) -> list[pa.Field]:
    """The columns ``t.add_columns`` was given: ``pa.field``s, or one ``pa.Schema`` or
    list of them. Raises SchemaError for anything else, or for none."""

    out: list[pa.Field] = []
    for item in fields:
        if isinstance(item, pa.Field):
            out.append(item)
        elif (
            isinstance(item, pa.Schema)
            or isinstance(item, list | tuple)
            and all(isinstance(f, pa.Field) for f in item)
        ):
            out += list(item)
        else:
            raise SchemaError(
                f"add_columns takes pa.field(name, type) values (or a pa.schema of them), "
                f"not {item!r}"
            )
    if not out:
        raise SchemaError("add_columns got no column: pass pa.field(name, type), ...")
    return out


def added(rec: TableRecord, fields: list[pa.Field]) -> tuple[pa.Schema, dict[str, object]]:
    """The schema of ``rec`` with ``fields`` added at its end (as stored), and the
    commit's metadata. Raises SchemaError for a column that is not nullable (the rows
    written before have no value for it), whose name is taken (any case), empty or
    reserved, or whose type lamina cannot store; UpsertError for one an upsert table
    cannot take (a ``$`` name, the reader's row position names, a type the default
    partial-upsert strategy cannot merge)."""

    fixed = [f.name for f in fields if not f.nullable]
    if fixed:
        raise SchemaError(
            f"column {fixed[0]!r} is declared not null, but the rows already written have "
            f"no value for it: add it nullable (pa.field({fixed[0]!r}, type))"
        )
    have = {n.lower(): n for n in rec.schema.names}
    taken = [f.name for f in fields if f.name.lower() in have]
    if taken:
        name = have[taken[0].lower()]
        raise SchemaError(
            f"table {rec.name!r} already has a column {name!r}"
            + ("" if name == taken[0] else f" (SQL does not tell it from {taken[0]!r})")
            + ": pick another name"
        )
    stored = table_schema(pa.schema(fields))
    schema = pa.schema([*rec.schema, *stored])
    check_names(schema.names)
    UpsertSpec.from_properties(rec.properties, schema, rec.time_column)  # still fits
    columns = [{"name": f.name, "type": str(f.type)} for f in stored]
    return schema, {"add_columns": columns}


def widened(rec: TableRecord, column: Any, new_type: Any) -> tuple[pa.Schema, dict[str, object]]:
    """The schema of ``rec`` with ``column`` of ``new_type`` (as stored), and the
    commit's metadata. Raises SchemaError for an unknown column, a type that is not an
    Arrow type or is no widening of the column's (:func:`lamina.core.widening.widens`);
    UpsertError for a primary key column (its values are hashed as typed), a
    comparison column whose values the key index would hold otherwise, or a type the
    column's partial-upsert strategy cannot merge."""

    names = rec.schema.names
    if not isinstance(column, str) or column not in names:
        raise SchemaError(f"{column!r} is not a column of {rec.name!r} (columns: {names})")
    if not isinstance(new_type, pa.DataType):
        raise SchemaError(
            f"widen_column takes the new type as a pyarrow type (pa.int64()), not {new_type!r}"
        )
    old_field = rec.schema.field(column)
    old, new = old_field.type, storage_type(new_type, column)
    if not widens(old, new):
        raise SchemaError(
            f"column {column!r} of type {old} cannot become {new}: {refusal(old, new)}"
        )
    spec = UpsertSpec.from_properties(rec.properties, rec.schema, rec.time_column)
    if spec is not None and column in spec.primary_key:
        raise UpsertError(
            f"{column!r} is a primary key column: keys are hashed as typed, so a wider type "
            "would give stored keys other hashes; create a new table to change it"
        )
    if spec is not None and column == spec.comparison_column and cmp_dtype(new) != cmp_dtype(old):
        raise UpsertError(
            f"comparison column {column!r} cannot become {new}: the key index holds its "
            f"values as {cmp_dtype(old)}"
        )
    schema = rec.schema.set(names.index(column), old_field.with_type(new))
    UpsertSpec.from_properties(rec.properties, schema, rec.time_column)  # still fits
    return schema, {"widen_column": {"name": column, "from": str(old), "to": str(new)}}


def merged(
    h: TableHandle,
    data: Any,
    evolve: bool,
    metadata: dict[str, Any],
    write: Callable[[TableHandle, Any, dict[str, Any]], Commit],
) -> Commit:
    """``write(handle, data, metadata)``; with ``evolve``, Delta's ``mergeSchema``: the
    input's columns the table lacks are added (nullable, at the end) by the write's own
    commit, which records them in its metadata (``add_columns``), and ``h`` then has
    the new schema. Raises SchemaError (a new column declared NOT NULL, a name that
    is reserved, a type lamina cannot store or that does not fit the table's column),
    UpsertError (a column the upsert table cannot take), InvalidArgumentError
    (``evolve`` not a bool), and what ``write`` raises; nothing changes then."""
    if not flag(evolve, "evolve"):
        return write(h, data, metadata)
    given, data = _input_schema(data)
    extra = match_columns(given.names, h.schema.names).extra
    if not extra:
        return write(h, data, metadata)
    fixed = [n for n in extra if not given.field(n).nullable]
    if fixed:
        raise SchemaError(
            f"evolve=True adds columns, nullable ones only (the rows already written have "
            f"no value for them), but the data declares {fixed} NOT NULL: make them nullable "
            f"or add them with t.add_columns(pa.field(name, type)) first"
        )
    fields = [pa.field(n, inferred_type(given.field(n).type)) for n in extra]
    schema, meta = added(h.record, fields)
    adding = tuple(schema.field(n) for n in extra)
    evolving = TableHandle(h.ctx, h.record.with_schema(schema), adding)
    done = write(evolving, data, {**metadata, **meta})
    h.record = h.reloaded()[0]
    return done


def _input_schema(data: Any) -> tuple[pa.Schema, Any]:
    """The Arrow schema of a write's input, and the input (read into Arrow if it had
    to be). Raises UnsupportedInputError, SchemaError."""
    if is_spark_dataframe(data):
        from lamina.engines.spark_schema import spark_to_arrow_schema  # loads pyspark

        return spark_to_arrow_schema(data.schema), data
    if isinstance(data, pa.Table | pa.RecordBatch | pa.RecordBatchReader):
        return data.schema, data
    table = to_arrow_table(data)
    return table.schema, table
