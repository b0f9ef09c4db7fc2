"""Reads that are more than one call: the number of rows a reader of a snapshot sees."""

from __future__ import annotations

from lamina.core.scan import ScanPlan
from lamina.operations.handle import TableHandle


def count(h: TableHandle, plan: ScanPlan) -> int:
    """Rows a reader of ``plan`` sees: the catalog's row counts, less the rows deletion
    vectors hide; only the files shown in part are read (their time column)."""
    hidden = sum(len(rows) for rows in plan.deletes.values())
    if plan.all_whole:
        return plan.row_count - hidden
    from lamina.io.reader import read_arrow  # pyarrow: only files shown in part are read

    part = [t for t in plan.tasks if t.keep is not None]
    paths = {t.segment.location for t in part}
    deletes = {p: rows for p, rows in plan.deletes.items() if p in paths}
    some = ScanPlan(plan.table, plan.seq, plan.commit_id, part, deletes=deletes)
    whole = plan.row_count - sum(t.segment.row_count for t in part)
    hidden -= sum(len(rows) for rows in some.deletes.values())
    tc = plan.table.time_column  # one column: concat_tables drops zero-column rows
    return whole - hidden + read_arrow(some, h.ctx.warehouse, [tc] if tc else []).num_rows
