"""Time travel the way users ask for it: ``as_of`` takes a table version, the Commit a
write returned, or a time (a datetime, naive = UTC; a date; an ISO-8601 string) naming
the latest version completed at or before it — on every read path, in SQL (``as_of=``
and ``AT (VERSION => n)`` / ``AT (TIMESTAMP => t)``) and on the command line."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import lamina
from lamina.cli import app
from lamina.errors import InvalidArgumentError, SnapshotNotFoundError, SnapshotTooOldError, SqlError
from tests.helpers import SCHEMA, events

UTC = dt.UTC


@pytest.fixture
def lake(tmp_path: Path) -> Iterator[tuple[lamina.Catalog, lamina.Table, list[lamina.Commit]]]:
    """Table ``t``: 3 rows (version 1), 4 more (2), day 1 overwritten by 2 rows (3)."""
    with lamina.connect(warehouse=str(tmp_path / "wh")) as cat:
        t = cat.create_table("t", SCHEMA, time_column="ts", segment_granularity="DAY")
        done = [
            t.append(events(days=1, per_day=3)),
            t.append(events(days=1, per_day=4, seed=1)),
            t.overwrite(events(days=1, per_day=2, seed=2)),
        ]
        yield cat, t, done


def _between(a: lamina.Commit, b: lamina.Commit) -> dt.datetime:
    """An instant after ``a`` completed and before ``b`` did."""
    assert a.completed_at is not None and b.completed_at is not None
    return a.completed_at + (b.completed_at - a.completed_at) / 2


def test_as_of_a_time_reads_the_latest_version_completed_at_or_before_it(lake: Any) -> None:
    _, t, (c1, c2, c3) = lake
    assert [c.version for c in (c1, c2, c3)] == [1, 2, 3]
    mid = _between(c2, c3)
    for when in (
        mid,  # aware
        mid.replace(tzinfo=None),  # naive: UTC
        mid.isoformat(),  # ISO-8601 with its offset
        mid.astimezone(dt.timezone(dt.timedelta(hours=5))),  # another zone, same instant
        mid.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
    ):
        assert t.count(as_of=when) == 7, when
        assert t.snapshot(when).seq == 2
    assert t.count(as_of=c1.completed_at) == 3  # at the completion itself: that version
    assert t.to_arrow(as_of=dt.datetime(9999, 1, 1)).num_rows == 2  # later: the latest
    assert t.to_pandas(as_of=_between(c1, c2).isoformat()).shape[0] == 3
    assert len(t.segments(as_of=_between(c1, c2))) == 1


def test_a_time_before_the_first_commit_names_the_earliest_available(lake: Any) -> None:
    _, t, (c1, _, _) = lake
    for when in (dt.date(2000, 1, 1), "2000-01-01", c1.completed_at - dt.timedelta(microseconds=1)):
        with pytest.raises(SnapshotTooOldError, match="earliest available is version 1") as err:
            t.to_arrow(as_of=when)
        assert err.value.earliest_version == 1 and err.value.earliest_time == c1.completed_at
        assert isinstance(err.value, SnapshotNotFoundError)


def test_an_as_of_of_a_wrong_type_is_an_argument_error(lake: Any) -> None:
    _, t, _ = lake
    cases = {
        1.5: "not float",
        True: "not bool",
        "3": "pass a version as an int",
        "yesterday": "not an ISO-8601 time",
        -1: "versions are numbers >= 1",
        b"1": "not bytes",
    }
    for bad, match in cases.items():
        with pytest.raises(InvalidArgumentError, match=match):
            t.to_arrow(as_of=bad)
        with pytest.raises(InvalidArgumentError):
            t.count(as_of=bad)
    with pytest.raises(SnapshotNotFoundError, match="has no version 9: its versions are 1 to 3"):
        t.to_arrow(as_of=9)


def test_versions_are_per_table_whatever_other_tables_commit(tmp_path: Path) -> None:
    """Commit ids are the catalog's; each table numbers its own versions 1, 2, 3..."""
    with lamina.connect(warehouse=str(tmp_path / "wh")) as cat:
        a = cat.create_table("a", SCHEMA, time_column="ts")
        b = cat.create_table("b", SCHEMA, time_column="ts")
        got = [t.append(events(days=1, per_day=n)) for n, t in enumerate([a, b, b, a, b], 1)]
        assert [c.id for c in got] == [1, 2, 3, 4, 5]
        assert [c.version for c in got] == [1, 1, 2, 2, 3]
        assert [c.version for c in b.history()] == [1, 2, 3]
        assert a.count(as_of=2) == 1 + 4 and b.count(as_of=2) == 2 + 3
        with pytest.raises(SnapshotNotFoundError, match="has no version 3"):
            a.count(as_of=3)
        with pytest.raises(SnapshotNotFoundError, match="of table 'b', not of 'a'"):
            a.count(as_of=got[1])
        assert b.read_changes(got[1], got[4]).num_rows == 3 + 5  # versions 2 and 3 of b


