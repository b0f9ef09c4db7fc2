"""Consistent push under failure: a pushing process SIGKILLed at each step of a
refresh, and two pushes racing on one table (SQLite and PostgreSQL).

After every kill, readers see exactly the old or the new snapshot (never a mix);
the next push and a retention run leave no orphan file and nothing IN_PROGRESS.
OLD, NEW and the NEXT push differ in their ``v`` values and row counts.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest

import lamina
from lamina.core.lineage import LineageEntry, LineageState
from tests.helpers import SCHEMA, events

ROOT = Path(__file__).resolve().parents[1]
CHILD_TIMEOUT_S = 60

OLD = {1.0: 20}  # events(days=2, per_day=10, value=1.0)
NEW = {2.0: 21}  # events(days=3, per_day=7, value=2.0, seed=1), pushed by the child
NEXT = {3.0: 15}  # events(days=3, per_day=5, value=3.0, seed=2), the next push


def far_future() -> dt.datetime:
    return dt.datetime.now(dt.UTC) + dt.timedelta(days=365)


# A child refreshing the table (step push_batch: pushing two batches), stopped for
# good at one step of the push: the patched function signals (creates ``flag``) and
# sleeps until it is SIGKILLed.
_PUSHER = textwrap.dedent(
    """
    import sys, time
    import lamina
    from tests.helpers import events

    url, wh, step, flag = sys.argv[1:5]

    def stop_here():
        open(flag, "w").close()
        time.sleep(600)

    if step == "after_start":  # the IN_PROGRESS entry exists, nothing written yet
        from lamina import failpoints

        armed = failpoints.armed("lineage.started", lambda entry: stop_here())
        armed.__enter__()  # kept: the process is killed in it
    elif step == "mid_write":  # a first file is on disk
        from lamina.io import writer

        real_write = writer.pq.write_table

        def write_table(*args, **kwargs):
            real_write(*args, **kwargs)
            stop_here()

        writer.pq.write_table = write_table
    elif step in ("before_publish", "inside_publish", "after_publish"):
        from lamina import failpoints

        publishing = []

        def before(**_):
            if step == "before_publish":  # every file written, the catalog untouched
                stop_here()
            publishing.append(True)

        armed = failpoints.armed("write.publish.before", before)
        armed.__enter__()  # kept: the process is killed in it
        if step == "after_publish":  # published and ended, not yet returned
            armed_after = failpoints.armed("write.publish.after", lambda **_: stop_here())
            armed_after.__enter__()  # kept: the process is killed in it
    elif step == "push_batch":  # a multi-batch push: first batch published, hidden
        from lamina import failpoints

        armed = failpoints.armed("push.batch_published", lambda **_: stop_here())
        armed.__enter__()  # kept: the process is killed in it

    cat = lamina.connect(catalog=url, warehouse=wh)
    if step == "inside_publish":  # every statement of publish ran; COMMIT not sent
        from sqlalchemy import event

        @event.listens_for(cat.engine, "commit")
        def before_commit(conn):
            if publishing:
                stop_here()

    t = cat.load_table("ev")
    if step == "push_batch":
        with t.push() as p:
            p.append(events(days=3, per_day=7, value=2.0, seed=1))
            p.append(events(days=1, per_day=7, value=2.0, seed=5, start="2024-01-04"))
    else:
        t.refresh(events(days=3, per_day=7, value=2.0, seed=1))
    print("push finished without reaching step", step)
    """
)

STEPS = [
    "after_start",
    "mid_write",
    "before_publish",
    "inside_publish",
    "after_publish",
    "push_batch",
]
EXPECTED_AFTER_KILL = {
    "after_start": OLD,
    "mid_write": OLD,
    "before_publish": OLD,
    "inside_publish": OLD,
    "after_publish": NEW,
    "push_batch": OLD,
}


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}


def _readers(cat: lamina.Catalog, t: lamina.Table) -> tuple[dict[float, int], dict[float, int]]:
    arrow = dict(Counter(t.to_arrow(columns=["v"]).column("v").to_pylist()))
    rows = cat.sql("select v, count(*) as n from ev group by v").to_pylist()
    return arrow, {r["v"]: r["n"] for r in rows}


def _assert_snapshot(cat: lamina.Catalog, t: lamina.Table, expected: dict[float, int]) -> None:
    arrow, sql = _readers(cat, t)
    assert arrow in (OLD, NEW, NEXT), f"readers see a mix of snapshots: {arrow}"
    assert arrow == sql == expected
    assert t.count() == sum(expected.values()) == sum(s.row_count for s in t.segments())


def _in_progress(t: lamina.Table) -> list[LineageEntry]:
    return [e for e in t.lineage() if e.state == LineageState.IN_PROGRESS]


def _run_until_stopped(args: list[str], flag: Path) -> subprocess.Popen[bytes]:
    child = subprocess.Popen(
        [sys.executable, "-c", _PUSHER, *args, str(flag)],
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + CHILD_TIMEOUT_S
    while not flag.exists():
        if child.poll() is not None:
            out, err = child.communicate()
            pytest.fail(f"the pusher exited ({child.returncode}) before its step:\n{out!r}{err!r}")
        if time.monotonic() > deadline:
            child.kill()
            child.wait(10)
            pytest.fail("the pusher never reached its step")
        time.sleep(0.02)
    return child


@pytest.mark.parametrize("step", STEPS)
def test_pusher_killed_at_each_step(catalog_url: str, tmp_path: Path, step: str) -> None:
    wh = str(tmp_path / "wh")
    cat = lamina.connect(catalog=catalog_url, warehouse=wh, writer_wait_s=30)
    t = cat.create_table(
        "ev", schema=SCHEMA, time_column="ts", ingestion_type="REFRESH", consistent_push=True
    )
    t.refresh(events(days=2, per_day=10, value=1.0))
    _assert_snapshot(cat, t, OLD)

    flag = tmp_path / "flag"
    child = _run_until_stopped([catalog_url, wh, step], flag)
    try:
        # while the pusher is stopped at its step, readers see one whole snapshot
        _assert_snapshot(cat, t, EXPECTED_AFTER_KILL[step])
        os.kill(child.pid, signal.SIGKILL)
        child.wait(30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(30)
        child.communicate()
    assert child.returncode == -signal.SIGKILL

    # after the kill: still exactly one snapshot, old or new
    _assert_snapshot(cat, t, EXPECTED_AFTER_KILL[step])
    if step in ("after_start", "push_batch"):
        assert len(_in_progress(t)) == 1  # left behind by the dead pusher
    if step == "push_batch":  # its first batch is published, hidden
        assert len(_in_progress(t)[0].segments_to) == 3
    if step == "mid_write":
        assert cat.find_orphans(), "the killed pusher's first file should be on disk"

    # the next push takes over (dead writer aborted, its entry and files cleaned)
    c = t.refresh(events(days=3, per_day=5, value=3.0, seed=2))
    _assert_snapshot(cat, t, NEXT)
    if step != "push_batch":  # a dead append-push overlaps no refresh: retention's job
        assert not _in_progress(t)
    assert dict(Counter(t.to_arrow(as_of=c.version, columns=["v"]).column("v").to_pylist())) == NEXT
    cat.run_retention(now=far_future())
    assert cat.find_orphans() == []
    assert not _in_progress(t)
    _assert_snapshot(cat, t, NEXT)
    assert all(c.state in ("COMPLETED", "ABORTED") for c in t.history())
    cat.close()


# Two pushers released at the same instant; each write is slowed down so the two
# pushes overlap in time: the second must wait for the first's writer slot.
_RACER = textwrap.dedent(
    """
    import sys, time, traceback
    import lamina
    from lamina.io import writer
    from tests.helpers import events

    url, wh, go, out, which = sys.argv[1:6]
    real_write = writer.pq.write_table

    def slow_write(*args, **kwargs):
        real_write(*args, **kwargs)
        time.sleep(0.5)

    writer.pq.write_table = slow_write
    data = {
        "a": events(days=3, per_day=4, value=10.0, seed=3),
        "b": events(days=2, per_day=6, value=20.0, seed=4),
    }[which]
    cat = lamina.connect(catalog=url, warehouse=wh, writer_wait_s=60)
    t = cat.load_table("ev")
    while not __import__("os").path.exists(go):
        time.sleep(0.005)
    try:
        c = t.refresh(data)
        result = f"ok {c.id}"
    except lamina.LaminaError as exc:
        result = f"lamina-error {type(exc).__name__}: {exc}"
    except BaseException as exc:
        result = f"other-error {type(exc).__name__}: {exc} " + traceback.format_exc()
    with open(out, "w") as f:
        f.write(result)
    """
)

RACE_DATA = {"a": {10.0: 12}, "b": {20.0: 12}}


def _vals(t: lamina.Table, as_of: int | None = None) -> dict[float, int]:
    return dict(Counter(t.to_arrow(as_of=as_of, columns=["v"]).column("v").to_pylist()))


def test_two_pushes_racing_on_one_table(catalog_url: str, tmp_path: Path) -> None:
    wh = str(tmp_path / "wh")
    cat = lamina.connect(catalog=catalog_url, warehouse=wh)
    t = cat.create_table(
        "ev", schema=SCHEMA, time_column="ts", ingestion_type="REFRESH", consistent_push=True
    )
    go = tmp_path / "go"
    outs = {w: tmp_path / f"out_{w}" for w in ("a", "b")}
    children = {
        w: subprocess.Popen(
            [sys.executable, "-c", _RACER, catalog_url, wh, str(go), str(outs[w]), w],
            cwd=ROOT,
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for w in ("a", "b")
    }
    try:
        time.sleep(2.5)  # both imported and connected, waiting for the start signal
        go.touch()
        for w, child in children.items():
            _, err = child.communicate(timeout=CHILD_TIMEOUT_S + 30)
            assert child.returncode == 0, f"pusher {w} crashed: {err.decode()[-2000:]}"
    finally:
        for child in children.values():
            if child.poll() is None:
                child.kill()
                child.wait(30)
    results = {w: outs[w].read_text() for w in outs}
    assert not [r for r in results.values() if r.startswith("other-error")], results
    ok = {w: int(r.split()[1]) for w, r in results.items() if r.startswith("ok ")}
    assert ok, f"neither push succeeded: {results}"
    for w, r in results.items():  # a refused push says why
        if w not in ok:
            assert "CommitConflictError" in r and "conflicts with commit" in r, r

    # exactly one complete snapshot: the push that published last, entirely
    last = max(ok, key=lambda w: ok[w])
    assert _vals(t) == RACE_DATA[last]
    sql = cat.sql("select v, count(*) as n from ev group by v").to_pylist()
    assert {r["v"]: r["n"] for r in sql} == RACE_DATA[last]
    assert not _in_progress(t)
    # every successful push: its commit is completed, its snapshot readable and whole,
    # and a COMPLETED entry records exactly the segments it wrote
    hist = {c.id: c for c in t.history()}
    entries = t.lineage()
    for w, cid in ok.items():
        assert hist[cid].state == "COMPLETED" and hist[cid].action == "REFRESH"
        assert _vals(t, as_of=hist[cid].version) == RACE_DATA[w]
        mine = [e for e in entries if sorted(e.segments_to) == sorted(hist[cid].added)]
        assert [e.state for e in mine] == [LineageState.COMPLETED], (w, entries)
    if len(ok) == 2:  # the later push replaced exactly the earlier one's segments
        first = min(ok, key=lambda w: ok[w])
        assert sorted(entries[-1].segments_from) == sorted(hist[ok[first]].added)
    assert sorted(entries[-1].segments_to) == sorted(s.id for s in t.segments())

    cat.run_retention(now=far_future())
    assert cat.find_orphans() == []
    assert not _in_progress(t)
    assert _vals(t) == RACE_DATA[last]
    cat.close()
