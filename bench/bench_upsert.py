"""Upserts (issue 9 §6): lamina ``t.upsert`` vs deltalake ``merge`` and DuckLake ``MERGE
INTO``, sustained upsert ingestion, the read cost of deletion vectors, the key index at
scale.

1. **Upsert 100k records into a 1M-row table.** Rows: ``id`` int64 (the primary key),
   ``ts`` timestamp over 30 days (the time and comparison column), float64, string and
   int32 values. The batch holds 50k updates of existing ids and 50k new ids, stamped in
   the following day (newer: every update wins, so every system must give the same
   1.05M rows). lamina: a DAY table on the embedded SQLite catalog, loaded by
   ``t.upsert``; ``t.upsert(batch)`` is timed in a *warm* process (the one that loaded
   the table and made one more 1-record upsert, so its key index is current), in a
   *fresh* process (which loads the index snapshot lamina saved and catches up), and in
   a fresh process that *rebuilds* the index from the data files (what lamina does when
   no snapshot was saved yet, or it is lost or damaged: the bench hides the snapshot).
   The time the publish waits for the index is reported apart (a local batch's publish
   reads the saved snapshot; a Spark upsert's starts reading it while Spark writes).
   A fresh process's first large allocations can stall: with transparent huge pages
   on ``madvise`` (this machine's setting), the pages pyarrow's mimalloc and numpy
   ask to be huge may wait for the kernel to compact memory. Measured here (2026-11-28):
   the first ``dictionary_encode`` of the 100k keys took 5-8 ms or 48-59 ms, about
   half the runs each (13-19 ms every time with ``MIMALLOC_ALLOW_THP=0``).
   deltalake: the same rows written by ``write_deltalake``, then
   ``DeltaTable(path).merge(...).when_matched_update_all().when_not_matched_insert_all()``.
   DuckLake: the same rows in a DuckLake catalog (DuckDB's ``ducklake`` extension), then
   ``MERGE INTO``, in a subprocess of this interpreter, or of ``$LAMINA_BENCH_DUCKLAKE_PYTHON``
   when this DuckDB cannot load the extension, or else of a side venv the bench makes in
   ``.bench-ducklake/`` with DuckDB and PyPI's ``duckdb-extension-ducklake`` of one
   version (the DuckDB version used is reported); skipped with the reason when none can.
   deltalake and DuckLake are timed in a warm process and in a fresh one too (a new
   process opens the table and merges), and lamina's fresh-process figures are compared
   with theirs. Every result is checked against the expected table (row count and every
   column of every id) before its time counts. Fresh directories per repetition, systems
   in rotating order, medians (spread in the notes).
2. **Sustained ingestion.** Micro-batches of 10k rows, 30% updates of earlier keys, into
   one table in one process: rows/s of ``t.upsert``, against ``t.append`` of the same
   batches into a table without a primary key and ``pq.write_table`` of each batch.
3. **Query overhead.** ``cat.sql`` group-by and filtered count over an upsert table whose
   deletion vectors hide 10% of its stored rows, against an append table holding exactly
   the visible rows, and against the same upsert table after ``cat.compact_auto()``
   (which rewrites files with >= 10% superseded rows); interleaved runs, medians, results
   compared; at 1M stored rows and, in a full run, again at 5M. Then a process's next
   upsert after another process overwrote one day of a 1M-row table, compacted one or
   deleted a segment: its key index replays the commit, against a rebuild of the index
   from every file.
4. **Key index at scale.** 10M keys (1M with ``--quick``) upserted into one table:
   ``KeyIndex.nbytes / len`` in the writing process; sustained ingestion (as in 2) into
   that table; restart-to-ready: a fresh process's first upsert (10k records), from the
   saved index snapshot and rebuilt from the data files.

Phase times (resolve_batch, key hashing, file writes, the publish transaction with the
index build/catch-up and the deletion vectors) come from thin timing wrappers around
lamina's functions, installed in every lamina process; they are printed and kept in
``details``. Timed assertions: none; a wrong result raises.
"""

from __future__ import annotations

import functools
import json
import multiprocessing as mp
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (  # noqa: E402
    cli,
    figure,
    median,
    print_figures,
    print_table,
    result,
    scratch_dir,
    timed,
)

import lamina  # noqa: E402

DAY_US = 86_400_000_000
MINUTE_US = 60_000_000
START_US = int(np.datetime64("2024-01-01T00:00:00", "us").astype("int64"))
DAYS = 30
VOCAB = pa.array([f"user_{i:05d}" for i in range(10_000)])
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("ts", pa.timestamp("us")),
        pa.field("v", pa.float64()),
        pa.field("name", pa.string()),
        pa.field("qty", pa.int32()),
    ]
)
LAMINA_MODES = {  # how lamina's upsert is timed (figure 1)
    "warm": "warm process",
    "fresh": "fresh process (saved index snapshot)",
    "rebuild": "fresh process, index rebuilt from data",
}
#: how a fresh process's index comes, for the notes
INDEX_HOW = {
    "fresh": "the saved snapshot, read at publish",
    "rebuild": "built from the data files at publish",
}
STREAM_BATCH = 10_000
STREAM_UPDATES = 0.3

# -- data -------------------------------------------------------------------------------


def records(ids: np.ndarray, start_us: int, span_us: int, seed: int) -> pa.Table:
    """Rows for ``ids`` (in that order), ``ts`` uniform in [start, start + span)."""
    rng = np.random.default_rng(seed)
    n = len(ids)
    return pa.table(
        {
            "id": pa.array(ids.astype(np.int64)),
            "ts": pa.array(start_us + rng.integers(0, span_us, n), pa.timestamp("us")),
            "v": pa.array(rng.random(n)),
            "name": VOCAB.take(pa.array(rng.integers(0, len(VOCAB), n))),
            "qty": pa.array(rng.integers(0, 1000, n).astype(np.int32)),
        },
        schema=SCHEMA,
    )


def base_and_batch(rows: int, updates: int, inserts: int, seed: int) -> tuple[pa.Table, pa.Table]:
    """``rows`` records over DAYS days, and a batch stamped the day after: ``updates`` of
    existing ids (each newer than its stored record) and ``inserts`` new ids, shuffled."""
    rng = np.random.default_rng(seed)
    base = records(np.arange(rows), START_US, DAYS * DAY_US, seed)
    ids = np.concatenate(
        [rng.choice(rows, updates, replace=False), np.arange(rows, rows + inserts)]
    )
    batch = records(rng.permutation(ids), START_US + DAYS * DAY_US, DAY_US, seed + 1)
    return base, batch


