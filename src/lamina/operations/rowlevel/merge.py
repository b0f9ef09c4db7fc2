"""``t.merge(source, on=[...])``: Delta's MERGE as a builder, executed as one commit.

The clauses, each with an optional condition (a SQL expression over ``source.<col>``
and ``target.<col>``), are tried in the order they were added; a row takes the first
whose condition holds, and is left alone when none does (Delta's rules):

- ``when_matched_update(set=...)``, ``when_matched_update_all()``,
  ``when_matched_delete()``: target rows with a source row of equal ``on`` values;
- ``when_not_matched_insert(values=...)``, ``when_not_matched_insert_all()``: source
  rows no target row matches;
- ``when_not_matched_by_source_delete()``: target rows no source row matches.

A target row that several source rows match is refused when a matched clause exists
(Delta's "multiple source rows matched"): nothing is changed. On a plain table the
merge is a :func:`lamina.operations.rowlevel.change` (MERGE); on an upsert table
(``on`` = its primary key) its updated and inserted records and a tombstone per
deleted one are upserted together — so a plain merge (update all, insert all) is an
upsert.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lamina.core.model import Commit, CommitAction, user_metadata
from lamina.core.properties import SCHEMA_CHANGED_SEQ
from lamina.core.scan import ScanPlan
from lamina.engines.duckdb_views import quote
from lamina.errors import RowLevelError
from lamina.io.arrow import conform, is_spark_dataframe, to_arrow_table
from lamina.io.reader import snapshot_files
from lamina.operations.handle import TableHandle
from lamina.operations.kinds import upserted_as_read
from lamina.operations.retry import MERGE_ATTEMPTS, retrying
from lamina.operations.rowlevel import Decision, attempts_of, change, check_values
from lamina.operations.rowlevel.matching import (
    FILE,
    POS,
    assigned,
    evaluating,
    fetch,
    matching,
    visible_rows_view,
)

_SOURCE = "__lamina_source"
_TARGET = "__lamina_target"
_KEYS = "__lamina_source_keys"


def _clauses_evaluated() -> contextlib.AbstractContextManager[duckdb.DuckDBPyConnection]:
    """A cursor whose DuckDB errors say the merge's clauses cannot be evaluated."""
    return evaluating(
        "the merge's clauses",
        "check their column names (source.<col>, target.<col>) and types",
    )


@dataclass(frozen=True)
class Clause:
    """One WHEN clause: ``kind`` (matched, not_matched, not_matched_by_source),
    ``action`` (update, delete, insert), its condition, and the values it sets
    (column -> SQL expression; None: every column from the source)."""

    kind: str
    action: str
    condition: str | None
    values: Mapping[str, str] | None


