"""``t.update(where, set=...)``: the matched rows are hidden and written again with the
columns set to SQL expressions of their values, in one commit; the change feed shows
each as a delete and an insert. On an upsert table the updated records are upserted,
and a key column cannot be set."""

from __future__ import annotations

from pathlib import Path

import pyarrow.compute as pc
import pytest

import lamina
from lamina.cli import app
from lamina.errors import RowLevelError
from tests.test_rowlevel_delete import MODES, RUNNER, keys, plain, upsert_table


def values(t: lamina.Table, as_of: int | None = None) -> dict[int, float]:
    got = t.to_arrow(as_of=as_of)
    return dict(zip(got.column("k").to_pylist(), got.column("v").to_pylist(), strict=True))


@pytest.mark.parametrize("mode", MODES)
def test_updated_rows_read_changed_and_time_travel_reads_them_as_they_were(
    local_cat: lamina.Catalog, mode: str
) -> None:
    cat = local_cat
    t = plain(cat, mode)
    before = t.history()[-1]
    done = t.update("region = 'us' AND k < 10", set={"v": "v * 100", "region": "'void'"})
    assert done is not None and done.action == "UPDATE"
    assert done.metadata["row_change"]["updated"] == 5
    got = values(t)
    assert got == {k: float(k) * (100 if k < 10 and k % 2 else 1) for k in range(30)}
    assert t.count() == 30
    assert values(t, before.version) == {k: float(k) for k in range(30)}
    voids = cat.sql("SELECT k FROM t WHERE region = 'void' ORDER BY k").column("k").to_pylist()
    assert voids == [1, 3, 5, 7, 9]


@pytest.mark.parametrize("mode", MODES)
def test_the_change_feed_shows_an_update_as_a_delete_and_an_insert(
    local_cat: lamina.Catalog, mode: str
) -> None:
    t = plain(local_cat, mode)
    seq = t.history()[-1].seq
    assert seq is not None
    done = t.update(pc.field("k") == 7, set={"v": "-1"})
    assert done is not None
    feed = t.read_changes(seq).to_pylist()
    assert [(r["_change"], r["k"], r["v"]) for r in feed] == [
        ("delete", 7, 7.0),
        ("insert", 7, -1.0),
    ]
    assert {r["_commit_id"] for r in feed} == {done.id}


def test_an_update_of_an_upsert_table_is_an_upsert(local_cat: lamina.Catalog) -> None:
    t = upsert_table(local_cat)
    seq = t.history()[-1].seq
    done = t.update("k IN (2, 3)", set={"v": "v + 0.5"})
    assert done is not None and done.action == "UPSERT"
    got = values(t)
    assert got[2] == 2.5 and got[3] == 3.5 and len(got) == 10
    assert seq is not None
    feed = t.read_changes(seq)
    assert sorted(
        zip(feed.column("_change").to_pylist(), feed.column("v").to_pylist(), strict=True)
    ) == [
        ("delete", 2.0),
        ("delete", 3.0),
        ("insert", 2.5),
        ("insert", 3.5),
    ]


def test_an_update_of_a_key_column_of_an_upsert_table_is_refused(
    local_cat: lamina.Catalog,
) -> None:
    t = upsert_table(local_cat)
    n = len(t.history())
    with pytest.raises(RowLevelError, match="key column 'k'"):
        t.update("k = 1", set={"k": "k + 100"})
    assert len(t.history()) == n and sorted(values(t)) == list(range(10))


@pytest.mark.parametrize(
    ("sets", "says"),
    [
        ({"nope": "1"}, "nope"),
        ({"v": "nope + 1"}, "nope"),
        ({"v": "'not a number'"}, "cannot"),
        ({"v": ""}, "SQL expression"),
        ({}, "dict"),
    ],
)
def test_a_bad_set_expression_is_refused_and_leaves_the_table_unchanged(
    local_cat: lamina.Catalog, sets: dict, says: str
) -> None:
    t = plain(local_cat, "merge-on-read")
    n = len(t.history())
    with pytest.raises(RowLevelError, match=says):
        t.update("k < 3", set=sets)
    assert len(t.history()) == n and values(t) == {k: float(k) for k in range(30)}


def test_a_set_value_takes_its_column_type_as_sql_assigns(local_cat: lamina.Catalog) -> None:
    """``SET v = 50.0`` into a DOUBLE column: the literal is a DECIMAL in SQL, cast on
    assignment; a value the cast would change (1.5 into an integer) is still refused."""
    t = plain(local_cat, "merge-on-read")
    t.update("k = 1", set={"v": "50.0"})
    t.update("k = 2", set={"v": "7"})  # an INTEGER literal
    got = t.to_arrow().to_pylist()
    assert {r["k"]: r["v"] for r in got if r["k"] in (1, 2)} == {1: 50.0, 2: 7.0}
    with pytest.raises(RowLevelError, match="cannot hold"):
        t.update("k = 3", set={"k": "1.5"})
    assert sorted(r["k"] for r in t.to_arrow().to_pylist()) == list(range(30))


def test_an_update_matching_nothing_commits_nothing(local_cat: lamina.Catalog) -> None:
    t = plain(local_cat, "copy-on-write")
    n = len(t.history())
    assert t.update("k < 0", set={"v": "0"}) is None
    assert len(t.history()) == n and keys(t) == list(range(30))


def test_lamina_update_sets_columns_by_a_predicate(tmp_path: Path) -> None:
    wh = str(tmp_path / "wh")
    with lamina.connect(warehouse=wh) as cat:
        plain(cat, "copy-on-write")
    args = ["--warehouse", wh, "update", "t", "--set", "v = v * 2", "-s", "region = 'x'"]
    got = RUNNER.invoke(app, [*args, "--where", "k < 3"])
    assert got.exit_code == 0, got.output
    assert "3 rows updated" in got.output
    got = RUNNER.invoke(app, ["--warehouse", wh, "update", "t", "--set", "v", "--where", "k=1"])
    assert got.exit_code == 2 and "COLUMN = SQL expression" in got.output
    with lamina.connect(warehouse=wh) as cat:
        t = cat.load_table("t")
        assert values(t) == {k: float(k) * (2 if k < 3 else 1) for k in range(30)}
