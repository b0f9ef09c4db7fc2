"""Primary-key index of upsert tables (lamina.core.keyindex, lamina.io.keyindex).

10,000,000 keys (1,000,000 with ``--quick``): key hashing speed (int64 and string keys),
bulk build time, memory per key, the median time of one upsert batch of 10,000 keys
(30% already in the index: a lookup, then a put) over many batches (the LSM merges they
trigger included in the mean and the max), saving and loading the index (restart to
the first answered lookup), and a Python dict of the same entries as the baseline for
memory and batch time.

    .venv/bin/python bench/bench_keyindex.py [--quick] [--json PATH]
"""

from __future__ import annotations

import gc
import os
import sys
import time
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import cli, figure, median, print_figures, result, scratch_dir, timed  # noqa: E402

from lamina.core.keyhash import key_hashes  # noqa: E402
from lamina.core.keyindex import KeyIndex  # noqa: E402
from lamina.io.keyindex import read_index, write_index  # noqa: E402

BATCH = 10_000
EXISTING = 0.3


def rss() -> int:
    """Resident bytes of this process now."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def hashing(n: int) -> dict[str, float]:
    ints = pa.table({"k": np.arange(n, dtype=np.int64) * 7_919})
    strs = pa.table({"k": pa.array([f"user-{i:012d}" for i in range(n)])})
    both = pa.table({"a": strs.column("k"), "b": ints.column("k")})
    out = {}
    for label, t, cols in (
        ("int64", ints, ["k"]),
        ("string", strs, ["k"]),
        ("string+int64", both, ["a", "b"]),
    ):
        out[f"{label}_all_s"] = min(
            timed(lambda t=t, c=cols: key_hashes(t, c))[0] for _ in range(3)
        )
        small = t.slice(0, BATCH)
        out[f"{label}_10k_ms"] = 1000 * median(
            [timed(lambda s=small, c=cols: key_hashes(s, c))[0] for _ in range(20)]
        )
    return out


def batches(
    keys: np.ndarray, n_batches: int, rng: np.random.Generator
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Batches of BATCH keys, EXISTING of them already in ``keys``, the rest new (fresh
    keys hashed from integers beyond the table's), each with its rows."""
    n = len(keys)
    old = int(BATCH * EXISTING)
    fresh = key_hashes(
        pa.table({"k": np.arange(n, n + n_batches * (BATCH - old), dtype=np.int64)}), ["k"]
    )
    out = []
    for b in range(n_batches):
        ks = np.concatenate(
            [
                keys[np.unique(rng.integers(0, n, old))],
                fresh[b * (BATCH - old) : (b + 1) * (BATCH - old)],
            ]
        )
        out.append((ks, np.arange(len(ks), dtype=np.uint32)))
    return out


def index_batches(index: KeyIndex, work: list[tuple[np.ndarray, np.ndarray]]) -> list[float]:
    times = []
    for b, (ks, rows) in enumerate(work):
        t0 = time.perf_counter()
        found = index.lookup(ks)
        cmp = np.where(found.found, found.cmp + 1, 0)
        index.put(ks, 1_000 + b, rows, cmp)
        times.append(time.perf_counter() - t0)
    return times


def dict_baseline(
    keys: np.ndarray, work: list[tuple[np.ndarray, np.ndarray]]
) -> tuple[float, float, list[float]]:
    """Build a dict {128-bit int: (segment, row, cmp, tomb)}; bytes per key (RSS growth),
    build seconds, and the batch times of the same upserts."""
    gc.collect()
    before = rss()
    t0 = time.perf_counter()
    ints = ((keys["hi"].astype(object) << 64) | keys["lo"].astype(object)).tolist()
    d = {k: (0, r, r, False) for r, k in enumerate(ints)}
    build = time.perf_counter() - t0
    del ints
    gc.collect()
    per_key = (rss() - before) / len(keys)
    times = []
    for b, (ks, rows) in enumerate(work):
        t0 = time.perf_counter()
        ids = ((ks["hi"].astype(object) << 64) | ks["lo"].astype(object)).tolist()
        seg = 1_000 + b
        for k, r in zip(ids, rows.tolist(), strict=True):
            prev = d.get(k)
            d[k] = (seg, r, 0 if prev is None else prev[2] + 1, False)
        times.append(time.perf_counter() - t0)
    del d
    gc.collect()
    return per_key, build, times


