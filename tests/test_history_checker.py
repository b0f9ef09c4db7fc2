"""A history checker: writer processes doing random appends, overwrites, deletes and
transactions on one table, readers alongside, writers killed with SIGKILL at random
points; afterwards the history must be one that some serial order explains.

Checked, on SQLite and PostgreSQL:
* every snapshot a reader saw equals the snapshot of a completed commit (a prefix of
  the completed commits in seq order): never a mix, never a partial commit;
* every acknowledged write completed, and its rows were visible right after it;
* no row of a commit that did not complete is ever visible;
* after ``clean_failed_writes()`` and retention no file is orphaned.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import random
import signal
import time
from pathlib import Path

import lamina
from tests.helpers import SCHEMA, events

WRITERS = 6  # + 2 readers: 8 processes
OPS = 40
DAYS = 3


def _writer(catalog: str, wh: str, w: int, log: str) -> None:
    """Random writes; every acknowledged one is logged (commit id, ks) before the next."""
    rng = random.Random(w)
    cat = lamina.connect(catalog=catalog, warehouse=wh, heartbeat_s=0.2, stale_after_s=2)
    t = cat.load_table("h")
    with open(log, "a") as out:
        for op in range(OPS):
            base = (w * 1000 + op) * 100  # row ids of this write: base .. base + 99
            data = events(days=1, per_day=3, seed=base, start=f"2024-01-0{rng.randint(1, DAYS)}")
            data = data.set_column(1, "k", lamina_ks(base, data.num_rows))
            kind = rng.choice(["append", "append", "overwrite", "delete", "tx"])
            try:
                if kind == "append":
                    c = t.append(data)
                elif kind == "overwrite":
                    c = t.overwrite(data)
                elif kind == "delete":
                    segs = t.segments()
                    if not segs:
                        continue
                    c = t.delete_segments([rng.choice(segs).id])
                else:
                    with t.transaction() as tx:
                        tx.append(data)
                    c = tx.commit_result
            except lamina.LaminaError:
                continue  # conflicts and races: refused writes leave nothing
            out.write(
                json.dumps({"commit": c.id, "kind": kind, "ks": data["k"].to_pylist()}) + "\n"
            )
            out.flush()


def _lines(path: str) -> int:
    try:
        return len(Path(path).read_text().splitlines())
    except FileNotFoundError:
        return 0


def lamina_ks(base: int, n: int):  # type: ignore[no-untyped-def]
    import pyarrow as pa

    return pa.array(range(base, base + n), pa.int64())


def _reader(catalog: str, wh: str, log: str, stop: str) -> None:
    """Record (seq, sorted ks) of latest snapshots until told to stop."""
    cat = lamina.connect(catalog=catalog, warehouse=wh)
    t = cat.load_table("h")
    with open(log, "w") as out:
        while not os.path.exists(stop):
            plan = t.scan()
            try:
                from lamina.io.reader import read_arrow

                ks = sorted(read_arrow(plan, cat.warehouse, ["k"])["k"].to_pylist())
            except lamina.LaminaError:
                continue  # files of a snapshot retention removed: planned again next time
            out.write(json.dumps({"seq": plan.seq, "ks": ks}) + "\n")
            out.flush()
            time.sleep(0.01)


def test_random_histories_with_killed_writers(catalog_url: str, tmp_path: Path) -> None:
    wh = str(tmp_path / "wh")
    with lamina.connect(catalog=catalog_url, warehouse=wh) as cat:
        t = cat.create_table("h", SCHEMA, time_column="ts", segment_granularity="DAY")
        t.append(events(days=DAYS, per_day=2, seed=999).set_column(1, "k", lamina_ks(10**7, 6)))
    ctx = mp.get_context("spawn")
    logs = [str(tmp_path / f"w{w}.jsonl") for w in range(WRITERS)]
    stop = str(tmp_path / "stop")
    readers = [
        ctx.Process(target=_reader, args=(catalog_url, wh, str(tmp_path / f"r{r}.jsonl"), stop))
        for r in range(2)
    ]
    writers = [
        ctx.Process(target=_writer, args=(catalog_url, wh, w, logs[w])) for w in range(WRITERS)
    ]
    for p in readers + writers:
        p.start()
    rng = random.Random(1)
    victims = rng.sample(range(WRITERS), 2)
    for w in victims:  # kill each once it acknowledged a few writes: mid-run
        deadline = time.monotonic() + 120
        while _lines(logs[w]) < 3 + 2 * w and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(rng.uniform(0, 0.03))
        os.kill(writers[w].pid, signal.SIGKILL)
    for p in writers:
        p.join(300)
    Path(stop).touch()
    for p in readers:
        p.join(60)
    assert all(p.exitcode == 0 for w, p in enumerate(writers) if w not in victims)
    assert all(writers[w].exitcode == -signal.SIGKILL for w in victims), "killed mid-run"

    with lamina.connect(catalog=catalog_url, warehouse=wh, stale_after_s=2) as cat:
        t = cat.load_table("h")
        history = t.history()
        completed = {c.id: c for c in history if c.state == "COMPLETED"}
        by_seq = {c.seq: c for c in completed.values()}
        assert sorted(by_seq) == list(range(1, len(by_seq) + 1))  # seqs without holes
        assert len(by_seq) > 2 * WRITERS

        def ks_at(seq: int) -> list[int]:
            got = t.to_arrow(as_of=by_seq[seq].id, columns=["k"])["k"].to_pylist()
            return sorted(got)

        snapshots = {seq: ks_at(seq) for seq in by_seq}
        # readers only ever saw whole snapshots of completed commits
        seen = 0
        for r in range(2):
            for line in Path(tmp_path / f"r{r}.jsonl").read_text().splitlines():
                rec = json.loads(line)
                assert rec["ks"] == snapshots[rec["seq"]], f"reader saw a mix at seq {rec['seq']}"
                seen += 1
        assert seen > 0
        # acknowledged writes completed; their rows were visible right after them
        acked: set[int] = set()
        for log in logs:
            if not os.path.exists(log):
                continue
            for line in Path(log).read_text().splitlines():
                rec = json.loads(line)
                c = completed[rec["commit"]]
                acked.add(c.id)
                if rec["kind"] in ("append", "overwrite", "tx"):
                    assert set(rec["ks"]) <= set(snapshots[c.seq]), rec
        # each commit made visible the rows of one write only (its own): rows of a
        # commit that did not complete never showed up with it or anywhere else
        logged = {}
        for log in logs:
            if os.path.exists(log):
                for line in Path(log).read_text().splitlines():
                    rec = json.loads(line)
                    logged[rec["commit"]] = rec
        for seq in sorted(by_seq):
            new = set(snapshots[seq]) - set(snapshots.get(seq - 1, []))
            blocks = {k // 100 for k in new}
            assert len(blocks) <= 1, f"seq {seq} showed rows of several writes: {blocks}"
            rec = logged.get(by_seq[seq].id)
            if rec is not None and rec["ks"] and blocks:
                assert blocks == {rec["ks"][0] // 100}
        # the change feed explains the latest snapshot from the empty table
        feed = t.read_changes(0, columns=["k"])
        net: dict[int, int] = {}
        for k, ch in zip(feed["k"].to_pylist(), feed["_change"].to_pylist(), strict=True):
            net[k] = net.get(k, 0) + (1 if ch == "insert" else -1)
        assert sorted(k for k, n in net.items() for _ in range(n)) == snapshots[max(by_seq)]
        # nothing open and nothing orphaned once failed writes and retention ran
        cat.clean_failed_writes()
        cat.run_retention()
        assert {c.state for c in t.history()} <= {"COMPLETED", "ABORTED"}
        assert cat.find_orphans() == []
