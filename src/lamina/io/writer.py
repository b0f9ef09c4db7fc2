"""The local (no JVM) write path: split Arrow data into chunk segments, write Parquet."""

from __future__ import annotations

import os
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lamina.errors import TimeColumnError
from lamina.interval import ETERNITY, Granularity, Interval
from lamina.io.arrow import chunk_starts, time_values_us
from lamina.io.warehouse import Warehouse
from lamina.meta.store import NewSegment


@dataclass(frozen=True)
class ChunkPart:
    """Rows bound for one segment file of one chunk."""

    chunk: Interval
    data: pa.Table
    min_time: int | None
    max_time: int | None


def split_by_chunk(
    data: pa.Table, time_column: str | None, granularity: Granularity, target_rows: int
) -> list[ChunkPart]:
    """Sort rows by time and cut them into per-chunk parts of at most ``target_rows``."""
    if data.num_rows == 0:
        return []
    if time_column is None:
        return [ChunkPart(ETERNITY, p, None, None) for p in _pieces(data, target_rows)]
    col = data.column(time_column)
    if col.null_count:
        raise TimeColumnError(
            f"time column {time_column!r} has {col.null_count} null value(s); every row needs "
            "a time — fill or drop those rows"
        )
    t = time_values_us(col)
    if len(t) > 1 and not bool(np.all(t[1:] >= t[:-1])):
        order = np.argsort(t, kind="stable")
        data = data.take(pa.array(order))
        t = t[order]
    starts = chunk_starts(t, granularity)
    uniq, first = np.unique(starts, return_index=True)
    bounds = [*first.tolist(), len(t)]
    parts = []
    for i, start in enumerate(uniq.tolist()):
        lo, hi = bounds[i], bounds[i + 1]
        chunk = Interval.of(start, granularity.next_start(start))
        offset = lo
        for piece in _pieces(data.slice(lo, hi - lo), target_rows):
            n = piece.num_rows
            parts.append(ChunkPart(chunk, piece, int(t[offset]), int(t[offset + n - 1])))
            offset += n
    return parts


def _pieces(data: pa.Table, target_rows: int) -> list[pa.Table]:
    """Cut into near-equal slices of at most ``target_rows`` rows."""
    n = data.num_rows
    count = max(1, -(-n // max(1, target_rows)))
    size = -(-n // count)
    return [data.slice(i, size) for i in range(0, n, size)]


def write_parts(wh: Warehouse, commit_rel: str, parts: list[ChunkPart]) -> list[NewSegment]:
    """Write each part as one Parquet file under the commit's directory (in parallel)."""
    tag = uuid.uuid4().hex[:8]

    def write(item: tuple[int, ChunkPart]) -> NewSegment:
        i, part = item
        rel = f"{commit_rel}/__lamina_chunk={part.chunk.start}/part-{i:05d}-{tag}.parquet"
        path = wh.path(rel)
        wh.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
        pq.write_table(part.data, path, filesystem=wh.fs)
        return NewSegment(
            part.chunk, rel, part.data.num_rows, wh.size(path), part.min_time, part.max_time
        )

    if len(parts) <= 1:
        return [write(x) for x in enumerate(parts)]
    with ThreadPoolExecutor(max_workers=min(len(parts), os.cpu_count() or 2)) as pool:
        return list(pool.map(write, enumerate(parts)))
