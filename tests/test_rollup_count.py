"""A rollup's ``count`` metric naming a column the table lacks: the major compaction
that rolls up adds it (int64, nullable) in its own commit, with the rolled-up segments.
Rows it did not rewrite read it as null (one raw row each); a later rollup sums it. On
SQLite and PostgreSQL."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lamina
from lamina import failpoints
from lamina.errors import CommitConflictError, CompactionError
from tests.helpers import SCHEMA, events

N = pa.field("n", pa.int64())
DAY1 = ("2024-01-01", "2024-01-02")
SPEC = {"dimensions": ["k"], "metrics": {"v": "sum", "n": "count"}, "query_granularity": "DAY"}


def raw(days: int = 2, per_day: int = 12, start: str = "2024-01-01", seed: int = 0) -> pa.Table:
    """``events`` whose ``k`` takes three values: a rollup by ``k`` and day makes three
    rows a day."""
    data = events(days=days, per_day=per_day, start=start, seed=seed)
    return data.set_column(1, "k", pc.remainder(data["k"], 3))


def counts(data: pa.Table) -> dict[tuple[object, int], int]:
    """Raw rows per (day, k)."""
    return _per_day_and_k(data, pa.array([1] * data.num_rows, pa.int64()))


def stood_for(data: pa.Table) -> dict[tuple[object, int], int]:
    """Raw rows per (day, k) as the rows' counts say (a null: one raw row)."""
    return _per_day_and_k(data, pc.fill_null(data["n"], 1))


def _per_day_and_k(data: pa.Table, n: pa.Array) -> dict[tuple[object, int], int]:
    day = pc.floor_temporal(data["ts"], unit="day")
    keyed = pa.table({"d": day, "k": data["k"], "n": n})
    got = keyed.group_by(["d", "k"]).aggregate([("n", "sum")]).to_pylist()
    return {(r["d"], r["k"]): r["n_sum"] for r in got}


def test_a_count_metric_the_table_lacks_is_added_by_the_compaction_s_own_commit(
    cat: lamina.Catalog,
) -> None:
    t = cat.create_table("e", SCHEMA, time_column="ts")
    data = raw()
    before = t.append(data)
    c = t.compact(mode="major", interval=DAY1, rollup=SPEC)
    assert c is not None and c.seq == before.seq + 1  # type: ignore[operator]
    assert c.metadata["add_columns"] == [{"name": "n", "type": "int64"}]
    assert [h.action for h in t.history()] == ["APPEND", "OVERWRITE"]  # no ALTER of its own
    assert t.schema == cat.load_table("e").schema == pa.schema([*SCHEMA, N])
    assert t.schema.field("n").nullable

    got = t.to_arrow()
    day1 = got.filter(pc.less(got["ts"], pa.scalar(dt.datetime(2024, 1, 2), pa.timestamp("us"))))
    assert day1.num_rows == 3 and day1["n"].null_count == 0  # one row per k: its count
    assert got.num_rows == 3 + 12 and got["n"].null_count == 12  # day 2: not rewritten
    assert stood_for(got) == counts(data)
    assert pc.sum(day1["v"]).as_py() == pytest.approx(pc.sum(data.slice(0, 12)["v"]).as_py())
    # SQL and Arrow reads see n, and what the rows stand for
    assert cat.sql("SELECT sum(coalesce(n, 1)) AS rows FROM e").to_pylist() == [{"rows": 24}]
    assert cat.sql("SELECT count(n) AS c FROM e").to_pylist() == [{"c": 3}]
    assert sorted(t.to_arrow(columns=["n"])["n"].to_pylist(), key=str)[:3] == [4, 4, 4]
    # time travel to before the compaction: the old schema and the raw rows
    old = t.to_arrow(as_of=before.version)
    assert old.schema == SCHEMA and old.num_rows == 24


def test_a_refused_rollup_leaves_the_schema_unchanged(cat: lamina.Catalog) -> None:
    t = cat.create_table("e", SCHEMA, time_column="ts")
    t.append(raw())
    history = [h.id for h in t.history()]
    bad = [
        ({**SPEC, "dimensions": ["zz"]}, "'zz' is not a column"),
        ({"metrics": {"K": "count"}}, "differs only in case from 'k'"),
        ({"metrics": {"__lamina_n": "count"}}, "count column cannot be added: .*__lamina"),
        ({"dimensions": ["n"], "metrics": {"n": "count"}}, "both a dimension and a metric"),
    ]
    for spec, match in bad:
        with pytest.raises(CompactionError, match=match):
            t.compact(mode="major", rollup=spec)

    def fail(**_: object) -> None:  # after the read, before anything is written
        raise RuntimeError("disk full")

    with failpoints.armed("compaction.major.read", fail), pytest.raises(RuntimeError):
        t.compact(mode="major", rollup=SPEC)
    again = cat.load_table("e")
    assert again.schema == t.schema == SCHEMA
    done = [h.id for h in again.history() if h.state == "COMPLETED"]  # the failed one aborted
    assert done == history
    assert again.to_arrow().num_rows == 24