class MergeBuilder:
    """A merge being built (see the module); each ``when_*`` adds a clause and returns
    the builder, :meth:`execute` runs it."""

    def __init__(self, table: TableHandle, source: Any, on: Any) -> None:
        self._table = table
        if is_spark_dataframe(source):  # to the driver, as a partial upsert's batch
            source = source.toArrow()
        self._source = to_arrow_table(source)  # read once: a retry reads it again
        self._on = _on(on, table.schema.names, self._source.column_names)
        self._clauses: list[Clause] = []
        if table.is_upsert:
            spec = table.upsert_spec
            assert spec is not None
            if set(self._on) != set(spec.primary_key):
                raise RowLevelError(
                    f"merge into upsert table {table.name!r} matches on its primary key "
                    f"{list(spec.primary_key)}, not on={list(self._on)}"
                )

    def _add(
        self, kind: str, action: str, condition: Any, values: Mapping[str, str] | None
    ) -> MergeBuilder:
        if condition is not None and (not isinstance(condition, str) or not condition.strip()):
            raise RowLevelError(
                f"condition= takes a SQL expression over source.<col> and target.<col>, "
                f"not {condition!r}"
            )
        self._clauses.append(Clause(kind, action, condition, values))
        return self

    def when_matched_update(self, set: Any, condition: str | None = None) -> MergeBuilder:  # noqa: A002
        """Update matched target rows: ``set`` {column: SQL expression over source.* and
        target.*}. Raises RowLevelError."""
        return self._add("matched", "update", condition, check_values(self._table, set))

    def when_matched_update_all(self, condition: str | None = None) -> MergeBuilder:
        """Update matched target rows with every column of their source row."""
        values = {
            c: f"source.{quote(c)}" for c in self._columns_from_source() if c not in self._on
        }  # the on= columns are equal already
        if not values:
            raise RowLevelError("when_matched_update_all: the source has no column but on=")
        return self._add("matched", "update", condition, check_values(self._table, values))

    def when_matched_delete(self, condition: str | None = None) -> MergeBuilder:
        """Delete matched target rows."""
        return self._add("matched", "delete", condition, None)

    def when_not_matched_insert(self, values: Any, condition: str | None = None) -> MergeBuilder:
        """Insert source rows no target row matches: ``values`` {column: SQL expression
        over source.*}; columns not named are null. Raises RowLevelError."""
        return self._add("not_matched", "insert", condition, _values(self._table, values))

    def when_not_matched_insert_all(self, condition: str | None = None) -> MergeBuilder:
        """Insert source rows no target row matches, every column from the source."""
        values = {c: f"source.{quote(c)}" for c in self._columns_from_source()}
        return self._add("not_matched", "insert", condition, values)

    def when_not_matched_by_source_delete(self, condition: str | None = None) -> MergeBuilder:
        """Delete target rows no source row matches (condition over target.*)."""
        return self._add("not_matched_by_source", "delete", condition, None)

    def _columns_from_source(self) -> list[str]:
        have = set(self._source.column_names)
        missing = [c for c in self._table.schema.names if c not in have]
        nullable = {f.name for f in self._table.schema if f.nullable}
        required = [c for c in missing if c not in nullable]
        if required:
            raise RowLevelError(
                f"the merge source has no column {required[0]!r}, which an update or insert "
                "of every column needs (it is not nullable)"
            )
        return [c for c in self._table.schema.names if c in have]

    def execute(self, metadata: dict[str, Any] | None = None, *, retries: int = 4) -> Commit | None:
        """Run the merge as one commit (MERGE; an UPSERT on an upsert table); None when
        it changes nothing. Raises RowLevelError (nothing changed), CommitConflictError,
        MetadataError."""
        if not self._clauses:
            raise RowLevelError(
                "a merge needs at least one clause (when_matched_update_all(), "
                "when_not_matched_insert_all(), ...)"
            )
        _check_order(self._clauses)
        meta = user_metadata(metadata)
        table = self._table
        summary: dict[str, object] = {"operation": "MERGE", "on": list(self._on)}
        if table.is_upsert:
            return self._upsert(meta, summary)

        def decide(plan: ScanPlan) -> Decision:
            hide, add, _, counts = self._decide(plan)
            return Decision(hide, add, {**summary, **counts})

        return change(table, CommitAction.MERGE, decide, meta, attempts_of(retries))

    def _upsert(self, meta: dict[str, Any], summary: dict[str, object]) -> Commit | None:
        """The merge as one upsert (on a partial-upsert table its records stored whole,
        as the clauses computed them: read again if the table moved meanwhile)."""
        return retrying(lambda _: self._upsert_once(meta, summary), MERGE_ATTEMPTS, pause=True)

    def _upsert_once(self, meta: dict[str, Any], summary: dict[str, object]) -> Commit | None:
        table = self._table
        spec = table.upsert_spec
        assert spec is not None
        plan = table.scan()
        hide, add, gone, counts = self._decide(plan)
        if not sum(len(p) for p in hide.values()) and not add.num_rows:
            return None
        parts = [add]
        if gone.num_rows:
            if spec.delete_column is None:
                raise RowLevelError(
                    f"upsert table {table.name!r} has no delete column: a merge's delete "
                    "writes a tombstone per key, which needs one (nothing was changed)"
                )
            col = table.schema.field(spec.delete_column)
            marks = pa.array(np.ones(gone.num_rows, bool)).cast(col.type)
            gone = gone.set_column(gone.schema.get_field_index(col.name), col.name, marks)
            parts.append(gone)
        rows = pa.concat_tables(parts)
        return upserted_as_read(
            table, rows, plan.seq, {**meta, "row_change": {**summary, **counts}}
        )

    def _decide(
        self, plan: ScanPlan
    ) -> tuple[dict[str, np.ndarray], pa.Table, pa.Table, dict[str, int]]:
        """(positions hidden per file, rows added, target rows deleted, counts)."""
        table = self._table
        schema = plan.table.schema
        keys = " AND ".join(f"source.{quote(k)} = target.{quote(k)}" for k in self._on)
        by_source = [c for c in self._clauses if c.kind == "not_matched_by_source"]
        where = "TRUE" if by_source else f"EXISTS (SELECT 1 FROM {_SOURCE} AS source WHERE {keys})"
        read = self._target_columns(plan)
        reads = plan.reads()
        if read is not None and table.ctx.warehouse.local and all(k is None for _, k in reads):
            return self._decide_on_files(plan, list(dict.fromkeys(p for p, _ in reads)), read)
        found = matching(
            plan,
            table.ctx.warehouse,
            where,
            rows=True,
            tables={_SOURCE: self._source},
            columns=read,
        )
        assert found.rows is not None
        with _clauses_evaluated() as con:
            con.register(_SOURCE, self._source)
            con.register(_TARGET, found.rows)
            return _run(con, self._clauses, keys, schema, found.paths, self._on, read is None)

    def _decide_on_files(
        self, plan: ScanPlan, paths: list[str], read: list[str]
    ) -> tuple[dict[str, np.ndarray], pa.Table, pa.Table, dict[str, int]]:
        """:meth:`_decide` joining the source with the table's files themselves (their
        ``read`` columns, the rows vectors hide left out), in one pass: the files are
        read whole, none in part."""
        keys = " AND ".join(f"source.{quote(k)} = target.{quote(k)}" for k in self._on)
        with _clauses_evaluated() as con, snapshot_files(plan.seq, plan.table.name):
            con.register(_SOURCE, self._source)
            visible_rows_view(con, _TARGET, paths, read, plan.deletes)
            schema = plan.table.schema
            if _passes_through(self._clauses, schema.names, self._on):
                return _run_passthrough(con, self._source, keys, schema, paths, self._on)
            return _run(con, self._clauses, keys, schema, paths, self._on, whole=False)

    def _target_columns(self, plan: ScanPlan) -> list[str] | None:
        """The target columns the clauses need (None: all of them): only the ``on``
        columns when every matched update sets every column from the source and no
        clause reads ``target.*`` — the common update-all, insert-all merge then reads
        one column of the table's files, not all. An upsert table's deletes need whole
        records (tombstones), a schema that changed may have columns no file holds."""
        names = plan.table.schema.names
        if self._table.is_upsert or SCHEMA_CHANGED_SEQ in plan.table.properties:
            return None
        for c in self._clauses:
            texts = [c.condition or "", *(c.values or {}).values()]
            if c.kind == "not_matched_by_source" or any("target" in t.lower() for t in texts):
                return None
            if c.action == "update" and set(c.values or {}) | set(self._on) != set(names):
                return None  # the columns it does not set keep the target's values
        return [n for n in names if n in self._on]


