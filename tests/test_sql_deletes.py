"""The SQL relation of a merge-on-read table (``view_sql``): files without deletion
vectors read with no filter, few hidden rows by an anti join on their positions, more by
a bitmap per file, files hiding every row not read. Each choice, forced by ``few``, gives
exactly the rows ``t.to_arrow()`` gives: latest, at earlier commits, after a schema
change, and over files shown in part."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lamina
from lamina.core.interval import Interval
from lamina.engines.duckdb_views import FEW_DELETES, view_sql
from lamina.read import plan

T0 = datetime(2024, 1, 1)
SCHEMA = pa.schema(
    [
        pa.field("key", pa.int64(), nullable=False),
        pa.field("ts", pa.timestamp("us")),
        pa.field("value", pa.int64()),
    ]
)
#: ``few`` forcing each representation: every masked file by its bitmap, every one by
#: its positions, and the default choice
CHOICES = {"bitmap": 0.0, "positions": 1.0, "default": FEW_DELETES}


def rows(keys: range | list[int], minute: int, value: int) -> pa.Table:
    """Records of ``keys`` at ``minute`` after T0, valued ``value`` + key."""
    ks = list(keys)
    return pa.table(
        {
            "key": pa.array(ks, pa.int64()),
            "ts": pa.array([T0 + timedelta(minutes=minute)] * len(ks), pa.timestamp("us")),
            "value": pa.array([value + k for k in ks], pa.int64()),
        },
        schema=SCHEMA,
    )


@pytest.fixture
def cat(tmp_path: Path) -> Iterator[lamina.Catalog]:
    c = lamina.connect(warehouse=str(tmp_path / "wh"))
    yield c
    c.close()


def build(t: lamina.Table, widen: bool = False) -> list[int]:
    """Five upserts, a file each: A (200 keys), B (200), C (200, never updated), D
    updating 1 of A's rows (0.5%: few) and 100 of B's (50%: many), E updating all of D's
    (D hides every row). ``widen``: a column ``extra`` added after B. Their versions."""
    commits = [t.upsert(rows(range(0, 200), 1, 0)), t.upsert(rows(range(200, 400), 2, 0))]
    if widen:
        t.add_columns(pa.field("extra", pa.int64()))

    def more(data: pa.Table) -> pa.Table:
        if not widen:
            return data
        return data.append_column("extra", pa.array([7] * data.num_rows, pa.int64()))

    for data in (
        rows(range(400, 600), 3, 0),
        rows([0, *range(200, 300)], 4, 1000),
        rows([0, *range(200, 300)], 5, 2000),
    ):
        commits.append(t.upsert(more(data)))
    return [c.version for c in commits]


def via_view(
    cat: lamina.Catalog,
    name: str,
    few: float,
    as_of: int | None = None,
    interval: Interval | None = None,
) -> tuple[pa.Table, set[str]]:
    """The rows of ``view_sql``'s relation for the plan, and the kinds of table it made
    ("rows": positions, "mask": bitmaps)."""
    p = plan(cat.context, name, as_of, interval)
    con = duckdb.connect()
    con.execute("SET TimeZone='UTC'")
    made: list[str] = []
    got = con.sql(f"SELECT * FROM ({view_sql(con, name, p, made, few=few)})").to_arrow_table()
    kinds = {m.strip('"').split("_")[3] for m in made}
    con.close()
    return got, kinds


def same(got: pa.Table, want: pa.Table) -> None:
    assert got.column_names == want.column_names
    assert got.sort_by("key").to_pylist() == want.sort_by("key").to_pylist()


@pytest.mark.parametrize("choice", CHOICES)
def test_each_representation_gives_the_visible_rows(cat: lamina.Catalog, choice: str) -> None:
    t = cat.create_table("u", SCHEMA, time_column="ts", primary_key="key")
    build(t)
    got, kinds = via_view(cat, "u", CHOICES[choice])
    want = t.to_arrow()
    assert want.num_rows == 600
    same(got, want)
    expected = {"bitmap": {"mask"}, "positions": {"rows"}, "default": {"mask", "rows"}}
    assert kinds == expected[choice]


@pytest.mark.parametrize("choice", CHOICES)
def test_each_representation_at_every_earlier_commit(cat: lamina.Catalog, choice: str) -> None:
    t = cat.create_table("u", SCHEMA, time_column="ts", primary_key="key")
    for commit in build(t):
        got, _ = via_view(cat, "u", CHOICES[choice], as_of=commit)
        same(got, t.to_arrow(as_of=commit))


@pytest.mark.parametrize("choice", CHOICES)
def test_each_representation_after_a_schema_change(cat: lamina.Catalog, choice: str) -> None:
    """Files before and after ``add_columns`` are scanned apart, each kind in each."""
    t = cat.create_table("u", SCHEMA, time_column="ts", primary_key="key")
    commits = build(t, widen=True)
    got, _ = via_view(cat, "u", CHOICES[choice])
    want = t.to_arrow()
    assert want.column("extra").null_count == 299  # the rows A and B show
    same(got, want)
    got, _ = via_view(cat, "u", CHOICES[choice], as_of=commits[3])
    same(got, t.to_arrow(as_of=commits[3]))


@pytest.mark.parametrize("choice", CHOICES)
def test_each_representation_over_files_shown_in_part(cat: lamina.Catalog, choice: str) -> None:
    """A plan cut inside the files' day reads them in part (keep intervals)."""
    t = cat.create_table(
        "u", SCHEMA, time_column="ts", primary_key="key", segment_granularity="DAY"
    )
    build(t)
    cut = Interval(T0 + timedelta(minutes=1), T0 + timedelta(minutes=5))  # A to D
    assert plan(cat.context, "u", interval=cut).partial_files
    got, _ = via_view(cat, "u", CHOICES[choice], interval=cut)
    want = t.to_arrow()
    us = pc.cast(want.column("ts"), pa.int64())
    want = want.filter(pc.and_(pc.greater_equal(us, cut.start), pc.less(us, cut.end)))
    assert 0 < want.num_rows < 600
    same(got, want)