def expected_after(base: pa.Table, batch: pa.Table) -> pa.Table:
    """The latest record per id once ``batch`` is upserted into ``base`` (batch wins)."""
    keep = ~np.isin(base.column("id").to_numpy(), batch.column("id").to_numpy())
    return pa.concat_tables([base.filter(pa.array(keep)), batch]).sort_by("id")


def latest_of(batches: list[pa.Table]) -> pa.Table:
    """The last record per id over ``batches`` in order (later ones are newer)."""
    all_rows = pa.concat_tables(batches)
    ids = all_rows.column("id").to_numpy()
    order = np.lexsort((-np.arange(len(ids)), ids))  # by id, latest first
    _, first = np.unique(ids[order], return_index=True)
    return all_rows.take(pa.array(order[first]))


def verify(got: pa.Table, want: pa.Table, who: str) -> None:
    """Raise unless ``got`` holds exactly ``want``'s rows (any order, any string type)."""
    if got.num_rows != want.num_rows:
        raise AssertionError(f"{who}: {got.num_rows:,} rows, expected {want.num_rows:,}")
    got = got.sort_by("id")
    for name in want.column_names:
        a = got.column(name).cast(want.schema.field(name).type).combine_chunks()
        if not a.equals(want.column(name).combine_chunks()):
            raise AssertionError(f"{who}: column {name!r} differs from the expected result")


# -- phase timing -----------------------------------------------------------------------

#: label -> [seconds, calls], accumulated by the wrappers :func:`instrument` installs
PHASES: dict[str, list[float]] = {}
STATE = "      index state: load / build / catch-up"
LABELS: list[str] = []  #: the phases in the order :func:`instrument` lists them


