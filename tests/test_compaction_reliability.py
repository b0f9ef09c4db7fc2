"""Compaction under concurrency and failure (issue 8 §7), on SQLite and PostgreSQL.

1. Readers run throughout minor (and two major) compactions racing four appender
   processes: every snapshot a reader saw holds exactly the rows of the appends
   completed at or before it, each once; the final table holds every acknowledged row
   once, in fewer segments than were appended.
2. A compaction SIGKILLed at chosen steps and at random moments: the table is the old
   layout or the fully compacted one (all runs of the commit or none), with the same
   rows; the dead write's files, commit and locks are cleaned, by
   ``clean_failed_writes()`` or lazily by the next writer, and the next compaction
   succeeds.
3. A minor compaction racing, from another process, an overwrite of one of its chunks
   or a delete of one of its inputs (published before the compaction, or after it): the
   overwrite always wins, the compaction publishing first or refused; of a delete and
   the compaction exactly one wins. A refused compaction raises CommitConflictError and
   leaves nothing visible and no file behind.

Plus a regression test for a bug found here: two runs in one chunk could not be
compacted in one commit (both outputs took the same partition id).
"""

from __future__ import annotations

import datetime as dt
import json
import multiprocessing as mp
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from bisect import bisect_right
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lamina
from lamina import failpoints
from lamina.operations import compaction
from tests.helpers import SCHEMA, events

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
DAY_US = 86_400_000_000
JAN1_US = int(dt.datetime(2024, 1, 1, tzinfo=dt.UTC).timestamp()) * 1_000_000
CHILD_TIMEOUT_S = 60