def test_sql_reads_past_snapshots_by_argument_and_by_clause(lake: Any) -> None:
    cat, t, (c1, c2, c3) = lake

    def n(query: str, **kw: Any) -> int:
        return int(cat.sql(query, **kw).column(0)[0].as_py())

    q = "SELECT count(*) FROM t"
    assert n(q) == 2
    assert n(q, as_of={"T": 1}) == 3 and n(q, as_of=2) == 7 and n(q, as_of=c2) == 7
    assert n(q, as_of={"t": _between(c1, c2).isoformat()}) == 3
    assert n("SELECT count(*) FROM t AT (VERSION => 1)") == 3
    assert n("SELECT count(*) FROM t x AT (version => 1 + 1) WHERE x.v >= 0") == 7
    when = _between(c1, c2).strftime("%Y-%m-%d %H:%M:%S.%f")
    assert n(f"SELECT count(*) FROM t AT (TIMESTAMP => TIMESTAMP '{when}')") == 3
    assert n("SELECT count(*) FROM t AT (TIMESTAMP => now())") == 2
    # two versions of one table side by side: what version 3 replaced
    gone = "SELECT count(*) FROM (SELECT k, v FROM t AT (VERSION => 2) EXCEPT SELECT k, v FROM t)"
    assert n(gone) == 7
    # a time bound on the past snapshot prunes and filters as on the latest
    day = "SELECT count(*) FROM t AT (VERSION => 1) WHERE ts >= '2024-01-02'"
    assert n(day) == 0
    assert n("SELECT count(*) FROM t", as_of={"t": 1}) == 3  # the shared view is untouched
    assert n(q) == 2


def test_sql_time_travel_refusals(lake: Any) -> None:
    cat, _, _ = lake
    cases: list[tuple[str, Any, type[Exception], str]] = [
        ("SELECT * FROM t", {"u": 1}, SqlError, "as_of names 'u', which the query does not read"),
        ("SELECT * FROM t", {"t": 1.5}, InvalidArgumentError, "not float"),
        ("SELECT * FROM t AT (VERSION => 'x')", None, SqlError, "t AT \\(VERSION => 'x'\\)"),
        ("SELECT * FROM t AT (VERSION => 1.5)", None, SqlError, "a version is a whole number"),
        ("SELECT * FROM t AT (VERSION => 9)", None, SnapshotNotFoundError, "has no version 9"),
        ("SELECT * FROM nope AT (VERSION => 1)", None, SqlError, "no table named 'nope'"),
        ("SELECT * FROM t AT (TIMESTAMP => '1999-01-01')", None, SnapshotTooOldError, "earliest"),
        ("CREATE TABLE z AS SELECT * FROM t AT (VERSION => 1)", None, SqlError, "in a SELECT"),
    ]
    for query, as_of, error, match in cases:
        with pytest.raises(error, match=match):
            cat.sql(query, as_of=as_of)
    assert cat.sql("CREATE TABLE z AS SELECT * FROM t", as_of=1).column(0)[0].as_py() == 3


def test_the_command_line_reads_versions_and_times(lake: Any, tmp_path: Path) -> None:
    _, _, (c1, c2, _) = lake
    runner = CliRunner(env={"COLUMNS": "100", "NO_COLOR": "1"})

    def run(*args: str, code: int = 0) -> str:
        got = runner.invoke(app, ["--warehouse", str(tmp_path / "wh"), *args])
        assert got.exit_code == code, got.output
        return got.output

    count = "SELECT count(*) AS n FROM t"
    assert run("query", count, "--as-of", "1", "-f", "csv").splitlines() == ["n", "3"]
    assert run("query", count, "--as-of", "t=2", "-f", "csv").splitlines() == ["n", "7"]
    mid = _between(c1, c2).isoformat()
    assert run("query", count, "--as-of", mid, "-f", "csv").splitlines() == ["n", "3"]
    assert "version 1" in run("segments", "t", "--as-of", mid)
    assert "version 2" in run("timeline", "t", "--as-of", "2")
    assert "neither a version" in run("query", count, "--as-of", "soon", code=2)
    assert "neither a version" in run("segments", "t", "--as-of", "1.5", code=2)
    assert "one VERSION|TIME for every table" in run(
        "query", count, "--as-of", "1", "--as-of", "2", code=2
    )
    old = run("segments", "t", "--as-of", "2000-01-01", code=1)
    assert "earliest available is version 1" in old and "lamina history" in old
