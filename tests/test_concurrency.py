"""Several processes on one catalog, and writers killed mid-write (SQLite and PostgreSQL)."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import lamina
from lamina import errors
from tests.helpers import SCHEMA, events

ROOT = Path(__file__).resolve().parents[1]


def _appender(url: str, wh: str, worker: int, n: int) -> None:
    cat = lamina.connect(catalog=url, warehouse=wh, writer_wait_s=120)
    t = cat.load_table("events")
    for i in range(n):
        t.append(events(days=2, per_day=5, seed=worker * 100 + i), metadata={"w": worker})
    cat.close()


def _opener(url: str, wh: str) -> None:
    lamina.connect(catalog=url, warehouse=wh).close()


def test_concurrent_processes_lose_no_commit(catalog_url: str, tmp_path: Path) -> None:
    wh = str(tmp_path / "wh")
    cat = lamina.connect(catalog=catalog_url, warehouse=wh)
    cat.create_table("events", schema=SCHEMA, time_column="ts")
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_appender, args=(catalog_url, wh, w, 5)) for w in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(180)
        assert p.exitcode == 0
    t = cat.load_table("events")
    hist = t.history()
    assert len(hist) == 15 and all(c.state == "COMPLETED" for c in hist)
    assert [c.id for c in hist] == sorted(c.id for c in hist)
    assert t.count() == 15 * 10
    # every commit's snapshot is readable and, in completion order, grows by exactly
    # one commit's rows (writers run at once: ids follow starts, seqs completions)
    done = sorted(hist, key=lambda c: c.seq or 0)
    assert [c.seq for c in done] == list(range(1, 16))
    assert [t.count(as_of=c.version) for c in done] == [10 * (i + 1) for i in range(15)]
    segs = t.segments()
    assert len({s.id for s in segs}) == len(segs) == 30
    cat.close()


def test_fresh_catalog_opened_by_many_processes(catalog_url: str, tmp_path: Path) -> None:
    wh = str(tmp_path / "wh")
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_opener, args=(catalog_url, wh)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    with lamina.connect(catalog=catalog_url, warehouse=wh) as cat:
        assert cat.list_tables() == []


# A writer that stops for good right after its first file is on disk.
_KILLED_WRITER = textwrap.dedent(
    """
    import sys, time
    import pyarrow.parquet as pq
    import lamina
    from lamina.io import writer
    from tests.helpers import events

    url, wh, flag = sys.argv[1:4]
    real = pq.write_table

    def write_then_hang(*args, **kwargs):
        real(*args, **kwargs)
        open(flag, "w").close()
        time.sleep(600)

    writer.pq.write_table = write_then_hang
    cat = lamina.connect(catalog=url, warehouse=wh)
    cat.load_table("events").append(events(days=1, per_day=50, start="2024-02-01"))
    """
)


def _start_and_kill_writer(catalog_url: str, wh: str, t: lamina.Table, flag: Path) -> None:
    """Start a writer in another process, append 1 row beside it, SIGKILL it mid-write."""
    child = subprocess.Popen(
        [sys.executable, "-c", _KILLED_WRITER, catalog_url, wh, str(flag)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        deadline = time.monotonic() + 60
        while not flag.exists():
            assert child.poll() is None, "writer died before writing"
            assert time.monotonic() < deadline, "writer never wrote its file"
            time.sleep(0.05)
        # many writers: another one publishes while this one writes
        t.append(events(days=1, per_day=1, start="2024-03-01"))
        os.kill(child.pid, signal.SIGKILL)
        child.wait(30)
    finally:
        if child.poll() is None:
            child.kill()


def test_a_dead_writer_whose_pid_another_process_took_is_cleaned_up(
    catalog_url: str, tmp_path: Path
) -> None:
    """Its commit and EXCLUSIVE lock are settled at once: the pid belongs to a process
    started at another time. Before, a live pid kept the commit open and the lock held
    for good, however old the heartbeat."""
    wh = str(tmp_path / "wh")
    cat = lamina.connect(catalog=catalog_url, warehouse=wh, writer_wait_s=2)
    t = cat.create_table("events", schema=SCHEMA, time_column="ts")
    t.append(events(days=1, per_day=2))
    sleeper = subprocess.Popen(["sleep", "120"])  # has the pid the dead writer had
    child = textwrap.dedent(
        f"""
        import os, lamina
        from tests.helpers import events
        cat = lamina.connect(catalog={catalog_url!r}, warehouse={wh!r})
        tx = cat.load_table("events").transaction(lock="EXCLUSIVE")
        tx.__enter__()
        tx.append(events(days=1, per_day=3, seed=1))
        os._exit(9)  # dies holding its commit and lock
        """
    )
    try:
        done = subprocess.run([sys.executable, "-c", child], cwd=Path(__file__).parent.parent)
        assert done.returncode == 9
        assert [c.state for c in t.history()] == ["COMPLETED", "INFLIGHT"]
        from sqlalchemy import update

        from lamina.meta.schema import commits
        from lamina.meta.writers import _HOST

        taken = f"{_HOST}:{sleeper.pid}:1:0123abcd"  # its pid, another start time
        cat.context.db.write(
            lambda c: c.execute(
                update(commits).where(commits.c.state == "INFLIGHT").values(owner=taken)
            )
        )
        assert [lk.type for lk in t.locks()] == ["EXCLUSIVE"]
        with t.transaction(lock="EXCLUSIVE", wait_s=2) as tx:  # not blocked: it is settled
            tx.append(events(days=1, per_day=4, seed=2))
        assert [c.state for c in t.history()] == ["COMPLETED", "ABORTED", "COMPLETED"]
        assert t.count() == 6 and t.locks() == []
    finally:
        sleeper.kill()
        sleeper.wait()
        cat.close()


def test_writer_killed_mid_write(catalog_url: str, tmp_path: Path) -> None:
    wh = str(tmp_path / "wh")
    cat = lamina.connect(catalog=catalog_url, warehouse=wh, writer_wait_s=0.3)
    t = cat.create_table("events", schema=SCHEMA, time_column="ts")
    t.append(events(days=2, per_day=10))
    _start_and_kill_writer(catalog_url, wh, t, tmp_path / "flag")
    before = (21, sorted(s.id for s in t.segments()))  # 20 + the append beside it
    assert t.count() == before[0]
    killed = [c for c in t.history() if c.state != "COMPLETED"]
    assert len(killed) == 1 and killed[0].state == "INFLIGHT"
    stray = Path(wh) / "events" / "data" / f"c{killed[0].id:010d}"
    assert any(stray.rglob("*.parquet")), "the killed writer's file should be on disk"
    # no partial commit: readers see exactly what was there before
    assert (t.count(), sorted(s.id for s in t.segments())) == before
    assert cat.sql("select count(*) n from events").to_pydict() == {"n": [before[0]]}
    # the next writer finds the dead one, aborts it and removes its files (lazy cleanup)
    t.append(events(days=1, per_day=3, start="2024-03-01"))
    assert not stray.exists()
    states = {c.id: c.state for c in t.history()}
    assert states[killed[0].id] == "ABORTED"
    assert t.count() == before[0] + 3
    cat.close()


def test_failed_input_stream_aborts_and_cleans(cat: lamina.Catalog) -> None:
    """An error while files are being written aborts the commit and removes its files."""
    t = cat.create_table("events", schema=SCHEMA, time_column="ts")
    t.append(events(days=1, per_day=10))
    from lamina.io import writer

    real = writer.pq.write_table
    calls = {"n": 0}

    def fail_second(*args: object, **kwargs: object) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("disk full")
        real(*args, **kwargs)  # type: ignore[arg-type]

    writer.pq.write_table = fail_second  # type: ignore[assignment]
    try:
        with pytest.raises(OSError, match="disk full"):
            t.append(events(days=3, per_day=10, start="2024-02-01"))
    finally:
        writer.pq.write_table = real
    assert t.count() == 10
    aborted = [c for c in t.history() if c.state == "ABORTED"]
    assert len(aborted) == 1
    assert not (Path(cat.warehouse.root) / "events" / "data" / f"c{aborted[0].id:010d}").exists()


def test_clean_failed_writes_without_another_write(catalog_url: str, tmp_path: Path) -> None:
    wh = str(tmp_path / "wh")
    cat = lamina.connect(catalog=catalog_url, warehouse=wh, writer_wait_s=0.3)
    t = cat.create_table("events", schema=SCHEMA, time_column="ts")
    _start_and_kill_writer(catalog_url, wh, t, tmp_path / "flag")
    (killed,) = [c for c in t.history() if c.state != "COMPLETED"]
    stray = Path(wh) / "events" / "data" / f"c{killed.id:010d}"
    assert any(stray.rglob("*.parquet"))
    assert cat.clean_failed_writes() == 1
    assert not stray.exists()
    assert [c.state for c in t.history()] == ["ABORTED", "COMPLETED"]
    assert cat.clean_failed_writes() == 0
    assert t.count() == 1


def test_open_writes_heartbeat_until_they_end(catalog_url: str, tmp_path: Path) -> None:
    """Every open write of a process is beaten (one shared thread); a finished one
    no longer is."""
    from sqlalchemy import select

    from lamina.meta.schema import commits
    from lamina.write import WriteTransaction

    cat = lamina.connect(catalog=catalog_url, warehouse=str(tmp_path / "wh"), heartbeat_s=0.05)
    t = cat.create_table("events", schema=SCHEMA, time_column="ts")
    other = cat.create_table("other", schema=SCHEMA, time_column="ts")
    db = cat.context.db

    def beat(commit_id: int) -> int:
        return int(
            db.read(
                lambda c: c.execute(
                    select(commits.c.heartbeat_at).where(commits.c.id == commit_id)
                ).scalar_one()
            )
        )

    with (
        WriteTransaction(cat.context, t._handle.record, "APPEND", {}) as a,
        WriteTransaction(cat.context, other._handle.record, "APPEND", {}) as b,
    ):
        first = (beat(a.id), beat(b.id))
        time.sleep(0.5)
        assert beat(a.id) > first[0] and beat(b.id) > first[1]
    ended = (beat(a.id), beat(b.id))
    time.sleep(0.3)
    assert (beat(a.id), beat(b.id)) == ended
    cat.close()


def test_a_pinged_connection_serves_every_kind_of_transaction(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The idle ping leaves no transaction open on the connection: the autocommitted
    statement of a commit's opening and a REPEATABLE READ snapshot read can still set
    their modes (under load every connection sits idle long enough to be pinged)."""
    monkeypatch.setenv("LAMINA_PG_PING_IDLE_S", "0.05")
    cat = lamina.connect(catalog=pg_url, warehouse=str(tmp_path / "wh"))
    t = cat.create_table("events", schema=SCHEMA, time_column="ts")
    for i in range(3):
        time.sleep(0.1)
        t.append(events(days=1, per_day=2, seed=i))  # opens with one autocommitted statement
        time.sleep(0.1)
        assert t.count() == 2 * (i + 1)  # a consistent (REPEATABLE READ) read
    cat.close()


