"""One version number per table in everything a user sees: ``Commit.version`` is the
table's commit sequence (1, 2, 3... in completion order, whatever the commit does),
and ``lamina history`` lists commits by it, readable in a 100-column terminal."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

import lamina
from lamina.cli import app
from lamina.errors import SnapshotNotFoundError
from tests.helpers import SCHEMA, events


@pytest.fixture
def cat(tmp_path: Path) -> Iterator[lamina.Catalog]:
    with lamina.connect(warehouse=str(tmp_path / "wh")) as c:
        yield c


def test_every_kind_of_commit_makes_the_next_version(cat: lamina.Catalog) -> None:
    t = cat.create_table("t", SCHEMA, time_column="ts", segment_granularity="DAY")
    t.append(events(days=2, per_day=2))
    t.append(events(days=2, per_day=2, seed=1))
    t.overwrite(events(days=1, per_day=1, seed=2))
    assert t.compact(mode="minor") is not None
    with pytest.raises(KeyError), t.transaction() as tx:  # aborted: no version
        tx.append(events(days=1, per_day=1))
        raise KeyError("abort")
    t.add_columns(pa.field("c", pa.int64()))
    (seg, *_) = t.segments()
    t.delete_segments([seg.id])
    t.restore(1)
    got = t.history()
    assert [c.action for c in got if c.version is not None] == [
        "APPEND", "APPEND", "OVERWRITE", "COMPACT", "ALTER", "DELETE", "RESTORE",
    ]  # fmt: skip
    assert [c.version for c in got if c.state == "COMPLETED"] == [1, 2, 3, 4, 5, 6, 7]
    assert [c.version for c in got if c.state == "ABORTED"] == [None]
    assert all(c.version == c.seq for c in got)
    assert t.snapshot().seq == 7 and t.count(as_of=7) == t.count(as_of=1) == 4


def test_a_table_created_again_continues_the_versions_of_its_name(cat: lamina.Catalog) -> None:
    """A dropped name's versions are never read as the new table's."""
    t = cat.create_table("t", SCHEMA, time_column="ts")
    t.append(events(days=1, per_day=1))
    t.append(events(days=1, per_day=2))
    cat.drop_table("t")
    again = cat.create_table("t", SCHEMA, time_column="ts")
    c = again.append(events(days=1, per_day=3))
    assert c.version == 3 and again.count(as_of=3) == 3
    with pytest.raises(SnapshotNotFoundError, match="has no version 1: its versions are 3 to 3"):
        again.to_arrow(as_of=1)


def test_history_lists_versions_in_a_100_column_terminal(
    cat: lamina.Catalog, tmp_path: Path
) -> None:
    t = cat.create_table("events", SCHEMA, time_column="ts", segment_granularity="DAY")
    long = {"job": "nightly-load-of-every-region-" + "x" * 80, "rows": 12}
    t.append(events(days=1, per_day=2), metadata=long)
    t.overwrite(events(days=1, per_day=1, seed=1))
    runner = CliRunner(env={"COLUMNS": "100", "NO_COLOR": "1"})

    def run(*args: str) -> str:
        got = runner.invoke(app, ["--warehouse", str(tmp_path / "wh"), "history", "events", *args])
        assert got.exit_code == 0, got.output
        return got.output

    out = run()
    lines = out.splitlines()
    assert all(len(line) <= 100 for line in lines), out
    assert lines[0].split() == [
        "version", "action", "state", "completed", "(UTC)", "+segs", "-segs",
    ]  # fmt: skip
    assert [line.split()[:3] for line in lines[1:]] == [
        ["1", "APPEND", "COMPLETED"],
        ["2", "OVERWRITE", "COMPLETED"],
    ]
    assert "nightly" not in out  # metadata stays out of the default view
    shown = run("--metadata")
    assert all(len(line) <= 100 for line in shown.splitlines())
    assert "nightly-load" in shown and '"rows": 12' in shown
    (first, second) = json.loads(run("--format", "json"))
    assert first["version"] == 1 and first["metadata"] == long and first["base_version"] == 0
    assert second["version"] == 2 and second["base_version"] == 1
    assert {"commit", "started_at", "completed_at"} <= set(first)
