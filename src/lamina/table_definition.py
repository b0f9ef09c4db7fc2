"""A table's definition and its changes: properties (``set_properties``) and schema
(``add_columns``, ``widen_column``), on top of its reads (:mod:`lamina.table_read`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lamina.meta import tables
from lamina.table_read import TableReads

if TYPE_CHECKING:
    from lamina.core.model import Commit

#: rows per segment unless the table's ``target_rows_per_segment`` says otherwise
DEFAULT_TARGET_ROWS = 1_000_000


class TableDefinition(TableReads):
    """The definition part of :class:`lamina.table.Table`."""

    @property
    def target_rows_per_segment(self) -> int:
        return int(self._record.properties.get("target_rows_per_segment", DEFAULT_TARGET_ROWS))

    def set_properties(self, **props: Any) -> None:
        """Change table properties in place (e.g. ``consistent_push=False``).
        Raises PropertyError (the value is refused; nothing changes)."""
        self._change_properties(props, ())

    def unset_properties(self, *names: str) -> None:
        """Remove properties (lamina's own then take their defaults); a name the table
        does not have is ignored. Raises PropertyError (an ``upsert.*`` name, or a
        compaction policy the rest would not make sense as; nothing changes)."""
        from lamina.core.args import names as name_list
        from lamina.errors import PropertyError

        self._change_properties({}, tuple(name_list(list(names), "names", PropertyError)))

    def _change_properties(self, props: dict[str, Any], remove: tuple[str, ...]) -> None:
        from lamina.core.properties import as_text, check_properties

        values = as_text(props)
        own = sorted(k for k in [*values, *remove] if k.startswith("schema."))
        if own:
            from lamina.errors import PropertyError

            raise PropertyError(
                f"{own[0]} is lamina's record of the table's schema changes "
                "(t.add_columns, t.widen_column): it cannot be set or removed"
            )
        fixed = sorted(k for k in [*values, *remove] if k.startswith("upsert."))
        if fixed:
            from lamina.errors import PropertyError

            raise PropertyError(
                f"{fixed[0]} is part of the table's upsert definition, fixed when it was "
                "created; create a new table to change it"
            )
        if "upsert.primary_key" in self._record.properties:
            from lamina.core.upsert_spec import refuse_consistent_push

            refuse_consistent_push(values)
        checked = check_properties(values)
        if any(k.startswith("compaction.") for k in [*checked, *remove]):  # on this table
            from lamina.core.autocompact import check_policy, policy_of

            after = {**self._record.properties, **checked}
            after = {k: v for k, v in after.items() if k not in remove}
            pol = policy_of(after, self.target_rows_per_segment)
            check_policy(pol, self.schema, self.time_column, self.granularity, setting=True)
        self._record = tables.set_properties(self._ctx.db, self.name, checked, remove)

    def add_columns(self, *fields: Any) -> Commit:
        """Add nullable columns at the end of the schema, in one commit (action ALTER)
        that writes no file. Rows written before read them as nulls; a snapshot before
        the commit reads with the schema it had (``as_of``). Writers pass the new
        columns from then on (a ``Table`` loaded before sees the schema it loaded:
        ``cat.load_table`` again). ``fields``: ``pa.field``s, or a ``pa.Schema`` or
        list of them.

        Raises SchemaError (not a field, a column that is not nullable, whose name is
        taken in any case or reserved, or whose type lamina cannot store) or
        UpsertError (a column an upsert table cannot take); nothing changes then."""
        from lamina.evolve import added, new_fields
        from lamina.meta.schemas import change_schema

        wanted = new_fields(fields)
        self._record, commit = change_schema(
            self._ctx.db, self.name, lambda rec: added(rec, wanted)
        )
        return commit

    def widen_column(self, column: str, type: Any) -> Commit:
        """Widen a column's type (int32 to int64, float32 to float64, a decimal to more
        digits: :mod:`lamina.core.widening`) in one commit (action ALTER) that writes no
        file: files written before read as the new type; a snapshot before the commit
        reads with the type it had.

        Raises SchemaError (an unknown column, a change that is no widening) or
        UpsertError (a primary key column, a comparison column the key index would
        hold otherwise, a type its partial-upsert strategy cannot merge); nothing
        changes then."""
        from lamina.evolve import widened
        from lamina.meta.schemas import change_schema

        self._record, commit = change_schema(
            self._ctx.db, self.name, lambda rec: widened(rec, column, type)
        )
        return commit