@pytest.mark.parametrize("choice", CHOICES)
def test_a_file_hiding_every_row_is_not_read(cat: lamina.Catalog, choice: str) -> None:
    t = cat.create_table("u", SCHEMA, time_column="ts", primary_key="key")
    build(t)
    p = plan(cat.context, "u")
    (gone,) = [f for f, n in p.row_counts().items() if len(p.deletes.get(f, [])) == n]
    con = duckdb.connect()
    assert gone not in view_sql(con, "u", p, few=CHOICES[choice])
    t.upsert(rows(range(0, 600), 9, 5000))  # every earlier file hides every row
    got, kinds = via_view(cat, "u", CHOICES[choice])
    same(got, t.to_arrow())
    assert got.num_rows == 600 and kinds == set()


def test_a_table_whose_every_row_is_hidden_reads_empty(cat: lamina.Catalog) -> None:
    t = cat.create_table("u", SCHEMA, time_column="ts", primary_key="key")
    t.upsert(rows(range(0, 10), 1, 0))
    p = plan(cat.context, "u")
    (only,) = p.row_counts()
    p.deletes[only] = np.arange(10)  # as if a delete hid them all
    con = duckdb.connect()
    got = con.sql(f"SELECT * FROM ({view_sql(con, 'u', p)})").to_arrow_table()
    assert got.num_rows == 0 and got.column_names == SCHEMA.names


def test_cat_sql_agrees_with_to_arrow(cat: lamina.Catalog) -> None:
    """The default choice through ``cat.sql``: a count and a group-by."""
    t = cat.create_table("u", SCHEMA, time_column="ts", primary_key="key")
    build(t)
    want = t.to_arrow()
    got = cat.sql("SELECT count(*) AS n, sum(value) AS s FROM u").to_pylist()
    assert got == [{"n": want.num_rows, "s": sum(want.column("value").to_pylist())}]
    by = cat.sql("SELECT value // 1000 AS g, count(*) AS n FROM u GROUP BY g ORDER BY g")
    assert by.to_pylist() == [{"g": 0, "n": 499}, {"g": 2, "n": 101}]