def _wrap(owner: Any, attr: str, label: str) -> None:
    fn = getattr(owner, attr)
    if getattr(fn, "_bench_phase", None):
        return

    @functools.wraps(fn)
    def timed_call(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            acc = PHASES.setdefault(label, [0.0, 0])
            acc[0] += time.perf_counter() - t0
            acc[1] += 1

    timed_call._bench_phase = label  # type: ignore[attr-defined]
    setattr(owner, attr, timed_call)


def instrument() -> None:
    """Time lamina's upsert phases (inclusive: the indented ones run inside the others)."""
    import lamina.core.keyindex as ki
    import lamina.core.upsert as core_upsert
    import lamina.io.writer as writer
    import lamina.meta.deletes as deletes
    import lamina.meta.keyindex.replay as replay
    import lamina.meta.publish as publish
    import lamina.operations.upsert as up
    from lamina.meta.keyindex import KeyIndexes

    for owner, attr, label in (  # the ones lamina lacks (it changes) are left out
        (up, "upsert", "t.upsert (all of it)"),
        (up, "resolve_batch", "  resolve_batch (own records)"),
        (ki, "key_hashes", "  key_hashes (batch)"),
        (writer, "split_by_chunk", "  split_by_chunk (sort + cut)"),
        (writer, "write_parts", "  write_parts (Parquet files)"),
        (publish, "publish", "  publish (catalog transaction)"),
        (KeyIndexes, "resolve", "    keys.resolve"),
        (KeyIndexes, "state", STATE),
        (KeyIndexes, "_saved", "        load the saved index snapshot"),
        (replay, "rebuild", "        rebuild from the data files"),
        (replay, "catch_up", "        catch up (replay commits)"),
        (replay, "add_files", "          read data files into the index"),
        (replay, "key_hashes", "          key_hashes (index files)"),
        (core_upsert, "resolve_against", "      resolve_against"),  # what keys.resolve calls
        (ki.KeyIndex, "lookup", "      KeyIndex.lookup"),
        (ki.KeyIndex, "put", "      KeyIndex.put (incl. index build)"),
        (deletes, "add", "    deletion vectors: insert"),
        (KeyIndexes, "save_if_due", "  save the index snapshot (when due)"),
    ):
        if hasattr(owner, attr):
            _wrap(owner, attr, label)
            LABELS.append(label)


def phases_of(fn: Callable[[], Any]) -> tuple[float, dict[str, list[float]]]:
    """Wall seconds of ``fn()`` and the phases it spent them in."""
    PHASES.clear()
    secs, _ = timed(fn)
    return secs, {k: list(v) for k, v in PHASES.items()}


def drop_indexes(cat: lamina.Catalog) -> None:
    """Forget the key indexes ``cat`` holds (scratch catalogs come and go)."""
    cat.context.keys.clear()


def index_stats(t: lamina.Table) -> tuple[int, int]:
    """(keys, bytes) of the key index this process holds of ``t``."""
    st = t._handle.ctx.keys.held(t._handle.record.id)
    return (0, 0) if st is None else (len(st.index), st.index.nbytes)


def rss() -> int:
    """Resident bytes of this process now."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def spread(xs: list[float], unit: str = "s") -> str:
    """'median of N, min-max' for a note."""
    return f"median of {len(xs)}, range {min(xs):.3f}-{max(xs):.3f} {unit}"


# -- fresh processes --------------------------------------------------------------------


def _fresh_upsert(wh: str, table: str, batch_path: str, out: str, rebuild: bool) -> None:
    """Child: connect, load the table and the batch, then time ``t.upsert(batch)``.
    ``rebuild``: ignore saved index snapshots (as when none was saved yet, or it is
    lost), so the index is built from the data files."""
    # The modules the upsert runs, imported before the clock starts as the others'
    # children import deltalake or load the DuckLake extension first (``import lamina``
    # alone imports the write path lazily, on first use).
    import lamina.core.upsert
    import lamina.meta.keyindex.replay
    import lamina.meta.keyindex.snapshots
    import lamina.meta.publish
    import lamina.operations.upsert
    import lamina.write  # noqa: F401
    from lamina.meta.keyindex import KeyIndexes

    if rebuild:
        KeyIndexes._saved = lambda *args, **kwargs: None  # type: ignore[method-assign]
        KeyIndexes.prefetch = lambda *args, **kwargs: None  # type: ignore[method-assign]
    instrument()
    t0 = time.perf_counter()
    batch = pq.read_table(batch_path)
    cat = lamina.connect(warehouse=wh)
    t = cat.load_table(table)
    ready = time.perf_counter() - t0
    before = rss()
    secs, phases = phases_of(lambda: t.upsert(batch))
    n_keys, nbytes = index_stats(t)
    cat.close()
    Path(out).write_text(
        json.dumps(
            {
                "seconds": secs,
                "phases": phases,
                "open_s": ready,
                "keys": n_keys,
                "nbytes": nbytes,
                "rss_growth": rss() - before,
            }
        )
    )


def fresh_upsert(
    wh: str, table: str, batch: pa.Table, scratch: str, rebuild: bool = False
) -> dict[str, Any]:
    """Run :func:`_fresh_upsert` in a new (spawned) process; its report."""
    batch_path = os.path.join(scratch, f"batch-{time.monotonic_ns()}.parquet")
    pq.write_table(batch, batch_path)
    out = batch_path + ".json"
    os.sync()  # the files just written go to disk first, not while the child is timed
    proc = mp.get_context("spawn").Process(
        target=_fresh_upsert, args=(wh, table, batch_path, out, rebuild)
    )
    proc.start()
    proc.join(1800)
    if proc.exitcode != 0 or not os.path.exists(out):
        raise RuntimeError(f"fresh-process upsert failed (exit code {proc.exitcode})")
    return dict(json.loads(Path(out).read_text()))


# -- figure 1: upsert 100k into 1M ------------------------------------------------------


def new_upsert_table(cat: lamina.Catalog, name: str, base: pa.Table) -> lamina.Table:
    t = cat.create_table(
        name, SCHEMA, time_column="ts", primary_key=["id"], segment_granularity="DAY"
    )
    t.upsert(base)
    return t


def run_lamina(base: pa.Table, batch: pa.Table, want: pa.Table, root: str) -> dict[str, Any]:
    """Warm and fresh-process upserts of ``batch``, each on its own copy of ``base``."""
    wh = os.path.join(root, "wh")
    out: dict[str, Any] = {}
    with lamina.connect(warehouse=wh) as cat:
        out["load_s"], _ = timed(lambda: new_upsert_table(cat, "fresh", base))
        new_upsert_table(cat, "rebuild", base)
        t = new_upsert_table(cat, "warm", base)
        # One record re-upserted unchanged: the index catches up with the load (timed
        # apart), and is current for the batch.
        same = base.slice(0, 1)
        out["after_load_s"], out["after_load_phases"] = phases_of(lambda: t.upsert(same))
        out["warm_s"], out["warm_phases"] = phases_of(lambda: t.upsert(batch))
        verify(t.to_arrow(), want, "lamina (warm)")
    drop_indexes(cat)
    for mode in ("fresh", "rebuild"):
        got = fresh_upsert(wh, mode, batch, root, rebuild=mode == "rebuild")
        out[f"{mode}_s"], out[f"{mode}_phases"] = got["seconds"], got["phases"]
        out[f"{mode}_index_s"] = got["phases"].get(STATE, [0.0])[0]
        with lamina.connect(warehouse=wh) as cat:
            verify(cat.load_table(mode).to_arrow(), want, f"lamina ({mode} process)")
    drop_indexes(cat)
    return out


def _delta_merge(path: str, batch: pa.Table) -> Any:
    from deltalake import DeltaTable

    return (
        DeltaTable(path)
        .merge(source=batch, predicate="t.id = s.id", source_alias="s", target_alias="t")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )


def _fresh_delta_merge(path: str, batch_path: str, out: str) -> None:
    """Child: import deltalake, read the batch, then time the merge (as
    :func:`_fresh_upsert` times lamina's upsert: what a new process pays)."""
    import deltalake  # noqa: F401

    batch = pq.read_table(batch_path)
    secs, _ = timed(lambda: _delta_merge(path, batch))
    Path(out).write_text(json.dumps({"seconds": secs}))


def run_delta(base: pa.Table, batch: pa.Table, want: pa.Table, root: str) -> dict[str, Any]:
    """deltalake's merge of ``batch`` into ``base``, in this (warm) process and in a new
    one, each on its own copy."""
    from deltalake import DeltaTable, write_deltalake

    path, fresh = os.path.join(root, "delta"), os.path.join(root, "delta-fresh")
    load_s, _ = timed(lambda: write_deltalake(path, base))
    write_deltalake(fresh, base)
    secs, metrics = timed(lambda: _delta_merge(path, batch))
    batch_path, out = os.path.join(root, "batch.parquet"), os.path.join(root, "fresh.json")
    pq.write_table(batch, batch_path)
    os.sync()  # as before lamina's fresh process
    proc = mp.get_context("spawn").Process(target=_fresh_delta_merge, args=(fresh, batch_path, out))
    proc.start()
    proc.join(1800)
    if proc.exitcode != 0 or not os.path.exists(out):
        raise RuntimeError(f"fresh-process deltalake merge failed (exit code {proc.exitcode})")
    for p in (path, fresh):
        verify(DeltaTable(p).to_pyarrow_table(), want, "deltalake")
    keep = ("num_target_rows_updated", "num_target_rows_inserted", "num_target_files_added")
    return {
        "merge_s": secs,
        "fresh_s": json.loads(Path(out).read_text())["seconds"],
        "load_s": load_s,
        "metrics": {k: metrics.get(k) for k in keep},
    }


DUCKLAKE_SCRIPT = r"""
import glob, json, sys, time
import duckdb

con = duckdb.connect()
try:
    con.execute("LOAD ducklake")
    how = "LOAD ducklake"
except duckdb.Error:
    try:
        import duckdb_extension_ducklake as ext
    except ImportError:
        con.execute("INSTALL ducklake")
        con.execute("LOAD ducklake")
        how = "INSTALL ducklake"
    else:
        path = glob.glob(ext.__path__[0] + "/extensions/*/ducklake.duckdb_extension")[0]
        con.execute("LOAD '%s'" % path)
        how = "duckdb-extension-ducklake package"
info = {"duckdb": duckdb.__version__, "how": how, "threads": con.sql(
    "SELECT current_setting('threads')").fetchone()[0]}
if sys.argv[1] == "probe":
    print(json.dumps(info))
    sys.exit(0)
step, root, base, batch, out = sys.argv[1:6]
if step == "query":  # merge-on-read overhead: ``out`` holds the latest rows
    import statistics
    runs, queries = int(sys.argv[6]), json.loads(sys.argv[7])
    con.execute("ATTACH 'ducklake:%s/meta.ducklake' AS lake (DATA_PATH '%s/data/')" % (root, root))
    con.execute("USE lake")
    for name, src in (("u", base), ("a", out)):  # a file a day, as lamina's DAY segments
        con.execute("CREATE TABLE %s AS SELECT * FROM read_parquet('%s') LIMIT 0" % (name, src))
        days = con.execute("SELECT DISTINCT date_trunc('day', ts) AS d FROM read_parquet('%s') "
                           "ORDER BY d" % src).fetchall()
        for (d,) in days:
            con.execute("INSERT INTO %s SELECT * FROM read_parquet('%s') "
                        "WHERE date_trunc('day', ts) = '%s'" % (name, src, d))
    con.execute("CREATE TEMP TABLE s AS SELECT * FROM read_parquet('%s')" % batch)
    con.execute("MERGE INTO u USING s ON u.id = s.id "
                "WHEN MATCHED THEN UPDATE WHEN NOT MATCHED THEN INSERT")
    times = {}
    for q, sql in queries.items():
        got = [sorted(con.execute(sql.format(t=t)).fetchall()) for t in ("u", "a")]
        if [r[:2] for r in got[0]] != [r[:2] for r in got[1]]:
            raise SystemExit("DuckLake: %s differs between the merged and the latest table" % q)
        times[q] = {"upsert": [], "latest": []}
        for i in range(runs):
            for t in (("u", "a") if i % 2 else ("a", "u")):
                t0 = time.perf_counter()
                con.sql(sql.format(t=t)).to_arrow_table()
                times[q]["upsert" if t == "u" else "latest"].append(time.perf_counter() - t0)
    info["times"] = times
    info["files"] = len(glob.glob(root + "/data/**/*.parquet", recursive=True))
    print(json.dumps(info))
    sys.exit(0)
con.execute("ATTACH 'ducklake:%s/meta.ducklake' AS lake (DATA_PATH '%s/data/')" % (root, root))
if step in ("load", "both"):
    t0 = time.perf_counter()
    con.execute("CREATE TABLE lake.t AS SELECT * FROM read_parquet('%s')" % base)
    info["load_s"] = time.perf_counter() - t0
if step == "load":
    print(json.dumps(info))
    sys.exit(0)
con.execute("CREATE TEMP TABLE s AS SELECT * FROM read_parquet('%s')" % batch)
t0 = time.perf_counter()
con.execute(
    "MERGE INTO lake.t USING s ON t.id = s.id "
    "WHEN MATCHED THEN UPDATE WHEN NOT MATCHED THEN INSERT"
)
info["merge_s"] = time.perf_counter() - t0
con.execute("COPY (SELECT * FROM lake.t) TO '%s' (FORMAT parquet)" % out)
print(json.dumps(info))
"""


# DuckDB loads only extensions built for its own version, and this machine cannot
# download them; PyPI has the ducklake extension as a package for some DuckDB releases.
# When neither this interpreter nor $LAMINA_BENCH_DUCKLAKE_PYTHON can load it, the bench
# makes a side venv (gitignored) with a DuckDB and an extension of one version.
DUCKLAKE_VERSION = "1.5.5"
DUCKLAKE_VENV = Path(__file__).resolve().parent.parent / ".bench-ducklake"


def _side_venv() -> tuple[str | None, str]:
    """The side venv's interpreter (made on first use), or None and why it could not be."""
    python = DUCKLAKE_VENV / "bin" / "python"
    if python.exists():
        return str(python), ""
    pkgs = [f"duckdb=={DUCKLAKE_VERSION}", f"duckdb-extension-ducklake=={DUCKLAKE_VERSION}"]
    try:
        subprocess.run([sys.executable, "-m", "venv", str(DUCKLAKE_VENV)], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", *pkgs, "pyarrow"],
            check=True,
            capture_output=True,
            timeout=600,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        subprocess.run(["rm", "-rf", str(DUCKLAKE_VENV)], check=False)
        return None, f"side venv with {' '.join(pkgs)}: {exc}"
    return str(python), ""


def ducklake_python() -> tuple[str | None, str]:
    """An interpreter whose DuckDB loads the ducklake extension, and how (or None and
    why not)."""
    reasons = []
    candidates = [sys.executable, os.environ.get("LAMINA_BENCH_DUCKLAKE_PYTHON")]
    if "LAMINA_BENCH_DUCKLAKE_PYTHON" not in os.environ:
        side, why = _side_venv()
        candidates.append(side)
        if why:
            reasons.append(why)
    for python in dict.fromkeys(p for p in candidates if p):
        try:
            proc = subprocess.run(
                [python, "-c", DUCKLAKE_SCRIPT, "probe"],
                capture_output=True,
                text=True,
                timeout=120,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            reasons.append(f"{python}: {exc}")
            continue
        if proc.returncode == 0:
            info = json.loads(proc.stdout.strip().splitlines()[-1])
            return python, f"DuckDB {info['duckdb']} ({info['how']}, {info['threads']} threads)"
        lines = proc.stderr.strip().splitlines() or ["?"]
        why = next((ln for ln in lines if "Error" in ln), lines[-1])
        reasons.append(f"{python}: {why[:140]}")
    reasons.append(
        "set LAMINA_BENCH_DUCKLAKE_PYTHON to a Python with duckdb and "
        "duckdb-extension-ducklake of one version"
    )
    return None, "; ".join(reasons)


def _ducklake(python: str, *args: str) -> dict[str, Any]:
    proc = subprocess.run(
        [python, "-c", DUCKLAKE_SCRIPT, *args], capture_output=True, text=True, timeout=1800
    )
    if proc.returncode != 0:
        raise RuntimeError(f"DuckLake MERGE failed: {proc.stderr.strip()[-500:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def run_ducklake(
    python: str, base: pa.Table, batch: pa.Table, want: pa.Table, root: str
) -> dict[str, Any]:
    """DuckLake's MERGE INTO: in the process that loaded the table (warm), and in a new
    process over another copy (fresh)."""
    paths = [os.path.join(root, f) for f in ("base.parquet", "batch.parquet", "out.parquet")]
    pq.write_table(base, paths[0])
    pq.write_table(batch, paths[1])
    warm, fresh = os.path.join(root, "lake"), os.path.join(root, "lake-fresh")
    os.makedirs(warm)
    os.makedirs(fresh)
    info = _ducklake(python, "both", warm, *paths)
    verify(pq.read_table(paths[2]), want, "DuckLake")
    _ducklake(python, "load", fresh, *paths)
    os.sync()  # as before lamina's fresh process
    info["fresh_s"] = _ducklake(python, "merge", fresh, *paths)["merge_s"]
    verify(pq.read_table(paths[2]), want, "DuckLake (fresh process)")
    return info


def upsert_vs_merge(quick: bool) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    rows = 200_000 if quick else 1_000_000
    half = rows // 20
    reps = 3 if quick else 5
    base, batch = base_and_batch(rows, half, half, seed=1)
    want = expected_after(base, batch)
    python, dl_note = ducklake_python()
    print(f"  DuckLake: {dl_note if python else 'skipped: ' + dl_note}")
    runners: dict[str, Callable[[str], dict[str, Any]]] = {
        "lamina": lambda d: run_lamina(base, batch, want, d),
        "deltalake": lambda d: run_delta(base, batch, want, d),
    }
    if python is not None:
        runners["ducklake"] = lambda d: run_ducklake(python, base, batch, want, d)
    names = list(runners)
    got: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for rep in range(reps):
        order = names[rep % len(names) :] + names[: rep % len(names)]
        for n in order:
            with scratch_dir(f"upsert-{n}") as d:
                got[n].append(runners[n](d))
        la = got["lamina"][-1]
        line = ", ".join(f"lamina {m} {la[m + '_s']:.3f}s" for m in LAMINA_MODES)
        for n, who in (("deltalake", "deltalake"), ("ducklake", "DuckLake")):
            if n in got:
                r = got[n][-1]
                line += f", {who} {r['merge_s']:.3f}s (fresh {r['fresh_s']:.3f}s)"
        print(f"  rep {rep + 1}/{reps}: {line}")

    def col(n: str, k: str) -> list[float]:
        return [float(r[k]) for r in got[n]]

    delta = col("deltalake", "merge_s")
    duck = col("ducklake", "merge_s") if "ducklake" in got else []
    what = f"{batch.num_rows // 1000}k into {rows // 1000}k"
    figs = []
    for mode, label in LAMINA_MODES.items():
        secs = col("lamina", f"{mode}_s")
        note = spread(secs)
        if mode != "warm":
            index = col("lamina", f"{mode}_index_s")
            note += (
                f"; the publish waited {median(index):.3f} s of it for the index "
                f"({min(index):.3f}-{max(index):.3f}; {INDEX_HOW[mode]})"
            )
        figs.append(figure(f"upsert {what}: lamina, {label}", median(secs), "s", note=note))
    after = col("lamina", "after_load_s")
    figs.append(
        figure(
            f"  lamina: 1-record upsert after the process's own {rows // 1000}k load",
            median(after),
            "s",
            note=spread(after) + "; the index catching up with the load",
        )
    )
    figs.append(figure(f"deltalake merge, {what}", median(delta), "s", note=spread(delta)))
    if duck:
        figs.append(
            figure(
                f"DuckLake MERGE INTO, {what}",
                median(duck),
                "s",
                note=spread(duck) + f"; {dl_note}",
            )
        )
    delta_fresh = col("deltalake", "fresh_s")
    duck_fresh = col("ducklake", "fresh_s") if duck else []
    figs.append(
        figure(
            "  deltalake merge, fresh process", median(delta_fresh), "s", note=spread(delta_fresh)
        )
    )
    if duck:
        figs.append(
            figure(
                "  DuckLake MERGE INTO, fresh process",
                median(duck_fresh),
                "s",
                note=spread(duck_fresh),
            )
        )
    # Like for like: lamina in a warm process against the others in theirs, lamina in a
    # new process against theirs in a new process.
    for mode in LAMINA_MODES:
        m = median(col("lamina", f"{mode}_s"))
        dl, dk = (delta, duck) if mode == "warm" else (delta_fresh, duck_fresh)
        how = "" if mode == "warm" else " (theirs fresh too)"
        figs.append(figure(f"lamina {mode} / deltalake merge{how}", m / median(dl), "x", "<= 0.5"))
        if duck:
            figs.append(
                figure(f"lamina {mode} / DuckLake MERGE{how}", m / median(dk), "x", "<= 1.0")
            )
    if not duck:
        figs.append(figure("lamina / DuckLake MERGE", None, "x", "<= 1.0", "skipped: " + dl_note))
    try:
        import pyiceberg  # noqa: F401

        ice = "installed, but not measured here"
    except ImportError:
        ice = "pyiceberg is not installed: skipped"
    figs.append(figure("lamina / pyiceberg upsert (reference)", None, "x", note=ice))
    details = {
        "rows": rows,
        "batch": batch.num_rows,
        "runs": got,
        "ducklake": dl_note,
        "load_s": {
            "lamina_upsert": median(col("lamina", "load_s")),
            "deltalake_write": median(col("deltalake", "load_s")),
            **({"ducklake_ctas": median(col("ducklake", "load_s"))} if duck else {}),
        },
    }
    return figs, details


# -- figure 2: sustained ingestion ------------------------------------------------------


def stream(n_batches: int, seed: int) -> list[pa.Table]:
    """Batches of STREAM_BATCH rows, 10 minutes apart: STREAM_UPDATES of them earlier
    keys (newer records of them), the rest new keys."""
    rng = np.random.default_rng(seed)
    out, next_id = [], 0
    for b in range(n_batches):
        n_upd = int(STREAM_BATCH * STREAM_UPDATES) if next_id else 0
        ids = np.concatenate(
            [
                rng.choice(next_id, n_upd, replace=False) if n_upd else np.zeros(0, np.int64),
                np.arange(next_id, next_id + STREAM_BATCH - n_upd),
            ]
        )
        next_id += STREAM_BATCH - n_upd
        out.append(records(rng.permutation(ids), START_US + b * 10 * MINUTE_US,
                           10 * MINUTE_US, seed + b))  # fmt: skip
    return out


def ingest(kind: str, batches: list[pa.Table], root: str) -> list[float]:
    """Per-batch seconds of writing ``batches`` one after another."""
    times = []
    if kind == "parquet":
        for i, b in enumerate(batches):
            path = os.path.join(root, f"b{i:05d}.parquet")
            times.append(timed(functools.partial(pq.write_table, b, path))[0])
        return times
    with lamina.connect(warehouse=os.path.join(root, "wh")) as cat:
        if kind == "upsert":
            t = cat.create_table(
                "s", SCHEMA, time_column="ts", primary_key=["id"], segment_granularity="DAY"
            )
        else:
            t = cat.create_table("s", SCHEMA, time_column="ts", segment_granularity="DAY")
        for b in batches:
            times.append(timed(functools.partial(t.append, b))[0])  # upserts on an upsert table
        if kind == "upsert":
            verify(t.to_arrow(), latest_of(batches), "sustained upsert")
        elif t.count() != sum(b.num_rows for b in batches):
            raise AssertionError("sustained append lost rows")
    drop_indexes(cat)
    return times


def sustained(quick: bool) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    n_batches = 30 if quick else 300
    reps = 2 if quick else 3
    batches = stream(n_batches, seed=7)
    rows = n_batches * STREAM_BATCH
    names = ["upsert", "append", "parquet"]
    got: dict[str, list[list[float]]] = {n: [] for n in names}
    phases: dict[str, list[float]] = {}
    for rep in range(reps):
        for n in names[rep % 3 :] + names[: rep % 3]:
            PHASES.clear()
            with scratch_dir(f"stream-{n}") as d:
                got[n].append(ingest(n, batches, d))
            if n == "upsert":  # the others run some of the same functions
                for k, (secs, calls) in PHASES.items():
                    acc = phases.setdefault(k, [0.0, 0])
                    acc[0] += secs / (reps * n_batches)
                    acc[1] += calls
        print(
            f"  rep {rep + 1}/{reps}: "
            + ", ".join(f"{n} {rows / sum(got[n][-1]):,.0f} rows/s" for n in names)
        )
    rate = {n: [rows / sum(ts) for ts in got[n]] for n in names}
    total = {n: median([sum(ts) for ts in got[n]]) for n in names}
    per_batch = [x for ts in got["upsert"] for x in ts]
    figs = [
        figure(
            f"sustained upsert, {STREAM_BATCH // 1000}k batches, {STREAM_UPDATES:.0%} updates",
            median(rate["upsert"]),
            "rows/s",
            ">= 100000",
            note=f"{n_batches} batches; {spread(rate['upsert'], 'rows/s')}; per batch median "
            f"{1000 * median(per_batch):.1f} ms, p95 {1000 * np.quantile(per_batch, 0.95):.1f} "
            f"ms, max {1000 * max(per_batch):.0f} ms",
        ),
        figure(
            "  t.append, no primary key",
            median(rate["append"]),
            "rows/s",
            note=spread(rate["append"], "rows/s"),
        ),  # fmt: skip
        figure(
            "  pq.write_table per batch",
            median(rate["parquet"]),
            "rows/s",
            note=spread(rate["parquet"], "rows/s"),
        ),  # fmt: skip
        figure("upsert / append time", total["upsert"] / total["append"], "x"),
        figure("upsert / pq.write_table time", total["upsert"] / total["parquet"], "x"),
    ]
    return figs, {"batches": n_batches, "seconds_per_batch": got, "phases_per_batch": phases}


# -- figure 3: query overhead -----------------------------------------------------------

QUERIES = {
    "group-by": "SELECT name, count(*) AS n, sum(v) AS s FROM {t} GROUP BY name",
    "filtered count": "SELECT count(*) AS n FROM {t} WHERE qty < 100",
}


def same_answer(a: pa.Table, b: pa.Table, what: str) -> None:
    a, b = a.sort_by(a.column_names[0]), b.sort_by(b.column_names[0])
    if a.num_rows != b.num_rows:
        raise AssertionError(f"{what}: {a.num_rows} vs {b.num_rows} result rows")
    for name in a.column_names:
        x, y = a.column(name).to_numpy(), b.column(name).to_numpy()
        ok = np.allclose(x, y) if x.dtype.kind == "f" else np.array_equal(x, y)
        if not ok:
            raise AssertionError(f"{what}: column {name!r} differs between the tables")


def query_overhead(quick: bool) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """At 1M stored rows (200k quick) and, in a full run, at 5M: the cost of a
    deletion-vector filter must not grow with the table."""
    figs: list[dict[str, Any]] = []
    details: dict[str, Any] = {}
    for stored in (200_000,) if quick else (1_000_000, 5_000_000):
        f, d = overhead_at(stored, 7 if quick else 15, first=not figs)
        figs += f
        details[f"{stored:,}"] = d
    return figs, details


def overhead_at(stored: int, runs: int, first: bool) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    hidden = stored // 10
    base, batch = base_and_batch(stored - hidden, hidden, 0, seed=3)
    kinds = ("upsert", "append", "compacted")
    times: dict[str, dict[str, list[float]]] = {q: {k: [] for k in kinds} for q in QUERIES}
    with scratch_dir("upsert-sql") as root, lamina.connect(warehouse=root) as cat:
        u = new_upsert_table(cat, "u", base)
        u.upsert(batch)
        latest = u.to_arrow()
        verify(latest, expected_after(base, batch), "upsert table")
        a = cat.create_table("a", SCHEMA, time_column="ts", segment_granularity="DAY")
        a.append(latest)
        n_stored = u.to_arrow(all_versions=True).num_rows
        # the same upsert table after auto-compaction rewrote the files whose deletion
        # vectors hide >= compaction.max_superseded_percent (10%) of their rows
        c = new_upsert_table(cat, "c", base)
        c.upsert(batch)
        results = cat.compact_auto(tables=["c"])
        rewritten = sum(1 for r in results if r.commit is not None)
        n_after = c.to_arrow(all_versions=True).num_rows
        names = {"upsert": "u", "append": "a", "compacted": "c"}
        for q, sql in QUERIES.items():
            want = cat.sql(sql.format(t="a"))
            same_answer(cat.sql(sql.format(t="u")), want, q)
            same_answer(cat.sql(sql.format(t="c")), want, q + " (compacted)")
            for i in range(runs):
                for k in kinds[i % 3 :] + kinds[: i % 3]:
                    secs, _ = timed(functools.partial(cat.sql, sql.format(t=names[k])))
                    times[q][k].append(secs)
    drop_indexes(cat)
    lake = ducklake_overhead(base, batch, latest, runs)
    figs = []
    for q in QUERIES:
        up, ap, cp = times[q]["upsert"], times[q]["append"], times[q]["compacted"]
        figs.append(
            ratio(
                f"cat.sql {q}: upsert (10% hidden) / append"
                + ("" if first else f", {stored // 1_000_000}M stored rows"),
                up,
                ap,
                "<= 1.2",
                f"{1000 * median(up):.1f} ms vs {1000 * median(ap):.1f} ms, median of "
                f"{runs}; ranges {1000 * min(up):.0f}-{1000 * max(up):.0f} / "
                f"{1000 * min(ap):.0f}-{1000 * max(ap):.0f} ms",
            )
        )
        if "times" in lake:
            lu, ll = lake["times"][q]["upsert"], lake["times"][q]["latest"]
            own = (median(up) / median(ap)) / (median(lu) / median(ll))
            figs.append(
                ratio(
                    "  DuckLake, the same rows: after MERGE / of the latest rows",
                    lu,
                    ll,
                    note=f"{1000 * median(lu):.1f} ms vs {1000 * median(ll):.1f} ms; its "
                    f"native deletion files; lamina's overhead is {own:.2f}x DuckLake's",
                )
            )
        figs.append(
            ratio(
                "  after auto-compaction / append",
                cp,
                ap,
                note=f"{1000 * median(cp):.1f} ms; {rewritten} chunk(s) rewritten, "
                f"{n_after:,} rows stored (was {n_stored:,})",
            )
        )
    details = {"stored_rows": n_stored, "visible_rows": latest.num_rows, "seconds": times}
    details["ducklake"] = lake
    return figs, {**details, "stored_after_compaction": n_after}


def ratio(
    metric: str, num: list[float], den: list[float], target: str | None = None, note: str = ""
) -> dict[str, Any]:
    """A figure: the ratio of two samples' medians."""
    return figure(metric, median(num) / median(den), "x", target, note=note)


def ducklake_overhead(base: pa.Table, batch: pa.Table, latest: pa.Table, runs: int) -> Any:
    """DuckLake's own merge-on-read overhead on the same rows (a file a day, then
    ``MERGE INTO`` the batch: its deletion files hide the 10%), against a DuckLake table
    of the latest rows; interleaved runs in one process: {"times": {query: {"upsert":
    [...], "latest": [...]}}, ...}, or {"skipped": why}."""
    python, why = ducklake_python()
    if python is None:
        print(f"  DuckLake query overhead: skipped: {why}")
        return {"skipped": why}
    with scratch_dir("upsert-sql-ducklake") as root:
        paths = [os.path.join(root, f) for f in ("base.parquet", "batch.parquet", "latest.parquet")]
        for data, path in zip((base, batch, latest), paths, strict=True):
            pq.write_table(data, path)
        lake = os.path.join(root, "lake")
        os.makedirs(lake)
        return _ducklake(python, "query", lake, *paths, str(runs), json.dumps(QUERIES))


# -- figure 3b: the key index catching up with another process's commit ------------------


def catch_up(quick: bool) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A process's next upsert after another process overwrote a day, compacted one or
    deleted a segment: its index replays the commit; against a rebuild from every file
    (what a process did after any commit but an upsert before). Two rounds on other
    days each; the second is reported (the first compiles statements for the first
    time)."""
    from lamina.core.keyindex import KeyIndex
    from lamina.meta.keyindex import KeyIndexes
    from lamina.meta.keyindex.replay import KeyState

    rows = 200_000 if quick else 1_000_000
    base, batch = base_and_batch(rows, rows // 20, rows // 20, seed=5)
    one = batch.slice(0, 1)
    figs: list[dict[str, Any]] = []
    details: dict[str, list[dict[str, Any]]] = {}
    with scratch_dir("upsert-catchup") as root, lamina.connect(warehouse=root) as cat:
        t = new_upsert_table(cat, "t", base)
        t.upsert(batch)  # 5% of each day's records superseded: compactions rewrite them
        t.set_properties(**{"compaction.max_superseded_percent": 1})
        chunks = sorted({s.interval for s in t.segments()})
        keys, tid = t._handle.ctx.keys, t._handle.record.id
        for r in range(2):

            def delete(r: int = r) -> Any:
                return t.delete_segments(
                    [next(s.id for s in t.segments() if s.interval == chunks[r])]
                )

            kinds: dict[str, Callable[[], Any]] = {
                "an overwrite of one day": lambda r=r: t.overwrite(  # type: ignore[misc]
                    t.to_arrow(interval=chunks[10 + r]), chunks[10 + r]
                ),
                "a minor compaction of one day": lambda r=r: t.compact(  # type: ignore[misc]
                    interval=chunks[20 + r]
                ),
                "a deleted segment": delete,
            }
            for what, write in kinds.items():
                t.upsert(one)  # this process's index is current
                st = keys._states[tid]
                before = KeyState(
                    KeyIndex.from_arrow(st.index.to_arrow()), st.seq, list(st.locations),
                    dict(st.codes),
                )  # fmt: skip
                if write() is None:
                    raise RuntimeError(f"{what}: nothing was written")
                keys._states[tid] = before  # as if another process made the commit
                replay_s, phases = phases_of(lambda: t.upsert(one))
                keys.forget(tid)
                saved, prefetch = KeyIndexes._saved, KeyIndexes.prefetch
                KeyIndexes._saved = lambda *args, **kwargs: None  # type: ignore[method-assign]
                KeyIndexes.prefetch = lambda *args, **kwargs: None  # type: ignore[method-assign]
                try:  # from the files, as before: not from a saved snapshot
                    rebuild_s, _ = timed(lambda: t.upsert(one))
                finally:
                    KeyIndexes._saved, KeyIndexes.prefetch = saved, prefetch  # type: ignore[method-assign]
                details.setdefault(what, []).append(
                    {"replay_s": replay_s, "rebuild_s": rebuild_s, "phases": phases}
                )
        for what, got in details.items():
            replay_s, rebuild_s = got[-1]["replay_s"], got[-1]["rebuild_s"]
            figs.append(
                figure(
                    f"1-record upsert after {what} elsewhere: index replays it",
                    replay_s,
                    "s",
                    note=f"rebuilt from every file: {rebuild_s:.3f} s ({rebuild_s / replay_s:.1f}x "
                    f"longer), {rows // 1000}k rows; round 1: {got[0]['replay_s']:.3f} s",
                )
            )
    drop_indexes(cat)
    return figs, details


# -- figure 4: key index at scale -------------------------------------------------------


def more_batches(existing: int, first_new: int, count: int, seed: int) -> list[pa.Table]:
    """Stream batches (as :func:`stream`) into a table of ids ``0..existing-1``: updates of
    those, new ids from ``first_new``; stamped after everything else written."""
    rng = np.random.default_rng(seed)
    n_upd = int(STREAM_BATCH * STREAM_UPDATES)
    n_new = STREAM_BATCH - n_upd
    out = []
    for b in range(count):
        new = np.arange(first_new + b * n_new, first_new + (b + 1) * n_new)
        ids = np.concatenate([rng.choice(existing, n_upd, replace=False), new])
        start = START_US + (DAYS + 2) * DAY_US + b * 10 * MINUTE_US
        out.append(records(rng.permutation(ids), start, 10 * MINUTE_US, seed + b))
    return out


def index_at_scale(quick: bool) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    n = 1_000_000 if quick else 10_000_000
    step = 1_000_000
    restarts = 2 if quick else 3
    with scratch_dir("upsert-scale") as root:
        wh = os.path.join(root, "wh")
        with lamina.connect(warehouse=wh) as cat:
            t = cat.create_table(
                "big", SCHEMA, time_column="ts", primary_key=["id"], segment_granularity="DAY"
            )
            load_s = 0.0
            for i in range(0, n, step):
                part = records(np.arange(i, min(n, i + step)), START_US, DAYS * DAY_US, i)
                load_s += timed(functools.partial(t.upsert, part))[0]
            small = records(  # 3k updates, 7k new keys, the day after
                np.concatenate([np.arange(0, n, n // 3000)[:3000], np.arange(n, n + 7000)]),
                START_US + DAYS * DAY_US,
                DAY_US,
                12,
            )
            warm = [timed(lambda: t.upsert(small))[0] for _ in range(3)]
            n_keys, nbytes = index_stats(t)
            extra = more_batches(n, 2 * n, 20 if quick else 60, seed=99)
            PHASES.clear()
            ingest = [timed(functools.partial(t.upsert, b))[0] for b in extra]
            saves = PHASES.get("  save the index snapshot (when due)", [0.0, 0])[0]
            segments = len(t.segments())
        drop_indexes(cat)
        fresh: dict[str, list[dict[str, Any]]] = {"fresh": [], "rebuild": []}
        for r in range(2 * restarts):
            mode = ("fresh", "rebuild")[r % 2]
            nxt = records(np.arange(n + 10_000 * (r + 1), n + 10_000 * (r + 2)),
                          START_US + (DAYS + 1) * DAY_US, DAY_US, 20 + r)  # fmt: skip
            fresh[mode].append(fresh_upsert(wh, "big", nxt, root, rebuild=mode == "rebuild"))
        with lamina.connect(warehouse=wh) as cat:
            count = cat.load_table("big").count()
        new_keys = 7000 + 10_000 * 2 * restarts + sum(b.num_rows for b in extra) * 7 // 10
        if count != n + new_keys:
            raise AssertionError(f"key index table: {count:,} rows visible")
    drop_indexes(cat)
    figs = [
        figure(
            f"key index memory per key, {n_keys:,} keys",
            nbytes / n_keys,
            "B",
            "<= 40",
            note=f"KeyIndex.nbytes {nbytes / 2**20:.0f} MiB in the writing process",
        )
    ]
    rate = len(extra) * STREAM_BATCH / sum(ingest)
    figs.append(
        figure(
            f"sustained upsert into the {n // 1_000_000}M-key table",
            rate,
            "rows/s",
            ">= 100000",
            note=f"{len(extra)} batches as in the sustained figure; per batch median "
            f"{1000 * median(ingest):.0f} ms, max {1000 * max(ingest):.0f} ms; index snapshot "
            f"saves {saves:.2f} s of {sum(ingest):.2f} s",
        )
    )
    for mode, label in (("fresh", "saved index snapshot"), ("rebuild", "rebuilt from data")):
        ready = [f["seconds"] for f in fresh[mode]]
        index = [f["phases"].get(STATE, [0.0])[0] for f in fresh[mode]]
        opened = [f["open_s"] for f in fresh[mode]]
        figs += [
            figure(
                f"restart to ready, {label}: first upsert (10k)",
                median(ready),
                "s",
                note=f"{spread(ready)}; the publish waited {median(index):.2f} s of it for "
                f"the index ({INDEX_HOW[mode]}; {segments} files); +{median(opened):.2f} s to "
                "connect and load",
            ),
            figure(
                f"  restart ({label}) / warm upsert of 10k",
                median(ready) / median(warm),
                "x",
                note=f"warm {1000 * median(warm):.0f} ms ({spread(warm)})",
            ),
        ]
    details = {
        "keys": n_keys,
        "nbytes": nbytes,
        "load_s": load_s,
        "warm_10k_s": warm,
        "ingest_s": ingest,
        "ingest_snapshot_saves_s": saves,
        "fresh": fresh,
        "segments": segments,
    }
    return figs, details


# -- main -------------------------------------------------------------------------------


def print_phases(title: str, runs: dict[str, dict[str, list[float]]]) -> None:
    seen = {k for p in runs.values() for k in p}
    labels = [k for k in dict.fromkeys(LABELS) if k in seen]
    rows = [
        [label, *(f"{1000 * p[label][0]:.1f}" if label in p else "-" for p in runs.values())]
        for label in labels
    ]
    print_table(title, ["phase (inclusive)", *(f"{k} ms" for k in runs)], rows)


def median_phases(samples: list[dict[str, list[float]]]) -> dict[str, list[float]]:
    labels = dict.fromkeys(k for s in samples for k in s)
    return {k: [median([s.get(k, [0.0, 0])[0] for s in samples]), 0] for k in labels}


def main(quick: bool = False) -> dict[str, Any]:
    """Upserts: lamina vs deltalake merge and DuckLake MERGE, ingestion, reads, key index."""
    import deltalake

    instrument()
    figures: list[dict[str, Any]] = []
    details: dict[str, Any] = {}
    sections = (
        ("merge", upsert_vs_merge, "Upsert 100k into 1M vs MERGE"),
        ("sustained", sustained, "Sustained upsert ingestion"),
        ("queries", query_overhead, "Query overhead of deletion vectors"),
        ("catch_up", catch_up, "Key index catching up with other processes' commits"),
        ("keyindex", index_at_scale, "Key index at scale"),
    )
    for key, fn, title in sections:
        print(f"{title} ...", flush=True)
        figs, det = fn(quick)
        figures += figs
        details[key] = det
    runs = details["merge"]["runs"]["lamina"]
    print_phases(
        "lamina phases, upsert 100k into 1M (median) and sustained (mean per 10k batch)",
        {
            "warm": median_phases([r["warm_phases"] for r in runs]),
            "fresh": median_phases([r["fresh_phases"] for r in runs]),
            "rebuild": median_phases([r["rebuild_phases"] for r in runs]),
            "after load": median_phases([r["after_load_phases"] for r in runs]),
            "sustained": details["sustained"]["phases_per_batch"],
        },
    )
    print_figures("Upserts (issue 9 §6)", figures)
    return result(
        "upsert",
        {"quick": quick, "deltalake": deltalake.__version__, "cpus": os.cpu_count()},
        figures,
        details,
    )


if __name__ == "__main__":
    cli(main, "upsert")
