"""Writes from a RecordBatchReader go out a piece at a time (bounded memory)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

import lamina
import lamina.operations.steps
from lamina.errors import DataOutsideIntervalError
from lamina.io import writer
from tests.helpers import SCHEMA, events


def _stream(data: pa.Table, batch_rows: int, read: list[int]) -> pa.RecordBatchReader:
    """``data`` as a reader of ``batch_rows``-row batches; ``read[0]`` counts the batches
    taken from it so far."""

    def batches() -> Iterator[pa.RecordBatch]:
        for batch in data.to_batches(max_chunksize=batch_rows):
            read[0] += 1
            yield batch

    return pa.RecordBatchReader.from_batches(data.schema, batches())


def _spy_writes(monkeypatch: pytest.MonkeyPatch, read: list[int]) -> list[tuple[int, int]]:
    """(batches read so far, rows written) of every write_parts call."""
    calls: list[tuple[int, int]] = []
    real = writer.write_parts

    def spy(wh: Any, rel: str, parts: list[writer.ChunkPart]) -> Any:
        calls.append((read[0], sum(p.num_rows for p in parts)))
        return real(wh, rel, parts)

    monkeypatch.setattr(writer, "write_parts", spy)
    return calls


def test_reader_is_written_piece_by_piece(
    local_cat: lamina.Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = events(days=4, per_day=500)  # 2,000 rows, 40 batches of 50
    piece = data.slice(0, 200).nbytes  # ~4 batches a piece
    monkeypatch.setattr(lamina.operations.steps, "STREAM_FLUSH_BYTES", piece)
    read = [0]
    calls = _spy_writes(monkeypatch, read)
    t = local_cat.create_table("ev", SCHEMA, "ts")
    commit = t.append(_stream(data, 50, read))

    assert len(calls) > 5  # many pieces, each written before the stream was read through
    assert all(n_read < 40 for n_read, _ in calls[:-1])
    assert [n_read for n_read, _ in calls] == sorted(n_read for n_read, _ in calls)
    assert sum(rows for _, rows in calls) == data.num_rows
    assert t.to_arrow().sort_by("k").equals(data)
    assert {s.commit_id for s in t.segments()} == {commit.id}
    assert t.count() == data.num_rows


def test_small_reader_is_one_piece_as_before(
    local_cat: lamina.Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = events(days=3, per_day=100)
    read = [0]
    calls = _spy_writes(monkeypatch, read)
    t = local_cat.create_table("ev", SCHEMA, "ts")
    t.append(_stream(data, 50, read))
    u = local_cat.create_table("ev2", SCHEMA, "ts")
    u.append(data)
    assert calls == [(6, 300), (6, 300)]  # one write each, after the whole stream
    assert len(t.segments()) == len(u.segments()) == 3
    assert t.to_arrow().equals(u.to_arrow())


def test_empty_reader_writes_nothing(local_cat: lamina.Catalog) -> None:
    t = local_cat.create_table("ev", SCHEMA, "ts")
    t.append(_stream(events(days=1, per_day=10).slice(0, 0), 50, [0]))
    assert t.segments() == [] and t.count() == 0


def test_overwrite_from_reader_checks_every_piece(
    local_cat: lamina.Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lamina.operations.steps, "STREAM_FLUSH_BYTES", 1)  # a piece per batch
    t = local_cat.create_table("ev", SCHEMA, "ts")
    first = events(days=3, per_day=100)
    t.append(first)
    before = t.to_arrow()
    late = events(days=3, per_day=100, start="2024-01-02", value=1.0)  # last day outside
    with pytest.raises(DataOutsideIntervalError):
        t.overwrite(_stream(late, 50, [0]), interval=("2024-01-02", "2024-01-04"))
    assert t.to_arrow().equals(before)  # the aborted commit published nothing
    new = events(days=2, per_day=100, start="2024-01-02", value=2.0)
    t.overwrite(_stream(new, 30, [0]), interval=("2024-01-02", "2024-01-04"))
    got = t.to_arrow(interval=("2024-01-02", "2024-01-04"))
    assert got.num_rows == 200 and set(got.column("v").to_pylist()) == {2.0}
    day1 = t.to_arrow(interval=("2024-01-01", "2024-01-02")).sort_by("k")
    assert day1.equals(first.slice(0, 100))
