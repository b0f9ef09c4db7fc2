"""Upsert table definitions: primary key, comparison and delete columns, and the
partial-upsert strategy of each column (Pinot's), checked against a schema. Pure.
The rules that use them are :mod:`lamina.core.upsert`'s."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
import pyarrow as pa

from lamina.core.properties import UPSERT_KEY_PROPERTY
from lamina.errors import UpsertError

#: Virtual columns of DuckDB's Parquet reader that ``cat.sql`` applies deletion vectors
#: with; a column of the same name would shadow them.
READER_COLUMNS = ("file_index", "file_row_number")

#: The key of ``partial_upsert`` naming the default strategy (Pinot's
#: ``defaultPartialUpsertStrategy``).
DEFAULT_KEY = "*"


class Strategy(StrEnum):
    """A partial-upsert strategy: how a column of a new record merges with the previous."""

    OVERWRITE = "OVERWRITE"
    FORCE_OVERWRITE = "FORCE_OVERWRITE"
    IGNORE = "IGNORE"
    INCREMENT = "INCREMENT"
    APPEND = "APPEND"
    UNION = "UNION"
    MAX = "MAX"
    MIN = "MIN"


def _is_ordered_scalar(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_decimal(t)
        or pa.types.is_temporal(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
    )


def _is_nested(t: pa.DataType) -> bool:
    return bool(pa.types.is_nested(t) or pa.types.is_dictionary(t))


def _is_list(t: pa.DataType) -> bool:
    return bool(pa.types.is_list(t) or pa.types.is_large_list(t))


def type_problem(strategy: Strategy, t: pa.DataType) -> str | None:
    """Why ``strategy`` cannot merge a column of type ``t`` (None: it can)."""
    if strategy is Strategy.INCREMENT and not (
        pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)
    ):
        return "INCREMENT needs an integer, floating-point or decimal column"
    if strategy in (Strategy.MAX, Strategy.MIN) and not _is_ordered_scalar(t):
        return f"{strategy.value} needs a numeric, decimal, temporal, string or binary column"
    if strategy is Strategy.APPEND and not _is_list(t):
        return "APPEND needs a list column"
    if strategy is Strategy.UNION and not (
        _is_list(t) and (_is_ordered_scalar(t.value_type) or pa.types.is_boolean(t.value_type))
    ):
        return "UNION needs a list column of a sortable scalar type"
    return None


@dataclass(frozen=True)
class UpsertSpec:
    """How a table upserts. Build it with :meth:`parse`, which checks it against a schema.

    ``partial`` is None for full upserts (the latest record replaces the previous one
    whole); otherwise the explicit (column, strategy) pairs, the rest of the columns
    (but the key, comparison and delete columns) merging with ``default_strategy``.
    """

    primary_key: tuple[str, ...]
    comparison_column: str
    delete_column: str | None = None
    partial: tuple[tuple[str, Strategy], ...] | None = None
    default_strategy: Strategy = Strategy.OVERWRITE

    @property
    def is_partial(self) -> bool:
        return self.partial is not None

    @property
    def strategies(self) -> dict[str, Strategy]:
        """The explicit per-column strategies (empty for full upserts)."""
        return dict(self.partial or ())

    @property
    def _unmerged(self) -> tuple[str, ...]:
        """The columns every record keeps as it came: key, comparison and delete."""
        return (*self.primary_key, self.comparison_column, *filter(None, [self.delete_column]))

    def strategy(self, column: str) -> Strategy | None:
        """The strategy merging ``column``; None for full upserts and for the key,
        comparison and delete columns, which are never merged (a record's delete flag is
        its own)."""
        if self.partial is None or column in self._unmerged:
            return None
        return self.strategies.get(column, self.default_strategy)

    @classmethod
    def parse(
        cls,
        schema: pa.Schema,
        time_column: str | None,
        primary_key: str | Iterable[str],
        comparison_column: str | None = None,
        delete_column: str | None = None,
        partial_upsert: Mapping[str, str | Strategy] | None = None,
    ) -> UpsertSpec:
        """Check an upsert definition against ``schema``.

        ``partial_upsert`` maps columns to strategy names (case-insensitive); its ``"*"``
        entry sets the default strategy (OVERWRITE otherwise); None means full upserts.

        Raises UpsertError, saying what to fix, for: an empty or repeated primary key; an
        unknown column anywhere; a nullable (see :func:`key_not_null`) or nested key column;
        no comparison column and no time column; a comparison column of a type without an
        order (list, struct, map, dictionary, boolean is allowed); a delete column that is
        not boolean or is a key or the comparison column; an unknown strategy; a strategy on
        a key or the comparison column; a strategy that cannot merge its column's type (also
        checked for every column the default strategy applies to); a column named as one of
        :data:`READER_COLUMNS` or starting with ``$``.
        """
        names = list(schema.names)
        own = [n for n in names if n.startswith("$")]
        if own:
            raise UpsertError(
                f"column {own[0]!r}: names starting with '$' are lamina's own on upsert "
                "tables ($valid_from and $valid_until of all_versions reads, and those it "
                "resolves keys with): rename it"
            )
        taken = sorted(set(names) & set(READER_COLUMNS))
        if taken:
            raise UpsertError(
                f"column {taken[0]!r} has the name of the row position SQL reads deletion "
                f"vectors by (reserved on upsert tables: {', '.join(READER_COLUMNS)}): "
                "rename it"
            )

        def field(col: object, role: str) -> pa.Field:
            if not isinstance(col, str) or col not in names:
                raise UpsertError(
                    f"{role} {col!r} is not a column of the table (columns: {', '.join(names)})"
                )
            return schema.field(col)

        try:
            keys = (primary_key,) if isinstance(primary_key, str) else tuple(primary_key)
        except TypeError:
            keys = (primary_key,)  # type: ignore[assignment]
        if not all(isinstance(k, str) for k in keys):
            raise UpsertError(f"primary_key={primary_key!r}: name a column, or a list of columns")
        if not keys:
            raise UpsertError("primary_key is empty: name one or more columns")
        if len(set(keys)) != len(keys):
            raise UpsertError(f"primary_key {list(keys)} names a column twice")
        for col in keys:
            f = field(col, "primary key column")
            if pa.types.is_null(f.type):
                raise UpsertError(
                    f"primary key column {col!r} has type null (no values): give it a type"
                )
            if f.nullable:
                raise UpsertError(
                    f"primary key column {col!r} is nullable in the stored schema: key "
                    "columns are NOT NULL (create_table makes them so)"
                )
            if _is_nested(f.type):
                raise UpsertError(
                    f"primary key column {col!r} has type {f.type}: a key column must be "
                    "a scalar (number, string, binary, date/time, decimal, boolean)"
                )

        cmp_col = comparison_column if comparison_column is not None else time_column
        if cmp_col is None:
            raise UpsertError(
                "the table has no time column: name a comparison_column (the greatest "
                "value of it wins)"
            )
        f = field(cmp_col, "comparison column")
        if not (_is_ordered_scalar(f.type) or pa.types.is_boolean(f.type)):
            raise UpsertError(
                f"comparison column {cmp_col!r} has type {f.type}, which has no order: use "
                "a numeric, decimal, date/time or boolean column"
            )

        if delete_column is not None:
            f = field(delete_column, "delete column")
            if not is_delete_type(f.type):
                raise UpsertError(
                    f"delete column {delete_column!r} has type {f.type}: it must be boolean "
                    "(true marks a delete), a string ('true' or '1') or a number (1)"
                )
            if delete_column in keys or delete_column == cmp_col:
                raise UpsertError(
                    f"delete column {delete_column!r} cannot also be a key or the comparison column"
                )

        if partial_upsert is None:
            return cls(keys, cmp_col, delete_column)
        if not isinstance(partial_upsert, Mapping):
            raise UpsertError(
                "partial_upsert must be a dict {column: strategy}, e.g. {'clicks': "
                "'INCREMENT', '*': 'OVERWRITE'}"
            )

        def strategy(col: str, value: object) -> Strategy:
            name = value.value if isinstance(value, Strategy) else value
            if isinstance(name, str) and name.upper() in Strategy.__members__:
                return Strategy[name.upper()]
            raise UpsertError(
                f"unknown partial upsert strategy {value!r} for {col!r}; use one of "
                f"{', '.join(s.value for s in Strategy)}"
            )

        default = Strategy.OVERWRITE
        explicit: dict[str, Strategy] = {}
        for col, value in partial_upsert.items():
            if col == DEFAULT_KEY:
                default = strategy(col, value)
                continue
            f = field(col, "partial upsert column")
            if col in keys or col in (cmp_col, delete_column):
                role = (
                    "primary key" if col in keys else ("comparison" if col == cmp_col else "delete")
                )
                raise UpsertError(
                    f"{col!r} is the {role} column: it is never merged, remove its "
                    "partial upsert strategy"
                )
            explicit[col] = strategy(col, value)
        for col in names:
            if col in keys or col in (cmp_col, delete_column):
                continue
            s = explicit.get(col, default)
            problem = type_problem(s, schema.field(col).type)
            if problem:
                how = "" if col in explicit else " (the default strategy, set by '*')"
                raise UpsertError(
                    f"partial upsert strategy {s.value}{how} cannot merge column {col!r} of "
                    f"type {schema.field(col).type}: {problem}"
                )
        return cls(keys, cmp_col, delete_column, tuple(sorted(explicit.items())), default)

    def to_properties(self) -> dict[str, str]:
        """The definition as table properties (``upsert.*``)."""
        props = {
            UPSERT_KEY_PROPERTY: json.dumps(list(self.primary_key)),
            "upsert.comparison_column": self.comparison_column,
        }
        if self.delete_column is not None:
            props["upsert.delete_column"] = self.delete_column
        if self.partial is not None:
            strategies = {c: s.value for c, s in self.partial}
            props["upsert.partial"] = json.dumps(
                {**strategies, DEFAULT_KEY: self.default_strategy.value}
            )
        return props

    @classmethod
    def from_properties(
        cls, props: Mapping[str, str], schema: pa.Schema, time_column: str | None
    ) -> UpsertSpec | None:
        """The definition a table's properties hold; None for a table without a primary
        key. Raises UpsertError if they no longer fit the schema."""
        raw = props.get(UPSERT_KEY_PROPERTY)
        if raw is None:
            return None
        partial = props.get("upsert.partial")
        return cls.parse(
            schema,
            time_column,
            json.loads(raw),
            props.get("upsert.comparison_column"),
            props.get("upsert.delete_column"),
            json.loads(partial) if partial is not None else None,
        )


def key_not_null(schema: pa.Schema, primary_key: object) -> pa.Schema:
    """``schema`` with its primary key columns NOT NULL: a key column may be given
    nullable (Spark computes most columns so), and every write then refuses a null
    there, as a NOT NULL constraint. Names that are not columns are left to
    :meth:`UpsertSpec.parse` to refuse."""
    keys = [primary_key] if isinstance(primary_key, str) else primary_key
    if not isinstance(keys, Iterable):
        return schema
    named = {k for k in keys if isinstance(k, str)}
    return pa.schema(
        [f.with_nullable(False) if f.name in named else f for f in schema],
        metadata=schema.metadata,
    )


def refuse_consistent_push(props: Mapping[str, str]) -> None:
    """Raise UpsertError when ``props`` turn ``consistent_push`` on (for an upsert table)."""
    if str(props.get("consistent_push", "false")).lower() == "true":
        raise UpsertError(
            "consistent_push is not available on an upsert table: keys are resolved when "
            "each write publishes, so rolling a push back would bring back records that "
            "later upserts replaced; refresh or overwrite it instead, each one atomic "
            "commit"
        )


def is_delete_type(t: pa.DataType) -> bool:
    """Whether a delete column may have type ``t`` (Pinot: boolean, string, numeric)."""
    return (
        pa.types.is_boolean(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_decimal(t)
    )


def no_delete(n: int, t: pa.DataType) -> pa.Array:
    """``n`` values of a delete column of type ``t`` that mark no delete."""
    if pa.types.is_boolean(t):
        return pa.array(np.zeros(n, bool))
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return pa.array(["false"] * n, t)
    return pa.array(np.zeros(n, np.int8)).cast(t)


def delete_flags(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Which records a delete column's ``values`` mark as deletes, as Pinot's
    ``BooleanUtils.toBoolean`` reads them: true; a string equal to 'true' (any case) or
    '1'; a number whose Java ``intValue()`` is 1 (a fraction truncated toward zero, a
    long's low 32 bits). A null is no delete."""
    import pyarrow.compute as pc  # loads pyarrow

    t = values.type
    if pa.types.is_boolean(t):
        flags = values
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        flags = pc.or_(pc.equal(pc.utf8_lower(values), "true"), pc.equal(values, "1"))
    elif pa.types.is_integer(t):
        low = pc.bit_wise_and(values.cast(pa.int64(), safe=False), 0xFFFFFFFF)
        flags = pc.equal(low, 1)
    elif pa.types.is_floating(t):  # (int) of a double: truncated, NaN and 2^31+ not 1
        x = values.cast(pa.float64())
        flags = pc.and_(pc.greater_equal(x, 1.0), pc.less(x, 2.0))
    else:  # BigDecimal.intValue(): the integer part's low 32 bits
        return np.array(
            [v is not None and int(v) & 0xFFFFFFFF == 1 for v in values.to_pylist()], bool
        )
    filled = pc.fill_null(flags, False)
    return np.asarray(filled.to_numpy(zero_copy_only=False), bool)


def ties_stay_in_chunk(
    props: Mapping[str, str], schema: pa.Schema, time_column: str | None
) -> bool:
    """Whether the order of a write's rows matters only within each time chunk: true
    for a table without a primary key, and for an upsert table whose comparison column
    is its time column (two records of a key that tie on it lie in one chunk); false
    where a tie between chunks goes to the later row of the write."""
    spec = UpsertSpec.from_properties(props, schema, time_column)
    return spec is None or (time_column is not None and spec.comparison_column == time_column)