def _rows(k0: int, n: int, day: int, per_day: int | None = None) -> pa.Table:
    """Rows with keys ``k0``..``k0 + n - 1`` on day ``day`` (1: 2024-01-01) — or, with
    ``per_day``, spread over consecutive days from ``day``, ``per_day`` rows each.
    Built without pandas, so a child that never imports it starts sooner."""
    rng = random.Random(k0)
    per = per_day or n
    ts = [
        JAN1_US + (day - 1 + i // per) * DAY_US + rng.randrange(DAY_US) for i in range(n)
    ]  # fmt: skip
    return pa.table(
        {
            "ts": pa.array(ts, pa.int64()),
            "k": pa.array(range(k0, k0 + n), pa.int64()),
            "v": pa.array([rng.random() for _ in range(n)], pa.float64()),
            "s": pa.array([f"row{k}" for k in range(k0, k0 + n)]),
        }
    ).cast(SCHEMA)


def _tuples(data: pa.Table) -> list[tuple[Any, ...]]:
    return list(zip(*(data[c].to_pylist() for c in ("ts", "k", "v", "s")), strict=True))


def _all_rows(t: lamina.Table, as_of: int | None = None) -> list[tuple[Any, ...]]:
    keys = [(c, "ascending") for c in ("k", "ts", "v", "s")]  # k repeats across appends
    return _tuples(t.to_arrow(as_of=as_of).sort_by(keys))


def _open_commits(t: lamina.Table) -> list[lamina.Commit]:
    return [c for c in t.history() if c.state not in ("COMPLETED", "ABORTED")]


def _env() -> dict[str, str]:
    """Children import lamina from this worktree, and ``tests`` from it."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(ROOT)])}


def _from_here(path: str) -> bool:
    return Path(path).resolve().is_relative_to(SRC)


class _Log:
    """JSON lines, flushed at once (a process may be stopped at any point)."""

    def __init__(self, path: str) -> None:
        self.out = open(path, "a")  # noqa: SIM115 - the process ends with it

    def put(self, **rec: Any) -> None:
        self.out.write(json.dumps(rec) + "\n")
        self.out.flush()


def _records(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # a line being written
            continue
    return out


# -- 1. readers throughout compactions racing appenders -----------------------------------

APPENDERS = 4
READERS = 2
RACE_S = 8.0  # the appenders append at least this long (after every process is ready)...
MIN_MINORS = 5  # ...and until this many minor compactions and both majors published...
MAX_RACE_S = 75.0  # ...or this long at most (CI runs it beside Spark on 2 cores)
MAX_APPENDS = 1000  # each, at most
RACE_DAYS = 3  # every append lands in one of these DAY chunks
MAJOR_AT = (0.3, 0.65)  # major compactions start at these fractions of RACE_S


def _wait_go(go: str) -> None:
    while not os.path.exists(go):
        time.sleep(0.005)


def _appender(url: str, wh: str, w: int, log_path: str, go: str, stop: str) -> None:
    """Append 1-5 rows with unique keys into one of the race days, until told to stop;
    log each append's keys before it starts and its commit once acknowledged."""
    import lamina.io.writer  # noqa: F401 - the write path, imported before the race
    import lamina.write  # noqa: F401

    cat = lamina.connect(catalog=url, warehouse=wh, writer_wait_s=60)
    t = cat.load_table("ev")
    log = _Log(log_path)
    log.put(ready=lamina.__file__)
    rng = random.Random(w)
    _wait_go(go)
    for i in range(MAX_APPENDS):
        if os.path.exists(stop):
            break
        tok, k0, n, day = (
            f"{w}.{i}",
            (w * 100_000 + i) * 10,
            rng.randint(1, 5),
            rng.randint(1, RACE_DAYS),
        )
        log.put(op=tok, k0=k0, n=n, day=day)
        try:
            c = t.append(_rows(k0, n, day), metadata={"op": tok})
        except lamina.LaminaError as exc:
            log.put(op=tok, refused=type(exc).__name__, msg=str(exc))
            continue
        log.put(op=tok, commit=c.id)
        time.sleep(rng.uniform(0, 0.01))
    cat.close()


def _compactor(url: str, wh: str, log_path: str, go: str, stop: str) -> None:
    """Minor compactions in a loop until told to stop; two major ones on the way (the
    second sorted and only of the race days 2-3), each tried until it has rows to
    rewrite."""
    cat = lamina.connect(catalog=url, warehouse=wh, writer_wait_s=60)
    t = cat.load_table("ev")
    log = _Log(log_path)
    log.put(ready=lamina.__file__)
    _wait_go(go)
    start = time.monotonic()
    majors = list(MAJOR_AT)
    while not os.path.exists(stop):
        kwargs: dict[str, Any] = {}
        major = bool(majors) and time.monotonic() - start >= majors[0] * RACE_S
        if major:
            kwargs = {"mode": "major"}
            if len(majors) == 1:
                kwargs.update(interval=("2024-01-02", "2024-01-04"), sort_by=["k"])
        mode, t0 = kwargs.get("mode", "minor"), time.monotonic()
        try:
            c = t.compact(**kwargs)
        except lamina.LaminaError as exc:
            log.put(mode=mode, refused=type(exc).__name__, msg=str(exc))
            continue
        log.put(mode=mode, commit=None if c is None else c.id, s=time.monotonic() - t0)
        if major and c is not None:
            majors.pop(0)
        time.sleep(0.05)
    cat.close()


def _reader(url: str, wh: str, log_path: str, go: str, stop: str) -> None:
    """Read the keys of the latest snapshot, in turn: through a scan plan (whose seq is
    the snapshot's), with ``to_arrow`` and with ``cat.sql`` (between two readings of the
    table's last seq: the snapshot is one of that range)."""
    from lamina.io.reader import read_arrow
    from lamina.meta.tables import latest_seqs

    cat = lamina.connect(catalog=url, warehouse=wh)
    t = cat.load_table("ev")
    log = _Log(log_path)
    log.put(ready=lamina.__file__)

    def last_seq() -> int:
        return latest_seqs(cat.context.db, ["ev"])["ev"][1]

    _wait_go(go)
    i = 0
    while not os.path.exists(stop):
        how = ("scan", "to_arrow", "sql")[i % 3]
        i += 1
        try:
            if how == "scan":
                plan = t.scan()
                ks = read_arrow(plan, cat.warehouse, ["k"])["k"].to_pylist()
                log.put(how=how, lo=plan.seq, hi=plan.seq, ks=ks)
            else:
                lo = last_seq()
                if how == "to_arrow":
                    ks = t.to_arrow(columns=["k"])["k"].to_pylist()
                else:
                    ks = cat.sql("select k from ev")["k"].to_pylist()
                log.put(how=how, lo=lo, hi=last_seq(), ks=ks)
        except lamina.LaminaError as exc:
            log.put(how=how, error=type(exc).__name__, msg=str(exc))
        time.sleep(0.01)
    cat.close()


class _Model:
    """Which keys each snapshot seq holds: the keys of the append commits completed at
    or before it (compactions never change rows)."""

    def __init__(self, by_seq: list[lamina.Commit], intents: dict[str, dict[str, Any]]):
        self.appeared: dict[int, int] = {}  # key -> seq of the append that added it
        for c in by_seq:
            assert c.seq is not None
            if c.action != "APPEND":
                assert c.action in ("COMPACT", "OVERWRITE"), c
                assert c.metadata.get("compaction") in ("minor", "major"), c
                continue
            rec = intents[c.metadata["op"]]
            for k in range(rec["k0"], rec["k0"] + rec["n"]):
                assert k not in self.appeared, f"key {k} appended twice"
                self.appeared[k] = c.seq
        self.seqs = sorted(self.appeared.values())

    def mismatch(self, ks: list[int], seq: int) -> str | None:
        """Why ``ks`` is not exactly the keys of snapshot ``seq`` (None: it is)."""
        if len(ks) != len(set(ks)):
            dup = sorted(k for k in set(ks) if ks.count(k) > 1)[:5]
            return f"keys read twice: {dup}"
        extra = sorted(k for k in ks if self.appeared.get(k, seq + 1) > seq)
        missing = len(self.seqs[: bisect_right(self.seqs, seq)]) - (len(ks) - len(extra))
        if extra or missing:
            return f"{len(extra)} keys not yet appended (e.g. {extra[:5]}), {missing} missing"
        return None

    def matches(self, ks: list[int], lo: int, hi: int) -> bool:
        return any(self.mismatch(ks, s) is None for s in range(lo, hi + 1))


def test_readers_see_every_acknowledged_row_once_while_compactions_race_appenders(
    catalog_url: str, tmp_path: Path
) -> None:
    wh = str(tmp_path / "wh")
    with lamina.connect(catalog=catalog_url, warehouse=wh) as cat:
        cat.create_table("ev", SCHEMA, time_column="ts", segment_granularity="DAY")
    go, stop = str(tmp_path / "go"), str(tmp_path / "stop")
    ctx = mp.get_context("spawn")
    logs = {f"a{w}": tmp_path / f"a{w}.jsonl" for w in range(APPENDERS)}
    procs = {
        f"a{w}": ctx.Process(
            target=_appender, args=(catalog_url, wh, w, str(logs[f"a{w}"]), go, stop)
        )
        for w in range(APPENDERS)
    }
    logs["c"] = tmp_path / "c.jsonl"
    procs["c"] = ctx.Process(target=_compactor, args=(catalog_url, wh, str(logs["c"]), go, stop))
    for r in range(READERS):
        logs[f"r{r}"] = tmp_path / f"r{r}.jsonl"
        procs[f"r{r}"] = ctx.Process(
            target=_reader, args=(catalog_url, wh, str(logs[f"r{r}"]), go, stop)
        )
    for p in procs.values():
        p.start()
    try:
        deadline = time.monotonic() + 60
        while not all(_records(path) for path in logs.values()):  # imported and connected
            assert all(p.is_alive() for p in procs.values()), "a child died before starting"
            assert time.monotonic() < deadline, "children never got ready"
            time.sleep(0.05)
        Path(go).touch()
        start = time.monotonic()
        while time.monotonic() - start < MAX_RACE_S:
            time.sleep(0.2)
            done = Counter(r["mode"] for r in _records(logs["c"])[1:] if r.get("commit"))
            enough = done["minor"] >= MIN_MINORS and done["major"] == len(MAJOR_AT)
            if enough and time.monotonic() - start >= RACE_S:
                break
        Path(stop).touch()
        for p in procs.values():
            p.join(CHILD_TIMEOUT_S)
    finally:
        for p in procs.values():
            if p.is_alive():
                p.kill()
                p.join(10)
    assert {n: p.exitcode for n, p in procs.items()} == {n: 0 for n in procs}
    recs = {n: _records(path) for n, path in logs.items()}
    for n, rs in recs.items():  # every child ran this worktree's lamina
        assert _from_here(rs[0]["ready"]), (n, rs[0])

    intents = {r["op"]: r for n in recs if n[0] == "a" for r in recs[n] if "k0" in r}
    acks = {r["op"]: r["commit"] for n in recs if n[0] == "a" for r in recs[n] if "commit" in r}
    refused = [r for n in recs if n[0] == "a" for r in recs[n] if "refused" in r]
    assert not refused, f"appends never conflict with compactions: {refused[:3]}"
    compactions = recs["c"][1:]
    assert not [r for r in compactions if "refused" in r], compactions

    with lamina.connect(catalog=catalog_url, warehouse=wh) as cat:
        t = cat.load_table("ev")
        hist = t.history()
        done = {c.id: c for c in hist if c.state == "COMPLETED"}
        by_seq = sorted(done.values(), key=lambda c: c.seq or 0)
        assert [c.seq for c in by_seq] == list(range(1, len(by_seq) + 1))
        assert not _open_commits(t) and t.locks() == []
        # every acknowledged append completed as the commit it was told, and every
        # completed append was acknowledged (nobody was killed)
        appends = [c for c in by_seq if c.action == "APPEND"]
        assert {c.metadata["op"]: c.id for c in appends} == acks
        assert len(acks) == len(intents) > 100
        model = _Model(by_seq, intents)

        # compactions happened, and while appends landed
        minors = [c for c in by_seq if c.action == "COMPACT"]
        majors = [c for c in by_seq if c.metadata.get("compaction") == "major"]
        logged = [r["commit"] for r in compactions if r.get("commit") is not None]
        assert sorted(c.id for c in minors + majors) == sorted(logged)
        assert len(minors) >= MIN_MINORS and len(majors) == len(MAJOR_AT), compactions

        def overlapped(c: lamina.Commit) -> bool:
            assert c.seq is not None and c.base_seq is not None
            return any(c.base_seq < (a.seq or 0) < c.seq for a in appends)

        assert sum(overlapped(c) for c in minors) >= 2
        assert all(overlapped(c) for c in majors)

        # every snapshot the readers saw: one seq's keys exactly, each once
        reads = [r for n in recs if n[0] == "r" for r in recs[n][1:]]
        errors = [r for r in reads if "error" in r]
        assert not errors, errors[:3]
        assert len(reads) >= 3 * READERS
        for r in reads:
            assert model.matches(r["ks"], r["lo"], r["hi"]), (
                f"{r['how']} read at seq {r['lo']}..{r['hi']}: {model.mismatch(r['ks'], r['hi'])}"
            )
        seen = [r["lo"] for r in reads if r["how"] == "scan"]
        assert max(seen) > min(seen)  # the readers saw the table change
        # the snapshot each compaction published, and the one before it, read again
        for c in minors + majors:
            assert c.seq is not None
            for snap in (by_seq[max(c.seq - 2, 0)], c):
                assert snap.seq is not None
                ks = t.to_arrow(as_of=snap.version, columns=["k"])["k"].to_pylist()
                assert model.mismatch(ks, snap.seq) is None, (c.id, snap.seq)

        # the final table: every acknowledged key once, in fewer segments
        final = t.to_arrow(columns=["k"])["k"].to_pylist()
        assert model.mismatch(final, by_seq[-1].seq or 0) is None
        assert sorted(final) == sorted(model.appeared)
        acked = [intents[op] for op in acks]  # every column as appended, the sort kept them
        expected = pa.concat_tables([_rows(r["k0"], r["n"], r["day"]) for r in acked])
        assert _all_rows(t) == _tuples(expected.sort_by([("k", "ascending")]))
        got = cat.sql("select count(*) as n, count(distinct k) as d from ev").to_pylist()
        assert got == [{"n": len(final), "d": len(final)}]
        # the compactions merged what they found (appends after the last one stay small:
        # how many depends on the machine's speed)...
        assert len(t.segments()) < len(appends), (len(t.segments()), len(appends))
        # ...and one more, with nothing racing it, leaves each race day a few segments (it
        # finds nothing to merge when the compactor's last pass came after the last append)
        t.compact()
        assert len(t.segments()) <= 2 * RACE_DAYS, t.segments()
        assert sorted(t.to_arrow(columns=["k"])["k"].to_pylist()) == sorted(final)
        assert cat.clean_failed_writes() == 0
        assert cat.find_orphans() == []


# -- 2. a compaction SIGKILLed mid-way -----------------------------------------------------

KILL_DAYS = 60  # one run per DAY chunk, 10 segments of 5 rows each
KILL_TARGET = 1_000_000

# A child compacting table ``name``, stopped for good at one step (the patched function
# writes ``flag`` and sleeps until SIGKILLed); step "random": it writes ``flag`` right
# before compacting, and is killed after a random delay.
_COMPACTOR = textwrap.dedent(
    """
    import json, os, sys, time
    import lamina

    url, wh, name, step, flag, target = sys.argv[1:7]
    t0 = [0.0]

    def signal_(info):
        info.update(elapsed=time.monotonic() - t0[0], lamina=lamina.__file__)
        with open(flag + ".tmp", "w") as f:
            json.dump(info, f)
        os.replace(flag + ".tmp", flag)

    def stop_here(**info):
        signal_(info)
        time.sleep(600)

    publishing = []
    if step == "mid_write":  # some of the compacted files are on disk
        from lamina.io import writer

        real_write, written = writer.pq.write_table, []

        def write_table(*args, **kwargs):
            real_write(*args, **kwargs)
            written.append(1)
            if len(written) == 20:
                stop_here(step=step)

        writer.pq.write_table = write_table
    elif step in ("inside_publish", "after_publish"):
        from lamina import failpoints

        armed = failpoints.armed("write.publish.before", lambda **_: publishing.append(True))
        armed.__enter__()  # kept: the process is killed in it
        if step == "after_publish":  # published, not yet returned
            armed_after = failpoints.armed(
                "write.publish.after", lambda commit_id: stop_here(step=step, commit=commit_id)
            )
            armed_after.__enter__()  # kept: the process is killed in it

    cat = lamina.connect(catalog=url, warehouse=wh)
    if step == "inside_publish":  # every statement of the publish ran; COMMIT not sent
        from sqlalchemy import event

        @event.listens_for(cat.engine, "commit")
        def before_commit(conn):
            if publishing:
                stop_here(step=step)

    t = cat.load_table(name)
    t0[0] = time.monotonic()
    if step == "random":
        signal_({"step": step})
    c = t.compact(target_rows_per_segment=int(target))
    stop_here(step="finished", commit=c.id)
    """
)

KILL_STEPS = ["mid_write", "inside_publish", "after_publish"]
RANDOM_KILLS = 4


def _kill_table(cat: lamina.Catalog, name: str) -> lamina.Table:
    """KILL_DAYS DAY chunks of 10 segments of 5 rows (one append, cut at 5 rows)."""
    t = cat.create_table(name, SCHEMA, time_column="ts", properties={"target_rows_per_segment": 5})
    t.append(_rows(0, 50 * KILL_DAYS, 1, per_day=50))
    assert len(t.segments()) == 10 * KILL_DAYS
    return t


def _run_compactor(args: list[str], flag: Path) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
    child = subprocess.Popen(
        [sys.executable, "-c", _COMPACTOR, *args],
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + CHILD_TIMEOUT_S
    while not flag.exists():
        if child.poll() is not None:
            out, err = child.communicate()
            pytest.fail(f"the compactor exited ({child.returncode}) early:\n{out!r}{err!r}")
        if time.monotonic() > deadline:
            child.kill()
            child.wait(10)
            pytest.fail("the compactor never reached its step")
        time.sleep(0.005)
    return child, json.loads(flag.read_text())


def _kill(child: subprocess.Popen[bytes]) -> None:
    try:
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait(30)
        child.communicate()
    assert child.returncode == -signal.SIGKILL


def _layout(t: lamina.Table, old: set[str], runs: list[compaction.MinorRun]) -> str:
    """ "old" or "new" (every run of the commit published); fails on anything else."""
    segs = t.segments()
    ids = {s.id for s in segs}
    if ids == old:
        assert not [c for c in t.history() if c.action == "COMPACT" and c.state == "COMPLETED"]
        return "old"
    assert not ids & old, f"{len(ids & old)} of the inputs still visible beside outputs"
    expected = sorted((r.chunk, r.root_range, r.minor_version) for r in runs)
    assert sorted((s.interval, s.root_range, s.minor_version) for s in segs) == expected
    (c,) = [c for c in t.history() if c.action == "COMPACT" and c.state == "COMPLETED"]
    assert set(c.removed) == old and set(c.added) == ids
    return "new"


def test_compaction_killed_at_random_points_leaves_old_or_new_state(
    catalog_url: str, tmp_path: Path
) -> None:
    wh = str(tmp_path / "wh")
    cat = lamina.connect(catalog=catalog_url, warehouse=wh, writer_wait_s=30)
    rng = random.Random(8)
    plan: list[tuple[str, float]] = [(s, 0.0) for s in KILL_STEPS]
    seen: list[tuple[str, float, str, int]] = []
    duration = 0.0
    for i in range(len(KILL_STEPS) + RANDOM_KILLS):
        if i == len(KILL_STEPS):  # kill moments spread over 1.3x a compaction's duration
            plan += [
                ("random", 1.3 * duration * (j + rng.random()) / RANDOM_KILLS)
                for j in range(RANDOM_KILLS)
            ]
        step, delay = plan[i]
        name = f"ev{i}"
        t = _kill_table(cat, name)
        before, old = _all_rows(t), {s.id for s in t.segments()}
        runs = compaction.plan(t._handle, None, KILL_TARGET)
        assert len(runs) == KILL_DAYS
        flag = tmp_path / f"flag{i}"
        child, info = _run_compactor(
            [catalog_url, wh, name, step, str(flag), str(KILL_TARGET)], flag
        )
        assert _from_here(info["lamina"]), info
        if step == "after_publish":
            duration = info["elapsed"]
        time.sleep(delay)
        _kill(child)

        # the same rows, in the old layout or the whole new one
        state = _layout(t, old, runs)
        assert _all_rows(t) == before
        sql = cat.sql(f"select count(*) as n, sum(k) as s from {name}").to_pylist()
        assert sql == [{"n": len(before), "s": sum(r[1] for r in before)}]
        if step in ("mid_write", "inside_publish"):
            assert state == "old", step
        elif step == "after_publish":
            assert state == "new", step
        orphans = len(cat.find_orphans(tables=[name]))
        if step == "mid_write":
            assert orphans >= 20, "the killed compaction's files should be on disk"
        seen.append((step, round(delay, 3), state, orphans))

        # cleaned eagerly, or lazily by the next writer
        eager = i % 2 == 0
        if eager:
            cat.clean_failed_writes()
            assert cat.find_orphans(tables=[name]) == []
            assert not _open_commits(t) and t.locks() == []
        extra: list[tuple[Any, ...]] = []
        if state == "new":  # something to compact again: two small appends
            for j in range(2):
                data = _rows(10**6 + 10 * j, 3, 1)
                t.append(data)
                extra += _tuples(data)
        c = t.compact(target_rows_per_segment=KILL_TARGET)
        assert c is not None and c.state == "COMPLETED"
        assert _all_rows(t) == sorted(before + extra, key=lambda r: r[1])
        assert len(t.segments()) == KILL_DAYS
        assert cat.find_orphans(tables=[name]) == []
        assert not _open_commits(t) and t.locks() == []
    cat.run_retention(now=dt.datetime.now(dt.UTC) + dt.timedelta(days=365))
    assert cat.find_orphans() == []
    cat.close()
    states = {s for _, _, s, _ in seen}
    assert states == {"old", "new"}, seen


# -- 3. racing an overwrite or a delete from another process ------------------------------

RACE_CHUNKS = 4  # DAY chunks of 3 segments of 5 rows each
SLOW_RUN_S = 0.15  # each run of the compaction is slowed down by this much
# The other write, from another process, starts as the compaction writes its first run
# and publishes: "before" the compaction publishes (the compaction waits for it), "after"
# it (the other write waits for the compaction to return), or after a delay (a free race).
RACES: list[tuple[str, str | float]] = [
    ("overwrite", "before"),
    ("overwrite", 0.3),
    ("overwrite", "after"),
    ("delete", "before"),  # t.delete_segments: a catalog-only commit
    ("delete", "after"),
    ("tx_delete", "before"),  # a transaction deleting the segment (opened at once)
    ("tx_delete", "after"),
]


def _racer(url: str, wh: str, cmds: Any, results: Any, go: Any) -> None:
    """Overwrite day 1 or delete a segment when told; publish at once ("before"), once
    ``go`` is set ("after"), or after a delay in seconds."""
    cat = lamina.connect(catalog=url, warehouse=wh, writer_wait_s=30)
    results.put(("ready", lamina.__file__))

    def wait(when: str | float) -> None:
        if when == "after":
            assert go.wait(CHILD_TIMEOUT_S), "the compaction never returned"
        elif not isinstance(when, str):
            time.sleep(when)

    while (cmd := cmds.get()) is not None:
        kind, name, arg, when = cmd
        t = cat.load_table(name)
        try:
            if kind == "tx_delete":
                tx = t.transaction()
                tx.delete_segments([arg])  # opens it: its base is the current snapshot
                wait(when)
                c = tx.commit()
            else:
                wait(when)
                c = (
                    t.overwrite(_rows(arg, 4, 1))
                    if kind == "overwrite"
                    else t.delete_segments([arg])
                )
            results.put(("ok", c.id, c.seq))
        except lamina.LaminaError as exc:
            results.put(("refused", type(exc).__name__, str(exc)))
    cat.close()


def test_minor_compaction_racing_an_overwrite_or_a_delete_from_another_process(
    catalog_url: str, tmp_path: Path
) -> None:
    """The overwrite always wins: what it replaces was visible at its base, compacted or
    not; the compaction either published before it, or is refused. Of a delete of an
    input and the compaction, exactly one wins: the compaction is refused with
    CommitConflictError, a late ``t.delete_segments`` with SegmentNotFoundError (the
    segment is no longer live), a late transaction with CommitConflictError."""
    wh = str(tmp_path / "wh")
    ctx = mp.get_context("spawn")
    cmds, results, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    racer = ctx.Process(target=_racer, args=(catalog_url, wh, cmds, results, go))
    racer.start()
    cat = lamina.connect(catalog=catalog_url, warehouse=wh, writer_wait_s=30)
    pending: list[tuple[Any, ...]] = []
    answers: list[tuple[Any, ...]] = []  # the other write's outcome, once known

    def slow_write_run(**_: Any) -> None:
        if pending:  # the first run: the compaction planned and holds its locks
            cmd = pending.pop()
            cmds.put(cmd)
            if cmd[3] == "before":  # the other write publishes first
                answers.append(results.get(timeout=CHILD_TIMEOUT_S))
        time.sleep(SLOW_RUN_S)

    outcomes: dict[str, set[str]] = {kind: set() for kind, _ in RACES}
    try:
        ready = results.get(timeout=CHILD_TIMEOUT_S)
        assert ready[0] == "ready" and _from_here(ready[1]), ready
        for i, (kind, when) in enumerate(RACES):
            name = f"ev{i}"
            go.clear()
            t = cat.create_table(
                name, SCHEMA, time_column="ts", properties={"target_rows_per_segment": 5}
            )
            t.append(_rows(0, 15 * RACE_CHUNKS, 1, per_day=15))
            before, segs = _all_rows(t), t.segments()
            old = {s.id for s in segs}
            runs = compaction.plan(t._handle, None, KILL_TARGET)
            assert len(runs) == RACE_CHUNKS and all(len(r.inputs) == 3 for r in runs)
            day1, victim = runs[0].chunk, runs[0].inputs[1]
            rest = {s.id for s in segs if s.interval != day1}
            k0 = 10_000 * (i + 1)
            pending.append((kind, name, k0 if kind == "overwrite" else victim.id, when))
            try:
                with failpoints.armed("compaction.minor.before_write_run", slow_write_run):
                    mine: lamina.Commit | None = t.compact(target_rows_per_segment=KILL_TARGET)
                refusal = ""
            except lamina.CommitConflictError as exc:
                mine, refusal = None, str(exc)
            go.set()
            other = answers.pop() if answers else results.get(timeout=CHILD_TIMEOUT_S)
            assert not pending and not answers
            outcome = "compaction refused" if mine is None else "compaction first"
            outcomes[kind].add(outcome)
            if when == "before":
                assert outcome == "compaction refused", (kind, other)
            elif when == "after":
                assert outcome == "compaction first", (kind, other, refusal)

            after, now = _all_rows(t), {s.id: s for s in t.segments()}
            if mine is None:  # refused: nothing of it visible (its files: see below)
                assert "meanwhile" in refusal or "replaced" in refusal, refusal
                assert not [
                    c for c in t.history() if c.action == "COMPACT" and c.state != "ABORTED"
                ]
                assert all(s.minor_version == 0 for s in now.values())
                assert {sid for sid, s in now.items() if s.interval != day1} == rest
            else:
                assert mine.state == "COMPLETED" and set(mine.removed) == old
                compacted = {s for s in now.values() if s.interval != day1}
                assert {(s.minor_version, s.root_range) for s in compacted} == {(1, (0, 3))}
            if kind == "overwrite":
                assert other[0] == "ok", other
                assert mine is None or (mine.seq or 0) < other[2]
                new = _tuples(_rows(k0, 4, 1))
                assert after == before[15:] + new  # sorted by k: day 1 held 0..14
            elif mine is None:  # the delete won
                assert other[0] == "ok", other
                assert victim.id not in now and set(now) == old - {victim.id}
                assert len(after) == len(before) - victim.row_count and set(after) < set(before)
            else:  # the compaction won
                assert other[0] == "refused", other
                want = "SegmentNotFoundError" if kind == "delete" else "CommitConflictError"
                assert other[1] == want, other
                assert after == before
            assert cat.find_orphans(tables=[name]) == []
            assert not _open_commits(t) and t.locks() == []
    finally:
        cmds.put(None)
        racer.join(CHILD_TIMEOUT_S)
        if racer.is_alive():
            racer.kill()
            racer.join(10)
        cat.close()
    assert racer.exitcode == 0
    both = {"compaction refused", "compaction first"}
    assert outcomes == {kind: both for kind in outcomes}, outcomes


# -- a bug found on the way (fixed): two runs of one chunk took the same partition id --


def test_two_runs_in_one_chunk_compact_in_one_commit(cat: lamina.Catalog) -> None:
    t = cat.create_table("events", schema=SCHEMA, time_column="ts")
    for i, n in enumerate((2, 2, 30, 2, 2)):  # the 30-row segment splits the runs
        t.append(events(days=1, per_day=n, seed=i))
    before = _all_rows(t)
    runs = compaction.plan(t._handle, None, 20)
    assert [r.root_range for r in runs] == [(0, 2), (3, 5)]
    c = t.compact(target_rows_per_segment=20)
    assert c is not None and len(c.removed) == 4
    assert _all_rows(t) == before and len(t.segments()) == 3