def _case(clauses: list[tuple[int, Clause]], then: Any, otherwise: str) -> str:
    whens = " ".join(f"WHEN {c.condition or 'TRUE'} THEN {then(i, c)}" for i, c in clauses)
    return f"CASE {whens} ELSE {otherwise} END" if clauses else otherwise


_KIND_NAMES = {
    "matched": "when_matched",
    "not_matched": "when_not_matched",
    "not_matched_by_source": "when_not_matched_by_source",
}


def _check_order(clauses: list[Clause]) -> None:
    """Of several clauses of one kind, only the last may omit its condition (Delta's
    rule: a clause after one without a condition could never apply). Raises
    RowLevelError."""
    for kind, name in _KIND_NAMES.items():
        mine = [c for c in clauses if c.kind == kind]
        if any(c.condition is None for c in mine[:-1]):
            raise RowLevelError(
                f"of the merge's {len(mine)} {name}_* clauses only the last may omit its "
                "condition: the ones after a clause without a condition would never "
                "apply; give the earlier clauses a condition= (nothing was changed)"
            )


def _only_unconditional_delete(matched: list[tuple[int, Clause]]) -> bool:
    """Whether the merge's one matched clause deletes without a condition: several
    source rows may then match one target row, which is deleted once (as in Delta)."""
    return len(matched) == 1 and matched[0][1].action == "delete" and not matched[0][1].condition


