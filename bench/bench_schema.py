"""Schema evolution: ``t.add_columns`` against deltalake's ``alter.add_columns``, and
what reads of a table whose files predate a column cost.

1. **Adding a column.** A 1M-row DAY table (30 segments, the local writer; deltalake:
   ``write_deltalake`` of the same rows) gets one nullable column at a time, 11 times:
   lamina's one ALTER commit (a catalog transaction, no file) against deltalake's
   ``DeltaTable.alter.add_columns`` (a metadata commit in its log). Medians.
2. **Reading across the change.** Table ``evolved``: the 1M rows written, then a column
   added, then one more day written with it. Table ``born``: the same rows, the column
   in its schema from the start (null in the same rows). The same ``cat.sql`` group-by
   and filtered count, and ``t.to_arrow()``, on both, interleaved; the ratio is what
   the change costs readers (``cat.sql`` reads the files of each set of columns in a
   branch of its own, with typed nulls for the rest). Results compared first. The
   filtered count is a small query (a few ms): its figure is the difference in ms,
   the fixed cost of the second Parquet scan (no target).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import cli, figure, median, print_figures, result, scratch_dir, timed  # noqa: E402
from bench_local_append import make_table  # noqa: E402

import lamina  # noqa: E402

ADDS = 11
QUERIES = {
    "group-by": "SELECT name, count(*) AS n, sum(value) AS s, count(band) AS b FROM {t} "
    "GROUP BY name",
    "filtered count": "SELECT count(*) AS n FROM {t} WHERE qty < 100",
}
BAND = pa.field("band", pa.string())


def add_lamina(root: str, data: pa.Table) -> list[float]:
    with lamina.connect(warehouse=os.path.join(root, "wh")) as cat:
        t = cat.create_table("e", data.schema, time_column="ts", segment_granularity="DAY")
        t.append(data)
        secs = [
            timed(lambda i=i: t.add_columns(pa.field(f"x{i}", pa.int64())))[0] for i in range(ADDS)
        ]
        assert t.to_arrow(columns=[f"x{ADDS - 1}"]).column(0).null_count == data.num_rows
    return secs


def add_delta(root: str, data: pa.Table) -> list[float]:
    from deltalake import DeltaTable, Field, write_deltalake

    path = os.path.join(root, "delta")
    write_deltalake(path, data, mode="append")
    table = DeltaTable(path)  # open, as lamina's handle is
    secs = [
        timed(lambda i=i: table.alter.add_columns(Field(f"x{i}", "long")))[0] for i in range(ADDS)
    ]
    assert f"x{ADDS - 1}" in DeltaTable(path).schema().to_arrow().names
    return secs


def with_band(data: pa.Table, values: list[str | None] | None = None) -> pa.Table:
    got = values if values is not None else [None] * data.num_rows
    return data.append_column(BAND, pa.array(got, pa.string()))


def rounded(t: pa.Table) -> list[dict[str, Any]]:
    """Rows with floats rounded (sums differ in their last bits with the order)."""
    return [
        {k: round(v, 6) if isinstance(v, float) else v for k, v in r.items()} for r in t.to_pylist()
    ]


def reads(
    root: str, data: pa.Table, late: pa.Table, runs: int
) -> dict[str, dict[str, list[float]]]:
    """Seconds of each query on the evolved and the born table, interleaved."""
    bands = [("late", "early")[i % 2] for i in range(late.num_rows)]
    with lamina.connect(warehouse=os.path.join(root, "reads")) as cat:
        evolved = cat.create_table(
            "evolved", data.schema, time_column="ts", segment_granularity="DAY"
        )
        evolved.append(data)
        evolved.add_columns(BAND)
        evolved.append(with_band(late, bands))
        born = cat.create_table(
            "born", with_band(data).schema, time_column="ts", segment_granularity="DAY"
        )
        born.append(with_band(data))
        born.append(with_band(late, bands))
        for q in QUERIES.values():
            key = "name" if "name" in q else "n"
            a, b = (rounded(cat.sql(q.format(t=t)).sort_by(key)) for t in ("evolved", "born"))
            assert a == b, q
        assert evolved.to_arrow().sort_by("id").equals(born.to_arrow().sort_by("id"))
        times: dict[str, dict[str, list[float]]] = {}
        kinds = {**{f"cat.sql {n}": q for n, q in QUERIES.items()}, "to_arrow": None}
        for label, q in kinds.items():
            times[label] = {"evolved": [], "born": []}
            for i in range(runs):
                for side in ("evolved", "born") if i % 2 else ("born", "evolved"):
                    table = evolved if side == "evolved" else born
                    fn = (lambda q=q, s=side: cat.sql(q.format(t=s))) if q else table.to_arrow
                    times[label][side].append(timed(fn)[0])
    return times


def main(quick: bool = False) -> dict[str, Any]:
    """Schema evolution: add_columns vs deltalake, and reads across the change."""
    rows = 200_000 if quick else 1_000_000
    runs = 7 if quick else 15
    data = make_table(rows, days=30, seed=7)
    late = make_table(rows // 30, days=1, seed=8)
    late = late.set_column(
        0,
        "ts",
        pa.array(late.column("ts").to_numpy() + np.timedelta64(30, "D"), pa.timestamp("us")),
    )
    late = late.set_column(1, "id", pa.array(np.arange(rows, rows + late.num_rows, dtype=np.int64)))
    with scratch_dir("schema") as root:
        ours = add_lamina(root, data)
        theirs = add_delta(root, data)
        times = reads(root, data, late, runs)
    figures = [
        figure("t.add_columns, one column", median(ours), "s", note=f"median of {ADDS}"),
        figure(
            "deltalake alter.add_columns, one column",
            median(theirs),
            "s",
            note=f"median of {ADDS}, on one open DeltaTable",
        ),
        figure("add_columns: lamina / deltalake", median(ours) / median(theirs), "x", "<= 1.0"),
    ]
    for label, tt in times.items():
        ev, bo = median(tt["evolved"]), median(tt["born"])
        note = f"{1000 * ev:.1f} ms vs {1000 * bo:.1f} ms, median of {runs}"
        if label == "cat.sql filtered count":  # a small query: the second scan's fixed cost
            figures.append(figure(f"{label}: evolved - born", 1000 * (ev - bo), "ms", note=note))
        else:
            figures.append(figure(f"{label}: evolved / born", ev / bo, "x", "<= 1.10", note=note))
    print_figures(f"Schema evolution: {rows:,} rows, 30 DAY segments (+1 day after)", figures)
    return result(
        "schema",
        {"rows": rows, "adds": ADDS, "runs": runs, "queries": QUERIES},
        figures,
        {"add_seconds": {"lamina": ours, "deltalake": theirs}, "read_seconds": times},
    )


if __name__ == "__main__":
    cli(main, "schema")
