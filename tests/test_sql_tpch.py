"""TPC-H through cat.sql: tpchgen-cli's tables (string views, decimals, dates) loaded
with t.append, the 22 queries of bench/tpch_queries answer as DuckDB does over the
very files lamina wrote (SF0.01)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

import lamina

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import bench_tpch  # noqa: E402

SF = 0.01


def _tpchgen() -> str | None:
    beside = Path(sys.executable).with_name("tpchgen-cli")
    return str(beside) if beside.exists() else shutil.which("tpchgen-cli")


pytestmark = pytest.mark.skipif(_tpchgen() is None, reason="tpchgen-cli is not installed")


def test_the_22_queries_answer_as_duckdb_over_the_same_files(tmp_path: Path) -> None:
    data = bench_tpch.generate(SF, str(tmp_path / "gen"))
    assert str(data["lineitem"].schema.field("l_comment").type) == "string_view"
    cat = lamina.connect(warehouse=str(tmp_path / "wh"))
    try:
        files = bench_tpch.load(cat, data)
        assert len(files["lineitem"]) == 7  # YEAR segments, 1992 to 1998
        con = bench_tpch.duckdb_connection(files)
        try:
            counts = bench_tpch.check_answers(
                {"lamina": cat.sql, "duckdb": lambda q: bench_tpch.fetch(con.sql(q))},
                bench_tpch.queries(SF),
            )
        finally:
            con.close()
    finally:
        cat.close()
    assert len(counts) == 22
    assert counts["q01"] == 4  # (returnflag, linestatus) pairs at every scale
    assert all(os.path.isfile(p) for paths in files.values() for p in paths)
