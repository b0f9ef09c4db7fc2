"""A table's definition and its changes: properties (``set_properties``) and schema
(``add_columns``, ``widen_column``), on top of its reads (:mod:`lamina.table.reads`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lamina.core.args import names as name_list
from lamina.errors import PropertyError
from lamina.operations.handle import TableHandle
from lamina.table.reads import TableReads

if TYPE_CHECKING:
    from lamina.core.model import Commit


class TableDefinition(TableReads):
    """The definition part of :class:`lamina.table.Table`."""

    _handle: TableHandle

    @property
    def target_rows_per_segment(self) -> int:
        return self._handle.target_rows_per_segment

    def set_properties(self, **props: Any) -> None:
        """Change table properties in place (e.g. ``consistent_push=False``).
        Raises PropertyError (the value is refused; nothing changes)."""
        from lamina.operations.evolve import change_properties  # pyarrow

        change_properties(self._handle, props, ())

    def unset_properties(self, *names: str) -> None:
        """Remove properties (lamina's own then take their defaults); a name the table
        does not have is ignored. Raises PropertyError (an ``upsert.*`` name, or a
        compaction policy the rest would not make sense as; nothing changes)."""
        from lamina.operations.evolve import change_properties  # pyarrow

        removed = tuple(name_list(list(names), "names", PropertyError))
        change_properties(self._handle, {}, removed)

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
        from lamina.operations.evolve import add_columns  # pyarrow

        return add_columns(self._handle, fields)

    def widen_column(self, column: str, type: Any) -> Commit:
        """Widen a column's type (int32 to int64, float32 to float64, a decimal to more
        digits: :mod:`lamina.core.widening`) in one commit (action ALTER) that writes no
        file: files written before read as the new type; a snapshot before the commit
        reads with the type it had.

        Raises SchemaError (an unknown column, a change that is no widening) or
        UpsertError (a primary key column, a comparison column the key index would
        hold otherwise, a type its partial-upsert strategy cannot merge); nothing
        changes then."""
        from lamina.operations.evolve import widen_column  # pyarrow

        return widen_column(self._handle, column, type)
