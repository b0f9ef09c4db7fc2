"""Exactly-once writes: txn=(app_id, version), recorded in the commit's transaction."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import lamina
from lamina.errors import CommitConflictError, TransactionError
from tests.helpers import SCHEMA, events


@pytest.fixture
def t(cat: lamina.Catalog) -> lamina.Table:
    return cat.create_table("x", SCHEMA, time_column="ts", segment_granularity="DAY")


def test_a_version_is_applied_once(t: lamina.Table) -> None:
    first = t.append(events(days=1, per_day=3), txn=("loader", 1))
    again = t.append(events(days=1, per_day=3, seed=1), txn=("loader", 1))
    assert again.id == first.id and t.count() == 3
    assert t.append(events(days=1, per_day=2, seed=2), txn=("loader", 0)).id == first.id
    second = t.append(events(days=1, per_day=2, seed=3), txn=("loader", 2))
    assert second.id != first.id and t.count() == 5
    other_app = t.append(events(days=1, per_day=1, seed=4), txn=("other", 1))
    assert other_app.id not in (first.id, second.id) and t.count() == 6
    assert [c.state for c in t.history()] == ["COMPLETED"] * 3  # skips open no commit


def test_overwrites_and_transactions_carry_versions_too(t: lamina.Table) -> None:
    t.overwrite(events(days=1, per_day=4), txn=("job", 7))
    t.overwrite(events(days=1, per_day=9, seed=1), txn=("job", 7))
    assert t.count() == 4
    with t.transaction(txn=("job", 8)) as tx:
        tx.append(events(days=1, per_day=1, seed=2, start="2024-02-01"))
    with t.transaction(txn=("job", 8)) as tx2:
        tx2.append(events(days=1, per_day=1, seed=3, start="2024-02-01"))
    assert tx2.commit_result is not None and tx2.commit_result.id == tx.commit_result.id  # type: ignore[union-attr]
    assert t.count() == 5


def test_two_writers_of_one_application_one_fails(t: lamina.Table) -> None:
    a = t.transaction(txn=("stream", 1))
    b = t.transaction(txn=("stream", 2))
    a.append(events(days=1, per_day=1))
    b.append(events(days=1, per_day=2, seed=1))
    a.commit()
    with pytest.raises(CommitConflictError, match="same app id 'stream'") as err:
        b.commit()
    assert err.value.retryable
    assert t.count() == 1


def test_a_retried_twin_is_skipped_not_doubled(t: lamina.Table) -> None:
    """The same micro-batch written twice at once (a restarted query racing its
    predecessor): one publishes, the other finds the version applied at its publish
    and is skipped (a race, not a conflict), as is an older version still running."""
    a = t.transaction(txn=("stream", 5))
    a.append(events(days=1, per_day=2))
    twin = t.transaction(txn=("stream", 5))
    twin.append(events(days=1, per_day=2))
    first = a.commit()
    assert twin.commit().id == first.id  # skipped: the version is applied
    assert t.append(events(days=1, per_day=2), txn=("stream", 5), retries=2).id == first.id
    older = t.transaction(txn=("stream", 4))  # began before 5 published: skipped too
    late = t.transaction(txn=("stream", 7))  # a newer version is no twin: it conflicts
    older.append(events(days=1, per_day=2))
    late.append(events(days=1, per_day=2))
    assert older.commit().id == first.id
    assert t.append(events(days=1, per_day=2), txn=("stream", 6)).id != first.id
    with pytest.raises(CommitConflictError, match="same app id"):
        late.commit()
    assert t.count() == 4


@pytest.mark.parametrize(
    "bad",
    # too long for the catalog: PostgreSQL failed with an untyped DataError (a hunt)
    [("", 1), ("app", -1), ("app", "1"), ("app",), "app", ("app", True), ("a" * 257, 1),
     ("app", 2**63)],
)  # fmt: skip
def test_malformed_txn_is_a_typed_error(t: lamina.Table, bad: object) -> None:
    with pytest.raises(TransactionError, match="app_id, version"):
        t.append(events(days=1, per_day=1), txn=bad)  # type: ignore[arg-type]
    with pytest.raises(TransactionError, match="app_id, version"):
        t.transaction(txn=bad)  # type: ignore[arg-type]
    assert t.count() == 0 and t.history() == []


def test_foreach_batch_writes_each_batch_once(t: lamina.Table) -> None:
    write = t.foreach_batch("orders")
    write(events(days=1, per_day=2), 0)
    write(events(days=1, per_day=2), 0)  # replayed after a restart from the checkpoint
    write(events(days=1, per_day=3, seed=1), 1)
    assert t.count() == 5
    with pytest.raises(TransactionError, match="mode"):
        t.foreach_batch("orders", mode="upsert")


def test_foreach_batch_function_pickles_and_still_writes_once(t: lamina.Table) -> None:
    """Spark Connect pickles the function to its server: it holds plain values and
    opens the catalog where it runs."""
    import pickle

    write = pickle.loads(pickle.dumps(t.foreach_batch("orders")))
    write(events(days=1, per_day=2), 0)
    write(events(days=1, per_day=2), 0)
    assert t.count() == 2 and len(t.history()) == 1


def test_foreach_batch_function_reconnects_in_another_process(t: lamina.Table) -> None:
    """Where Spark Connect runs it (the server's Python worker), the function opens the
    catalog and warehouse it names: a replayed batch is skipped there too."""
    import pickle
    import subprocess
    import sys

    code = (
        "import pickle, sys; from tests.helpers import events; "
        "f = pickle.loads(sys.stdin.buffer.read()); "
        "f(events(days=1, per_day=3), 0); f(events(days=1, per_day=3), 0)"
    )
    src = str(Path(lamina.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, str(Path(src).parent)])}
    subprocess.run(
        [sys.executable, "-c", code], input=pickle.dumps(t.foreach_batch("far")),
        env=env, check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    assert t.count() == 3 and len(t.history()) == 1


def test_a_consistent_push_append_is_applied_once(cat: lamina.Catalog) -> None:
    """Appends of a consistent_push table go through a lineage entry; their txn was
    dropped on that path (a hunt: a replayed stream batch landed again)."""
    t = cat.create_table("p", SCHEMA, time_column="ts", consistent_push=True)
    first = t.append(events(days=1, per_day=3), txn=("loader", 1))
    assert t.append(events(days=1, per_day=3, seed=1), txn=("loader", 1)).id == first.id
    assert t.append(events(days=1, per_day=3, seed=2), txn=("loader", 0)).id == first.id
    assert t.count() == 3
    t.append(events(days=1, per_day=2, seed=3), txn=("loader", 2))
    assert t.count() == 5
    assert [e.state for e in t.lineage()] == ["COMPLETED", "COMPLETED"]  # skips open none
    batch = t.foreach_batch("stream")
    for _ in range(2):  # a restart replays batch 0
        batch(events(days=1, per_day=4, seed=4), 0)
    assert t.count() == 9


def test_a_stream_is_not_retried_after_it_was_read(
    t: lamina.Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A retry would read the consumed RecordBatchReader again and publish no rows
    under the txn (a hunt: the version recorded, the batch lost, its replay skipped)."""
    import pyarrow as pa

    from lamina.operations import steps as table_write

    monkeypatch.setattr(table_write, "STREAM_FLUSH_BYTES", 1)  # a piece per batch

    other = t.transaction(txn=("stream", 1))
    other.append(events(days=1, per_day=4))

    rows = events(days=1, per_day=6, seed=1, start="2024-01-02")

    def batches():  # the predecessor publishes while this write reads its stream
        yield from rows.slice(0, 3).to_batches()
        other.commit()
        yield from rows.slice(3).to_batches()

    reader = pa.RecordBatchReader.from_batches(SCHEMA, batches())
    with pytest.raises(CommitConflictError, match="not retried: the RecordBatchReader") as err:
        t.append(reader, txn=("stream", 2), retries=2)
    assert err.value.retryable and t.count() == 4
    t.append(rows, txn=("stream", 2))
    assert t.count() == 10  # the batch, written again, lands once