@pytest.mark.parametrize("idle_s", ["0.2", "3600"])
def test_idle_postgres_connections_are_checked_before_use(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, idle_s: str
) -> None:
    """A pooled connection that sat idle is pinged before use, so one the server
    dropped meanwhile is replaced; busy connections are not pinged, and one found
    dropped when used (no ping: 3600 s) fails a transaction that never reached its
    COMMIT, which runs again on a fresh connection."""
    from sqlalchemy import create_engine, text

    from tests.conftest import PG_URL

    monkeypatch.setenv("LAMINA_PG_PING_IDLE_S", idle_s)
    url = f"{pg_url}&application_name=lamina_idle_{idle_s.replace('.', '_')}"
    cat = lamina.connect(catalog=url, warehouse=str(tmp_path / "wh"))
    t = cat.create_table("events", schema=SCHEMA, time_column="ts")
    t.append(events(days=1, per_day=3))
    admin = create_engine(PG_URL.replace("postgresql://", "postgresql+psycopg://", 1))
    with admin.begin() as conn:
        killed = conn.execute(
            text(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = :name"
            ),
            {"name": f"lamina_idle_{idle_s.replace('.', '_')}"},
        ).scalar_one()
    admin.dispose()
    assert killed >= 1
    time.sleep(0.5)
    assert t.count() == 3
    t.append(events(days=1, per_day=2, seed=1))
    assert t.count() == 5
    cat.close()