def test_a_count_column_added_meanwhile_refuses_the_compaction_which_then_sums_it(
    cat: lamina.Catalog,
) -> None:
    """Another writer adds n while the compaction runs: its publish is a retryable
    conflict (nothing published, the schema as that writer left it); done again, the
    rollup counts into the column as it is."""
    t = cat.create_table("e", SCHEMA, time_column="ts")
    t.append(raw())

    def meanwhile(**_: object) -> None:
        cat.load_table("e").add_columns(N)

    armed = failpoints.armed("compaction.major.read", meanwhile)
    with armed, pytest.raises(CommitConflictError, match="adds column 'n'") as info:
        t.compact(mode="major", rollup=SPEC)
    assert info.value.retryable
    now = cat.load_table("e")
    assert now.schema == pa.schema([*SCHEMA, N]) and now.to_arrow().num_rows == 24
    assert [h.action for h in now.history() if h.state == "COMPLETED"] == ["APPEND", "ALTER"]
    assert t.compact(mode="major", rollup=SPEC) is not None
    got = now.to_arrow()
    assert got.num_rows == 6 and pc.sum(got["n"]).as_py() == 24


def test_rolling_up_again_sums_the_counts(cat: lamina.Catalog) -> None:
    t = cat.create_table("e", SCHEMA, time_column="ts")
    data = raw()
    t.append(data)
    t.compact(mode="major", interval=DAY1, rollup=SPEC)
    stale = cat.load_table("e")  # after the change: knows n
    more = raw(days=1, per_day=6, seed=7)
    t.append(more.append_column(N, pa.nulls(6, pa.int64())))  # raw rows: n null
    c = stale.compact(mode="major", rollup=SPEC)  # both days; day 1 again
    assert c is not None and "add_columns" not in c.metadata
    got = t.to_arrow()
    assert got.num_rows == 6 and got["n"].null_count == 0
    want = counts(pa.concat_tables([data, more]))
    assert stood_for(got) == want and pc.sum(got["n"]).as_py() == 30
    assert t.schema == pa.schema([*SCHEMA, N])


def test_an_append_meanwhile_with_the_old_schema_reads_the_count_as_null(
    cat: lamina.Catalog,
) -> None:
    """A handle loaded before the compaction appends without n while it runs (carried
    onto its version) and after it: those rows read n as null, one raw row each."""
    t = cat.create_table("e", SCHEMA, time_column="ts")
    data = raw()
    t.append(data)
    stale = cat.load_table("e")
    during = raw(days=1, per_day=5, seed=3)

    def meanwhile(**_: object) -> None:  # the compaction read its rows at its base
        stale.append(during)

    with failpoints.armed("compaction.major.read", meanwhile):
        assert t.compact(mode="major", rollup=SPEC) is not None
    after = raw(days=1, per_day=4, start="2024-01-02", seed=4)
    stale.append(after)  # its schema lacks n: the rows read it as null
    got = cat.load_table("e").to_arrow()
    assert got.num_rows == 6 + 5 + 4 and got["n"].null_count == 9
    assert stood_for(got) == counts(pa.concat_tables([data, during, after]))


def test_an_auto_compaction_policy_counts_into_a_column_it_adds_once(
    cat: lamina.Catalog,
) -> None:
    import json

    t = cat.create_table("e", SCHEMA, time_column="ts")
    for seed in range(3):
        t.append(raw(days=3, per_day=4, seed=seed))
    t.set_properties(**{"compaction.rollup": json.dumps(SPEC)})
    done = [r for r in cat.compact_auto() if r.commit is not None]
    assert len(done) == 3 and all(r.error is None for r in done)
    added = [r for r in done if "add_columns" in r.commit.metadata]  # type: ignore[union-attr]
    assert len(added) == 1
    got = cat.load_table("e").to_arrow()
    assert got.num_rows == 9 and pc.sum(got["n"]).as_py() == 36