def main(quick: bool = False) -> dict[str, Any]:
    """Key index: hashing, build, memory, 10k upsert batches, save/load vs a dict."""
    n = 1_000_000 if quick else 10_000_000
    n_batches = 100 if quick else 300
    rng = np.random.default_rng(42)
    hashes = hashing(n)

    t_hash, keys = timed(lambda: key_hashes(pa.table({"k": np.arange(n, dtype=np.int64)}), ["k"]))
    gc.collect()
    before = rss()
    index = KeyIndex(np.int64)
    t0 = time.perf_counter()
    index.put(keys, 0, np.arange(n, dtype=np.uint32), np.arange(n, dtype=np.int64))
    build_s = time.perf_counter() - t0
    index.lookup(keys[:10])  # builds the directory
    gc.collect()
    mem_per_key = index.nbytes / len(index)
    rss_per_key = (rss() - before) / len(index)

    work = batches(keys, n_batches, rng)
    times = index_batches(index, work)
    after_nbytes = index.nbytes / len(index)

    with scratch_dir("keyindex") as root:
        path = os.path.join(root, "keys.parquet")
        t0 = time.perf_counter()
        size = write_index(index, path)
        save_s = time.perf_counter() - t0
        loads = []
        for _ in range(3):
            gc.collect()
            t0 = time.perf_counter()
            back = read_index(path)
            back.lookup(work[0][0])  # ready: the first batch answered
            loads.append(time.perf_counter() - t0)
            del back
    entries = len(index)
    del index
    gc.collect()

    d_per_key, d_build, d_times = dict_baseline(keys, work)
    med, d_med = median(times), median(d_times)
    figures = [
        figure("hash 10k int64 keys", hashes["int64_10k_ms"], "ms", "<= 5"),
        figure("hash 10k string keys", hashes["string_10k_ms"], "ms", "<= 5", note="18 chars"),
        figure(
            f"hash {n:,} int64 keys",
            hashes["int64_all_s"],
            "s",
            "< 1",
            note=f"string {hashes['string_all_s']:.2f} s, "
            f"string+int64 {hashes['string+int64_all_s']:.2f} s",
        ),
        figure(f"bulk build, {n:,} keys (one put)", build_s, "s", note=f"hashing {t_hash:.2f} s"),
        figure(
            "memory per key",
            mem_per_key,
            "B",
            "<= 40",
            note=f"arrays + directory; RSS growth {rss_per_key:.1f} B/key; "
            f"{after_nbytes:.1f} B/key after the batches",
        ),
        figure(
            "memory per key: index / dict",
            mem_per_key / d_per_key,
            "x",
            "<= 0.5",
            note=f"dict {d_per_key:.0f} B/key (RSS growth), built in {d_build:.1f} s",
        ),
        figure(
            "10k upsert batch (lookup + put), 30% existing: median",
            med * 1000,
            "ms",
            "<= 10",
            note=f"mean {1000 * float(np.mean(times)):.1f} ms, p99 "
            f"{1000 * float(np.quantile(times, 0.99)):.1f} ms, max {1000 * max(times):.0f} ms "
            f"(merges), {n_batches} batches",
        ),
        figure(
            "10k upsert batch: index / dict (median)",
            med / d_med,
            "x",
            "<= 1.0",
            note=f"dict {d_med * 1000:.1f} ms",
        ),
        figure(
            "disk per key",
            size / entries,
            "B",
            note=f"{size / 2**20:.0f} MiB, Arrow IPC, uncompressed",
        ),
        figure("save", save_s, "s", note="write_index: to_arrow, checksums, Arrow IPC file, fsync"),
        figure(
            "load: restart to first lookup (median of 3)",
            median(loads),
            "s",
            note="read_index (checksums verified) + a 10k lookup",
        ),
    ]
    print_figures(f"Key index: {n:,} keys", figures)
    return result(
        "keyindex",
        {"keys": n, "batch": BATCH, "existing": EXISTING, "batches": n_batches},
        figures,
        {
            "hashing": hashes,
            "batch_ms": [1000 * t for t in times],
            "dict_batch_ms": [1000 * t for t in d_times],
            "load_s": loads,
            "entries": entries,
        },
    )


if __name__ == "__main__":
    cli(main, "keyindex")
