"""Type widening (``t.widen_column``) against handles loaded before it and compactions
racing it (each case failed on the first version of the feature)."""

from __future__ import annotations

import pyarrow as pa
import pytest

import lamina
from tests.test_schema_widening import SCHEMA, C, rows

# -- upserts through a handle loaded before the comparison column was widened ---------


@pytest.mark.parametrize("index", ["in memory", "rebuilt"])
def test_a_stale_handle_upserts_after_its_comparison_column_was_widened(
    cat: lamina.Catalog, index: str
) -> None:
    """A handle loaded before ``n`` (the comparison column) became int64 upserts after
    another handle stored a value past int32. Its writes are supported (its files read
    widened): the publish resolves with the catalog's schema, and the batch's
    comparison values widened (the stored ones were cast to the handle's int32, and a
    rebuilt index read the files as int32: a raw ArrowInvalid)."""
    p = cat.create_table("p", SCHEMA, time_column="ts", primary_key="id", comparison_column=C)
    p.upsert(rows([1, 2], 1, [10, 10]))
    stale = cat.load_table("p")
    p.widen_column(C, pa.int64())
    p.upsert(rows([1], 2, [2**40]))
    key = 1
    if index == "rebuilt":  # a process that holds no index yet (another process upserted)
        cat.context.keys.forget(p._handle.record.id)
        key = 2
    stale.upsert(rows([key], 3, [11]))  # key 1: out of order (11 < 2**40); key 2: wins
    got = {r["id"]: r[C] for r in cat.load_table("p").to_arrow().to_pylist()}
    assert got == {1: 2**40, 2: 11 if index == "rebuilt" else 10}


# -- compactions racing a widening ------------------------------------------------------


@pytest.mark.parametrize("mode", ["minor", "major"])
def test_a_compaction_racing_widen_column_keeps_the_rows_or_retries(
    cat: lamina.Catalog, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """compact() reloads the table, then plans and reads. A widening and an append of a
    value past int32 landing in between: the rows it reads hold an int64 column. It
    keeps them, or refuses with a retryable conflict as for add_columns (``padded``
    cast them to the int32 schema it loaded: a raw ArrowInvalid)."""
    from lamina import failpoints
    from lamina.errors import CommitConflictError

    t = cat.create_table("e", SCHEMA, time_column="ts")
    t.append(rows([1, 2], 1, [1, 2]))
    t.append(rows([3], 1, [3]))
    done: list[bool] = []

    def racing() -> None:  # the compaction just reloaded the table: once
        if not done:
            done.append(True)
            cat.load_table("e").widen_column(C, pa.int64())
            cat.load_table("e").append(rows([4], 2, [2**40]))

    try:
        with failpoints.armed("compaction.reloaded", racing):
            t.compact(mode=mode)
    except CommitConflictError as exc:
        assert exc.retryable  # do it again: fine
    got = cat.load_table("e").to_arrow()
    assert sorted(got.column(C).to_pylist()) == [1, 2, 3, 2**40]


def test_a_stale_handle_is_told_which_columns_were_widened(cat: lamina.Catalog) -> None:
    from lamina.errors import SchemaError

    t = cat.create_table("e", SCHEMA, time_column="ts")
    stale = cat.load_table("e")
    t.widen_column(C, pa.int64())
    with pytest.raises(SchemaError, match=r"columns \['n'\] were added or widened .*load_table"):
        stale.append(rows([1], 1, [2**40]))  # past its int32
    p = cat.create_table(
        "p", SCHEMA, time_column="ts", primary_key="id", partial_upsert={C: "INCREMENT"}
    )
    old = cat.load_table("p")
    p.widen_column(C, pa.int64())
    with pytest.raises(SchemaError, match=r"columns \['n'\] were added to or widened"):
        old.upsert(rows([1], 1, [1]))
    assert t.to_arrow().num_rows == 0 and p.to_arrow().num_rows == 0