def _passes_through(clauses: list[Clause], cols: list[str], on: tuple[str, ...]) -> bool:
    """Whether the merge is exactly update-all, insert-all (no condition) with a source
    holding every column: each source row is then written as it is, matched or not."""
    if len(clauses) != 2 or any(c.condition for c in clauses):
        return False
    kinds = {(c.kind, c.action): c.values or {} for c in clauses}
    update, insert = kinds.get(("matched", "update")), kinds.get(("not_matched", "insert"))
    if update is None or insert is None:
        return False
    every = {c: f"source.{quote(c)}" for c in cols}
    return insert == every and update == {c: v for c, v in every.items() if c not in on}


def _run_passthrough(
    con: duckdb.DuckDBPyConnection,
    source: pa.Table,
    keys: str,
    schema: pa.Schema,
    paths: list[str],
    on: tuple[str, ...],
) -> tuple[dict[str, np.ndarray], pa.Table, pa.Table, dict[str, int]]:
    """:func:`_run` of an update-all, insert-all merge: DuckDB joins only the source's
    ``on`` columns with the target, for the target row each source row matches; the
    rows written are the source's own (a 100k-row merge into 1M: the join gives the
    matches' files, positions and keys, not every column built by CASE expressions;
    its decision took 26 ms instead of 42)."""
    con.register(_KEYS, source.select(list(on)))
    got = fetch(
        con.sql(
            f"SELECT target.{FILE}, target.{POS}, "
            + ", ".join(f"source.{quote(k)}" for k in on)
            + f" FROM {_KEYS} AS source JOIN {_TARGET} AS target ON {keys}"
        )
    )
    files, pos, _ = _refuse_repeats(got, on)
    hide: dict[str, list[np.ndarray]] = {}
    _group_by_file(hide, files, pos, paths)
    try:
        add = conform(assigned(source.select(schema.names), schema), schema)
    except Exception as exc:  # noqa: BLE001 - SchemaError, ArrowInvalid: the values' fault
        raise _unfit(exc) from None
    counts = {"updated": len(files), "deleted": 0, "inserted": source.num_rows - len(files)}
    return (
        {f: np.sort(np.concatenate(p)) for f, p in hide.items()},
        add,
        schema.empty_table(),
        counts,
    )