def test_open_transitions_skip_the_wal_flush_wait_on_postgres(pg_url: str, tmp_path: Path) -> None:
    """REQUESTED and INFLIGHT commit with synchronous_commit off (their loss in a
    server crash is a failed write); COMPLETED commits synchronously; the setting never
    leaks into the pooled sessions."""
    from sqlalchemy import text

    cat = lamina.connect(catalog=pg_url, warehouse=str(tmp_path / "wh"))
    t = cat.create_table("events", schema=SCHEMA, time_column="ts")
    with cat.engine.begin() as conn:  # logs the setting in force at each transition
        conn.execute(text("CREATE TABLE sync_log (state text, setting text)"))
        conn.execute(
            text(
                "CREATE FUNCTION log_sync() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                "INSERT INTO sync_log VALUES (NEW.state, "
                "current_setting('synchronous_commit')); RETURN NULL; END $$"
            )
        )
        conn.execute(
            text(
                "CREATE TRIGGER log_sync AFTER INSERT OR UPDATE ON lamina_commits "
                "FOR EACH ROW EXECUTE FUNCTION log_sync()"
            )
        )
    for i in range(3):  # appends open INFLIGHT at once
        t.append(events(days=1, per_day=2, seed=i))
    with t.transaction() as tx:  # opens REQUESTED; INFLIGHT at its first write
        tx.append(events(days=1, per_day=2, seed=9))
    with cat.engine.connect() as conn:
        log = conn.execute(text("SELECT state, setting FROM sync_log")).all()
    assert sorted(set(log)) == [("COMPLETED", "on"), ("INFLIGHT", "off"), ("REQUESTED", "off")]
    assert sorted(log).count(("INFLIGHT", "off")) == 4
    assert len(log) == 3 * 2 + 3
    for c in t.history():  # REQUESTED -> INFLIGHT -> COMPLETED, each with its time
        assert c.inflight_at is not None and c.completed_at is not None
        assert c.started_at <= c.inflight_at <= c.completed_at
    conns = [cat.engine.connect() for _ in range(4)]  # every pooled session
    try:
        assert {c.execute(text("SHOW synchronous_commit")).scalar() for c in conns} == {"on"}
    finally:
        for c in conns:
            c.close()
    cat.close()


def test_a_writer_touches_only_its_own_commit_row(catalog_url: str, tmp_path: Path) -> None:
    """Commit ids can come back after a PostgreSQL crash lost the transaction that
    took one (relaxed REQUESTED/INFLIGHT); a writer whose row turned out to be another
    writer's neither moves, publishes, aborts nor cleans it."""
    from sqlalchemy import select, update

    from lamina.meta.schema import commits
    from lamina.write import WriteTransaction

    cat = lamina.connect(catalog=catalog_url, warehouse=str(tmp_path / "wh"))
    t = cat.create_table("events", schema=SCHEMA, time_column="ts")
    db = cat.context.db

    def hand_over(commit_id: int) -> None:  # the row now belongs to someone else
        db.write(
            lambda c: c.execute(
                update(commits).where(commits.c.id == commit_id).values(owner="elsewhere:1:x")
            )
        )

    def state(commit_id: int) -> str:
        return str(
            db.read(
                lambda c: c.execute(
                    select(commits.c.state).where(commits.c.id == commit_id)
                ).scalar_one()
            )
        )

    for step in ("inflight", "publish"):
        with (
            pytest.raises(errors.CommitError),
            WriteTransaction(cat.context, t._handle.record, "APPEND", {}) as txn,
        ):
            commit_id = txn.id
            their_file = Path(cat.warehouse.path(txn.dir)) / "theirs.parquet"
            their_file.parent.mkdir(parents=True)
            their_file.write_bytes(b"x")
            if step == "publish":
                txn.inflight()
            hand_over(commit_id)
            if step == "inflight":
                txn.inflight()
            from lamina.core.plans import AppendPlan

            txn.publish(AppendPlan())
        assert state(commit_id) == ("REQUESTED" if step == "inflight" else "INFLIGHT")
        assert their_file.exists()
        db.write(  # let the next step's writer in
            lambda c, cid=commit_id: c.execute(
                update(commits).where(commits.c.id == cid).values(state="ABORTED")
            )
        )
    cat.close()


def test_round_trips_of_a_small_append(catalog_url: str, tmp_path: Path) -> None:
    """The catalog work of an append stays within its statement budget (PostgreSQL:
    6 round trips: opening the commit INFLIGHT one autocommitted statement, the
    publish one transaction of 3 statements)."""
    from sqlalchemy import event

    cat = lamina.connect(catalog=catalog_url, warehouse=str(tmp_path / "wh"))
    t = cat.create_table("events", schema=SCHEMA, time_column="ts")
    t.append(events(days=1, per_day=2))
    seen = {"statements": 0, "transactions": 0}

    def statement(*_: object) -> None:
        seen["statements"] += 1

    def transaction(*_: object) -> None:
        seen["transactions"] += 1

    event.listen(cat.engine, "before_cursor_execute", statement)
    event.listen(cat.engine, "commit", transaction)
    t.append(events(days=1, per_day=2, seed=1))
    if cat.context.db.sqlite:  # (BEGIN IMMEDIATE, polled on the driver, is not counted)
        assert seen == {"statements": 7, "transactions": 2}
    else:
        assert seen == {"statements": 4, "transactions": 1}
    cat.close()


def test_many_commits_can_be_open_on_one_table(catalog_url: str, tmp_path: Path) -> None:
    """Optimistic concurrency: opening a commit takes no slot; each records the
    snapshot it starts from (its base seq), and appends publish in any order."""
    from lamina.write import WriteTransaction

    cat = lamina.connect(catalog=catalog_url, warehouse=str(tmp_path / "wh"))
    t = cat.create_table("events", schema=SCHEMA, time_column="ts")
    t.append(events(days=1, per_day=1))
    with (
        WriteTransaction(cat.context, t._handle.record, "APPEND", {}) as a,
        WriteTransaction(cat.context, t._handle.record, "APPEND", {}) as b,
    ):
        assert a.id != b.id and a.base_seq == b.base_seq == 1
        c = t.append(events(days=1, per_day=2))  # a third one, opened and published
        assert c.seq == 2
    t.append(events(days=1, per_day=3))
    assert t.count() == 6
    assert [x.state for x in t.history()] == [
        "COMPLETED",
        "ABORTED",
        "ABORTED",
        "COMPLETED",
        "COMPLETED",
    ]
    cat.close()


def test_a_write_that_publishes_while_judged_dead_keeps_its_files(
    catalog_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL runs the cleaner's reads and its abort as separate statements: a
    write judged dead (heartbeat late) that published in between was not aborted, yet
    its files were deleted as if it had been — rows of a completed commit lost."""
    if catalog_url.startswith("sqlite"):
        pytest.skip("SQLite serializes write transactions: a publish cannot land between")
    from lamina.meta import writers

    cat = lamina.connect(catalog=catalog_url, warehouse=str(tmp_path / "wh"))
    t = cat.create_table("events", schema=SCHEMA, time_column="ts")
    tx = t.transaction()
    tx.append(events(days=1, per_day=5))
    judge = writers.dead

    def publishing_meanwhile(*args: object) -> bool:
        monkeypatch.setattr(writers, "dead", judge)
        tx.commit()  # its heartbeat was late, but it was alive and published
        return True

    monkeypatch.setattr(writers, "dead", publishing_meanwhile)
    assert cat.clean_failed_writes() == 0  # got: 1, and its files deleted
    assert writers.dead is judge, "the publish ran"
    assert [c.state for c in t.history()] == ["COMPLETED"]
    assert t.count() == 5  # got: the segment's file was gone
