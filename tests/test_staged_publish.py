"""Publishing files written already (what Spark's tasks stage for ``format("lamina")``):
one commit through the table kind's write path, exactly once under a txn, and no
staged file left behind that the commit does not name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lamina
from lamina import failpoints
from lamina.core.interval import Granularity
from lamina.io.writer import split_by_chunk, write_parts
from lamina.operations import staged

SCHEMA = pa.schema(
    [
        pa.field("k", pa.int64(), nullable=False),
        pa.field("ts", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("v", pa.int64()),
    ]
)
T0 = 1_704_067_200_000_000  # 2024-01-01
HOUR = 3_600_000_000


def _rows(keys: range, v: int) -> pa.Table:
    ks = list(keys)
    return pa.table({"k": ks, "ts": [T0 + k * HOUR for k in ks], "v": [v] * len(ks)}, schema=SCHEMA)


def _stage(t: lamina.Table, data: pa.Table, staging: str, task: str) -> list[Any]:
    """Files of ``data`` as a task writes them, under ``staging``/``task``."""
    h = t._handle
    parts = split_by_chunk(data, "ts", Granularity.DAY, 1_000_000)
    return write_parts(h.ctx.warehouse, f"{staging}/{task}", parts)


def _files(cat: lamina.Catalog, under: str) -> list[str]:
    wh = cat.warehouse
    return sorted(i.path for i in wh.list_files(wh.path(under)))


def test_staged_append_lands_on_an_overwrite_published_meanwhile(cat: lamina.Catalog) -> None:
    """An overwrite of the day publishes between the staged append's start and its
    publish: the append joins the day at its new version (an append decides where its
    segments go when it publishes), so its rows land on top of the overwrite's."""
    t = cat.create_table("ev", SCHEMA, time_column="ts", segment_granularity="DAY")
    t.append(_rows(range(10), 1))
    files = _stage(t, _rows(range(10, 12), 2), "ev/data/wtest", "p0")
    other = cat.load_table("ev")
    raced: list[int] = []

    def overwrite_meanwhile(**_: Any) -> None:
        if not raced:  # once: the overwrite's own publish passes here too
            raced.append(0)
            raced[0] = other.overwrite(_rows(range(5), 3)).id

    with failpoints.armed("write.publish.before", overwrite_meanwhile):
        commit = staged.publish(t._handle, staged.StagedWrite(files, "ev/data/wtest"))
    assert commit is not None and raced
    done = sorted((c for c in t.history() if c.seq is not None), key=lambda c: c.seq or 0)
    assert [c.id for c in done][-2:] == [raced[0], commit.id]  # completed after it
    got = sorted(zip(*t.to_arrow().select(["k", "v"]).to_pydict().values(), strict=True))
    assert got == [(k, 3) for k in range(5)] + [(10, 2), (11, 2)]
    assert _files(cat, "ev/data/wtest") == sorted(cat.warehouse.path(f.location) for f in files)


def test_staged_files_a_commit_does_not_name_are_deleted(cat: lamina.Catalog) -> None:
    """A speculative twin's files (staged, not in the task messages) go once the commit
    names the winner's."""
    t = cat.create_table("ev", SCHEMA, time_column="ts", segment_granularity="DAY")
    won = _stage(t, _rows(range(4), 1), "ev/data/wspec", "p0-a0")
    _stage(t, _rows(range(4), 1), "ev/data/wspec", "p0-a1")  # the twin
    staged.publish(t._handle, staged.StagedWrite(won, "ev/data/wspec"))
    assert t.count() == 4
    assert _files(cat, "ev/data/wspec") == sorted(cat.warehouse.path(f.location) for f in won)
    assert cat.find_orphans() == []


def test_staged_write_of_an_applied_txn_publishes_nothing_and_leaves_nothing(
    cat: lamina.Catalog, caplog: pytest.LogCaptureFixture
) -> None:
    t = cat.create_table("ev", SCHEMA, time_column="ts", segment_granularity="DAY")
    first = _stage(t, _rows(range(3), 1), "ev/data/wa", "p0")
    assert staged.publish(t._handle, staged.StagedWrite(first, "ev/data/wa", txn=("app", 1)))
    again = _stage(t, _rows(range(3), 1), "ev/data/wb", "p0")
    with caplog.at_level("WARNING", logger="lamina"):
        assert (
            staged.publish(t._handle, staged.StagedWrite(again, "ev/data/wb", txn=("app", 1)))
            is None
        )
    assert "applied already" in caplog.text
    assert t.count() == 3 and len(t.history()) == 1
    assert _files(cat, "ev/data/wb") == []


def test_staged_write_refused_leaves_no_file(cat: lamina.Catalog, tmp_path: Path) -> None:
    """Rows outside an overwrite's interval: refused before a commit opens, the staged
    files deleted, the table as it was."""
    t = cat.create_table("ev", SCHEMA, time_column="ts", segment_granularity="DAY")
    t.append(_rows(range(3), 1))
    files = _stage(t, _rows(range(30, 33), 2), "ev/data/wr", "p0")  # day 2
    w = staged.StagedWrite(
        files, "ev/data/wr", overwrite=True, interval=lamina.Interval.parse("2024-01-01/2024-01-02")
    )
    with pytest.raises(lamina.DataOutsideIntervalError):
        staged.publish(t._handle, w)
    assert len(t.history()) == 1 and t.count() == 3
    assert _files(cat, "ev/data/wr") == []