def _refuse_repeats(
    got: pa.Table, on: tuple[str, ...], allow: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The target rows (file index, position) of a join's matches; raises
    RowLevelError if several source rows match one target row (Delta refuses it),
    unless ``allow``: then also the rows of ``got`` that keep each target row once
    (None: every row is once already)."""
    files = np.asarray(got.column(FILE).to_numpy(zero_copy_only=False), np.int64)
    pos = np.asarray(got.column(POS).to_numpy(zero_copy_only=False), np.int64)
    uniq, first, many = np.unique((files << 32) | pos, return_index=True, return_counts=True)
    if len(uniq) == len(files):
        return files, pos, None
    if allow:
        first = np.sort(first)
        return files[first], pos[first], first
    row = {k: got.column(k)[int(first[np.argmax(many)])].as_py() for k in on}
    raise RowLevelError(
        f"several source rows of the merge match one target row ({row}): make the "
        "source's on= columns unique (Delta's 'multiple source rows matched'); "
        "nothing was changed"
    )


def _group_by_file(
    hide: dict[str, list[np.ndarray]], files: np.ndarray, pos: np.ndarray, paths: list[str]
) -> None:
    """Add the positions ``pos`` (of the files ``paths[files]``) to ``hide``, per path."""
    order = np.argsort(files, kind="stable")
    files, pos = files[order], pos[order]
    cuts = np.flatnonzero(np.diff(files)) + 1
    for f, at in zip(np.split(files, cuts), np.split(pos, cuts), strict=True):
        if len(f):
            hide.setdefault(paths[int(f[0])], []).append(at)


def _unfit(exc: Exception) -> RowLevelError:
    return RowLevelError(
        f"the merge gives values the table's columns cannot hold: {exc} (nothing was changed)"
    )


def _run(
    con: duckdb.DuckDBPyConnection,
    clauses: list[Clause],
    keys: str,
    schema: pa.Schema,
    paths: list[str],
    on: tuple[str, ...],
    whole: bool = True,
) -> tuple[dict[str, np.ndarray], pa.Table, pa.Table, dict[str, int]]:
    """``whole``: the target rows hold every column (else only the ``on`` columns: no
    clause reads the others, and the deleted rows are not returned)."""
    numbered = list(enumerate(clauses))
    matched = [(i, c) for i, c in numbered if c.kind == "matched"]
    inserts = [(i, c) for i, c in numbered if c.kind == "not_matched"]
    by_source = [(i, c) for i, c in numbered if c.kind == "not_matched_by_source"]
    cols = schema.names
    lamina = f"target.{FILE}, target.{POS}"
    hide: dict[str, list[np.ndarray]] = {}
    added: list[pa.Table] = []
    gone: list[pa.Table] = []
    counts = {"updated": 0, "deleted": 0, "inserted": 0}

    def hidden(rows: pa.Table) -> None:
        files = rows.column(FILE).to_numpy(zero_copy_only=False).astype(np.int64)
        pos = rows.column(POS).to_numpy(zero_copy_only=False).astype(np.int64)
        _group_by_file(hide, files, pos, paths)

    def kept(col: str) -> str:  # a column an update leaves as it was
        return f"target.{quote(col)}" if whole or col in on else "NULL"

    m_clause = _case(matched, lambda i, c: str(i), "-1")
    m_values = {
        col: _case(matched, lambda i, c, col=col: (c.values or {}).get(col, kept(col)), kept(col))
        for col in cols
    }
    i_clause = _case(inserts, lambda i, c: str(i), "-1")
    i_values = {
        col: _case(inserts, lambda i, c, col=col: (c.values or {}).get(col, "NULL"), "NULL")
        for col in cols
    }
    m_got = i_got = None
    if matched and inserts:  # one join: the source rows with their target row, if any
        unmatched = f"target.{FILE} IS NULL"
        values = ", ".join(
            f"CASE WHEN {unmatched} THEN {i_values[col]} ELSE {m_values[col]} END AS {quote(col)}"
            for col in cols
        )
        got = fetch(
            con.sql(
                f"SELECT {lamina}, CASE WHEN {unmatched} THEN {i_clause} ELSE {m_clause} END "
                f"AS __clause, {values} "
                f"FROM {_SOURCE} AS source LEFT JOIN {_TARGET} AS target ON {keys}"
            )
        )
        found = got.column(FILE).is_valid()
        m_got, i_got = got.filter(found), got.filter(pc.invert(found))
    elif matched:
        values = ", ".join(f"{m_values[col]} AS {quote(col)}" for col in cols)
        m_got = fetch(
            con.sql(
                f"SELECT {lamina}, {m_clause} AS __clause, {values} "
                f"FROM {_TARGET} AS target JOIN {_SOURCE} AS source ON {keys}"
            )
        )
    elif inserts:
        values = ", ".join(f"{i_values[col]} AS {quote(col)}" for col in cols)
        i_got = fetch(
            con.sql(
                f"SELECT {i_clause} AS __clause, {values} FROM {_SOURCE} AS source "
                f"WHERE NOT EXISTS (SELECT 1 FROM {_TARGET} AS target WHERE {keys})"
            )
        )
    if m_got is not None:
        got = m_got
        _, _, once = _refuse_repeats(got, on, _only_unconditional_delete(matched))
        if once is not None:  # the target rows several source rows delete, once each
            got = got.take(pa.array(once))
        which = got.column("__clause").to_numpy(zero_copy_only=False)
        kinds = {i: c.action for i, c in matched}
        upd = np.isin(which, [i for i, a in kinds.items() if a == "update"])
        dele = np.isin(which, [i for i, a in kinds.items() if a == "delete"])
        if upd.any():
            rows = got.filter(pa.array(upd))
            hidden(rows)
            added.append(rows.select(cols))
            counts["updated"] = int(upd.sum())
        if dele.any():
            rows = got.filter(pa.array(dele))
            hidden(rows)
            if whole:
                gone.append(rows.select(cols))
            counts["deleted"] += int(dele.sum())
    if i_got is not None:
        which = i_got.column("__clause").to_numpy(zero_copy_only=False)
        take = which >= 0
        if take.any():
            added.append(i_got.filter(pa.array(take)).select(cols))
            counts["inserted"] = int(take.sum())
    if by_source:
        clause = _case(by_source, lambda i, c: str(i), "-1")
        got = fetch(
            con.sql(
                f"SELECT {lamina}, {clause} AS __clause, "
                + ", ".join(f"target.{quote(c)}" for c in cols)
                + f" FROM {_TARGET} AS target "
                f"WHERE NOT EXISTS (SELECT 1 FROM {_SOURCE} AS source WHERE {keys})"
            )
        )
        take = got.column("__clause").to_numpy(zero_copy_only=False) >= 0
        if take.any():
            rows = got.filter(pa.array(take))
            hidden(rows)
            gone.append(rows.select(cols))
            counts["deleted"] += int(take.sum())
    try:
        add = (
            pa.concat_tables([conform(assigned(a, schema), schema) for a in added])
            if added
            else None
        )
    except Exception as exc:  # noqa: BLE001 - SchemaError, ArrowInvalid: the values' fault
        raise _unfit(exc) from None
    # each target row is hidden once at most: a matched one has one source row (else
    # refused above), and a not-matched-by-source one none
    positions = {f: np.sort(np.concatenate(p)) for f, p in hide.items()}
    empty = schema.empty_table()
    deleted = pa.concat_tables([conform(g, schema) for g in gone]) if gone else empty
    return positions, add if add is not None else empty, deleted, counts


def _on(on: Any, table_cols: list[str], source_cols: list[str]) -> tuple[str, ...]:
    names = [on] if isinstance(on, str) else on
    if (
        not isinstance(names, list | tuple)
        or not names
        or not all(isinstance(n, str) for n in names)
    ):
        raise RowLevelError(f"on= takes a column name or a list of them, not {on!r}")
    for n in names:
        if n not in table_cols:
            raise RowLevelError(f"on= names column {n!r}, which the table does not have")
        if n not in source_cols:
            raise RowLevelError(f"on= names column {n!r}, which the merge source does not have")
    return tuple(names)


def _values(table: TableHandle, values: Any) -> dict[str, str]:
    if not isinstance(values, Mapping) or not values:
        raise RowLevelError(
            "values= takes a dict of column -> SQL expression over source.<col>, e.g. "
            f"{{'id': 'source.id', 'v': 'source.v * 2'}}, not {values!r}"
        )
    unknown = [c for c in values if c not in table.schema.names]
    if unknown:
        raise RowLevelError(f"values= names column {unknown[0]!r}, which the table does not have")
    bad = [c for c, e in values.items() if not isinstance(e, str) or not e.strip()]
    if bad:
        raise RowLevelError(
            f"values= takes SQL expression strings; {bad[0]!r} has {values[bad[0]]!r}"
        )
    return {str(c): str(e) for c, e in values.items()}
