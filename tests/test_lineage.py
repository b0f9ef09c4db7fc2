"""Segment lineage: consistent push, rollback, routing in every reader, retention.

Every test runs on SQLite and PostgreSQL (the ``cat`` fixture). Data is built so that
snapshots are told apart by their ``v`` values and row counts: OLD rows have
``v == 1.0``, NEW ones ``v == 2.0``, and so on.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lamina
from lamina import errors, failpoints
from lamina.core.lineage import LineageState
from lamina.errors import LineageEntryNotFoundError, LineageError, PropertyError
from tests.helpers import SCHEMA, events

IN_PROGRESS = LineageState.IN_PROGRESS
COMPLETED = LineageState.COMPLETED
REVERTED = LineageState.REVERTED


def old(days: int = 3) -> pa.Table:
    return events(days=days, per_day=10, value=1.0)


def new(days: int = 3) -> pa.Table:
    return events(days=days, per_day=7, value=2.0, seed=1)


# -- helpers ---------------------------------------------------------------------------


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def later(**delta: float) -> dt.datetime:
    return utcnow() + dt.timedelta(**delta)


def arrow_vals(t: lamina.Table, as_of: int | None = None) -> dict[float, int]:
    return dict(Counter(t.to_arrow(as_of=as_of, columns=["v"]).column("v").to_pylist()))


_CURRENT: dict[str, lamina.Catalog] = {}


@pytest.fixture(autouse=True)
def _current_catalog(cat: lamina.Catalog) -> None:
    """The test's catalog, for :func:`sees` (tables do not hold their catalog)."""
    _CURRENT["cat"] = cat


def sql_vals(cat: lamina.Catalog, name: str) -> dict[float, int]:
    rows = cat.sql(f"select v, count(*) as n from {name} group by v").to_pylist()
    return {r["v"]: r["n"] for r in rows}


def sees(t: lamina.Table, expected: dict[float, int]) -> None:
    """Arrow, DuckDB and the segment list all show exactly ``expected`` (v -> rows)."""
    assert arrow_vals(t) == expected
    assert sql_vals(_CURRENT["cat"], t.name) == expected
    assert sum(s.row_count for s in t.segments()) == sum(expected.values())
    assert t.count() == sum(expected.values())


def live_ids(t: lamina.Table) -> list[str]:
    return sorted(s.id for s in t.segments())


def catalog_state(t: lamina.Table) -> tuple[Any, ...]:
    """What a refused operation must leave exactly as it was."""
    return (
        t.lineage(),
        sorted(s.id for s in t.segments(all=True)),
        t.count(),
        [c.id for c in t.history() if c.state == "COMPLETED"],  # aborted tries may show
    )


@contextmanager
def unchanged(t: lamina.Table) -> Iterator[None]:
    before = catalog_state(t)
    yield
    assert catalog_state(t) == before


def in_progress(t: lamina.Table) -> list[Any]:
    return [e for e in t.lineage() if e.state == IN_PROGRESS]


def entry(t: lamina.Table, entry_id: str) -> Any:
    (e,) = [e for e in t.lineage() if e.id == entry_id]
    return e


def parquet_files(cat: lamina.Catalog, name: str) -> list[Path]:
    return sorted((Path(cat.warehouse.root) / name / "data").rglob("*.parquet"))


def file_of(cat: lamina.Catalog, t: lamina.Table, segment_id: str) -> Path:
    (seg,) = [s for s in t.segments(all=True) if s.id == segment_id]
    assert seg.location is not None
    return Path(seg.location)


def write_under(t: lamina.Table, entry_id: str, data: pa.Table) -> lamina.Commit:
    """Write one batch under an entry opened with t.start_replace (the batch writer
    of t.push(), pointed at that entry)."""
    p = t.push()
    p.entry = entry_id
    return p.append(data)


@pytest.fixture
def t(cat: lamina.Catalog) -> lamina.Table:
    return cat.create_table(
        "ev", schema=SCHEMA, time_column="ts", ingestion_type="REFRESH", consistent_push=True
    )


# -- refresh ------------------------------------------------------------------------


def test_refresh_swaps_whole_table_and_returns_the_visible_commit(t: lamina.Table) -> None:
    c1 = t.refresh(old())
    s1 = live_ids(t)
    sees(t, {1.0: 30})
    c2 = t.refresh(new())
    sees(t, {2.0: 21})
    e = t.lineage()[-1]
    assert e.state == COMPLETED
    assert sorted(e.segments_from) == s1
    assert sorted(e.segments_to) == live_ids(t)
    # the returned commit is the one at which the data became visible
    assert arrow_vals(t, as_of=c2.version) == {2.0: 21}
    assert arrow_vals(t, as_of=c1.version) == {1.0: 30}
    assert not in_progress(t)


def test_refresh_interval_replaces_only_that_interval(t: lamina.Table) -> None:
    t.refresh(old())
    day2 = [s.id for s in t.segments() if str(s.interval).startswith("2024-01-02")]
    assert len(day2) == 1
    fresh = events(days=1, per_day=4, start="2024-01-02", value=5.0)
    c = t.refresh(fresh, interval="2024-01-02/2024-01-03")
    sees(t, {1.0: 20, 5.0: 4})
    e = t.lineage()[-1]
    assert e.state == COMPLETED and list(e.segments_from) == day2
    assert len(e.segments_to) == 1
    assert arrow_vals(t, as_of=c.version) == {1.0: 20, 5.0: 4}
    # ...and it rolls back
    t.revert_replace(e.id)
    sees(t, {1.0: 30})


def test_refresh_interval_refuses_rows_outside_it(t: lamina.Table) -> None:
    t.refresh(old())
    with unchanged(t), pytest.raises(errors.DataOutsideIntervalError, match="widen the interval"):
        t.refresh(new(), interval="2024-01-02/2024-01-03")
    assert not in_progress(t)


def test_refresh_without_consistent_push_is_a_plain_atomic_swap(cat: lamina.Catalog) -> None:
    t = cat.create_table("plain", schema=SCHEMA, time_column="ts", ingestion_type="REFRESH")
    assert not t.consistent_push
    t.refresh(old())
    c = t.refresh(new(days=2))
    sees(t, {2.0: 14})
    assert t.lineage() == []
    assert arrow_vals(t, as_of=c.version) == {2.0: 14}


# -- rollback -------------------------------------------------------------------------


def test_rollback_of_the_newest_link(t: lamina.Table) -> None:
    t.refresh(old())
    t.refresh(new())
    e1, e2 = t.lineage()
    t.revert_replace(e2.id)
    assert entry(t, e2.id).state == REVERTED
    sees(t, {1.0: 30})
    with unchanged(t):  # idempotent
        t.revert_replace(e2.id)
    assert entry(t, e2.id).state == REVERTED
    # the reverted link no longer blocks its predecessor, which is now the newest
    t.revert_replace(e1.id)
    sees(t, {})
    assert not in_progress(t)


def test_rollback_refused_for_a_link_that_is_not_the_newest(t: lamina.Table) -> None:
    t.refresh(old())
    t.refresh(new())
    e1, e2 = t.lineage()
    with unchanged(t), pytest.raises(LineageError, match="revert those first"):
        t.revert_replace(e1.id)
    sees(t, {2.0: 21})


def test_rollback_refused_for_the_first_link_after_a_third_push(t: lamina.Table) -> None:
    """The third push proactively drops the entry linking snapshots 1 and 2 (and the
    first snapshot); the first entry is still not the newest link of the chain: it
    is refused, or gone from the lineage (LineageEntryNotFoundError)."""
    t.refresh(old())
    first = t.lineage()[0]
    t.refresh(new())
    t.refresh(events(days=3, per_day=5, value=3.0, seed=2))
    with unchanged(t), pytest.raises(LineageError):
        t.revert_replace(first.id)
    sees(t, {3.0: 15})


def test_rollback_impossible_once_retention_deleted_the_old_segments(
    t: lamina.Table, cat: lamina.Catalog
) -> None:
    t.set_properties(replaced_segments_retention="0s")
    t.refresh(old())
    t.refresh(new())
    e2 = t.lineage()[-1]
    cat.run_retention(now=later(seconds=1))
    with unchanged(t), pytest.raises(LineageError, match=r"t\.lineage\(\)"):
        t.revert_replace(e2.id)
    sees(t, {2.0: 21})


def test_rollback_after_a_later_append_never_loses_old_rows(t: lamina.Table) -> None:
    t.refresh(old())
    t.refresh(new())
    t.append(events(days=1, per_day=3, value=5.0, seed=5))  # into day 1 of NEW
    sees(t, {2.0: 21, 5.0: 3})
    e2 = [e for e in t.lineage() if e.segments_from][-1]
    try:
        t.revert_replace(e2.id)
    except lamina.LaminaError:  # refusing is fine (then nothing changed)...
        sees(t, {2.0: 21, 5.0: 3})
    else:  # ...rolling back must bring all of OLD back, with the later append
        sees(t, {1.0: 30, 5.0: 3})


# -- bad input: typed errors, message says what to do, catalog unchanged ---------------


def test_start_rejects_a_segment_listed_twice(t: lamina.Table) -> None:
    t.refresh(old())
    a = live_ids(t)[0]
    with unchanged(t), pytest.raises(LineageError, match="segments_from lists a segment twice"):
        t.start_replace([a, a], [])
    with unchanged(t), pytest.raises(LineageError, match="segments_to lists a segment twice"):
        t.start_replace([], ["ev_x", "ev_x"])


def test_start_rejects_a_segment_in_both_lists(t: lamina.Table) -> None:
    t.refresh(old())
    a = live_ids(t)[0]
    with unchanged(t), pytest.raises(LineageError, match="both segments_from and segments_to"):
        t.start_replace([a], [a])


@pytest.mark.parametrize("which", ["unknown", "replaced", "in_progress_to", "deleted"])
def test_start_rejects_from_segments_that_are_not_live(t: lamina.Table, which: str) -> None:
    t.refresh(old())
    s1 = live_ids(t)
    if which == "unknown":
        bad = "ev_no_such_segment"
    elif which == "replaced":  # hidden by a COMPLETED entry
        t.refresh(new())
        bad = s1[0]
    elif which == "in_progress_to":  # written under a push that has not ended
        p = t.push().__enter__()
        bad = p.append(events(days=1, per_day=2, start="2024-03-01")).added[0]
    else:  # removed by a commit
        t.set_properties(consistent_push=False)
        t.refresh(new())
        bad = s1[0]
    with unchanged(t), pytest.raises(LineageError, match=r"must all be live.*t\.segments\(\)"):
        t.start_replace([bad], [])


def test_start_rejects_to_names_already_taken(t: lamina.Table) -> None:
    t.refresh(old())
    a = live_ids(t)[0]
    with unchanged(t), pytest.raises(LineageError, match="must be new segment names"):
        t.start_replace([], [a])


def test_start_overlapping_an_in_progress_entry_via_from(t: lamina.Table) -> None:
    t.refresh(old())
    a = live_ids(t)[0]
    e1 = t.start_replace([a], [])
    with unchanged(t), pytest.raises(LineageError, match="force_cleanup=True") as info:
        t.start_replace([a], [])
    assert e1 in str(info.value)


def test_start_overlapping_an_in_progress_entry_via_to(t: lamina.Table) -> None:
    t.refresh(old())
    e1 = t.start_replace([], ["ev_planned_name"])
    with unchanged(t), pytest.raises(LineageError, match="force_cleanup=True") as info:
        t.start_replace([], ["ev_planned_name"])
    assert e1 in str(info.value)


def test_force_cleanup_reverts_the_overlapping_entry_and_deletes_what_it_wrote(
    t: lamina.Table, cat: lamina.Catalog
) -> None:
    t.refresh(old())
    a = live_ids(t)[0]
    e1 = t.start_replace([a], [])
    written = write_under(t, e1, events(days=1, per_day=4, value=9.0)).added
    assert entry(t, e1).segments_to == written
    path = file_of(cat, t, written[0])
    assert path.exists()
    sees(t, {1.0: 30})  # IN_PROGRESS: from visible, to hidden
    e2 = t.start_replace([a], [], force_cleanup=True)
    assert entry(t, e1).state == REVERTED
    assert entry(t, e2).state == IN_PROGRESS
    assert written[0] not in {s.id for s in t.segments(all=True)}
    assert not path.exists()
    sees(t, {1.0: 30})
    t.end_replace(e2)  # an atomic delete of segment a
    sees(t, {1.0: 20})


@pytest.mark.parametrize("op", ["end", "revert"])
def test_unknown_entry_id(t: lamina.Table, op: str) -> None:
    t.refresh(old())
    with unchanged(t), pytest.raises(LineageEntryNotFoundError, match=r"t\.lineage\(\)"):
        if op == "end":
            t.end_replace("no-such-entry")
        else:
            t.revert_replace("no-such-entry")


def test_end_is_idempotent(t: lamina.Table) -> None:
    t.refresh(old())
    a = live_ids(t)[0]
    e = t.start_replace([a], [])
    t.end_replace(e)
    first = entry(t, e)
    assert first.state == COMPLETED
    with unchanged(t):
        t.end_replace(e)
    assert entry(t, e) == first


def test_end_refused_when_a_to_segment_was_never_written(t: lamina.Table) -> None:
    t.refresh(old())
    e = t.start_replace([], ["ev_never_written"])
    with unchanged(t), pytest.raises(LineageError, match="never written"):
        t.end_replace(e)
    assert entry(t, e).state == IN_PROGRESS


def test_from_segments_of_an_in_progress_entry_cannot_disappear(
    t: lamina.Table, cat: lamina.Catalog
) -> None:
    """A plain swap refuses held segments (delete_segments: see below); an overwrite
    retires them like any older segment of its chunks, and the entry's end still
    hides the rest."""
    t.refresh(old())
    a, _, c = live_ids(t)  # days 1, 2, 3
    e = t.start_replace([a, c], [])
    t.set_properties(consistent_push=False)
    with unchanged(t), pytest.raises(LineageError, match="end or revert it first"):
        t.refresh(new(days=2))  # would remove segments a and c
    assert cat.find_orphans() == []  # the refused swap's files are gone
    o = t.overwrite(events(days=1, per_day=2, value=7.0))  # day 1: a is retired
    sees(t, {1.0: 20, 7.0: 2})
    assert a in o.removed
    t.end_replace(e)
    assert entry(t, e).state == COMPLETED
    sees(t, {1.0: 10, 7.0: 2})  # day 2 only, and the overwrite


def test_end_of_a_reverted_entry_is_refused(t: lamina.Table) -> None:
    t.refresh(old())
    e = t.start_replace([live_ids(t)[0]], [])
    t.revert_replace(e, force=True)
    with unchanged(t), pytest.raises(LineageError, match="start a new one"):
        t.end_replace(e)


def test_revert_of_in_progress_needs_force(t: lamina.Table) -> None:
    t.refresh(old())
    a = live_ids(t)[0]
    e = t.start_replace([a], [])
    with unchanged(t), pytest.raises(LineageError, match="force=True"):
        t.revert_replace(e)
    t.revert_replace(e, force=True)
    assert entry(t, e).state == REVERTED
    sees(t, {1.0: 30})
    with unchanged(t):  # idempotent
        t.revert_replace(e, force=True)
    assert entry(t, e).state == REVERTED


@pytest.mark.parametrize("held", ["in_progress_from", "in_progress_to", "completed_from"])
def test_delete_segments_refuses_segments_held_by_lineage(t: lamina.Table, held: str) -> None:
    t.refresh(old())
    s1 = live_ids(t)
    if held == "in_progress_from":
        t.start_replace([s1[0]], [])
        target = s1[0]
    elif held == "in_progress_to":
        p = t.push().__enter__()
        target = p.append(events(days=1, per_day=2, start="2024-03-01")).added[0]
    else:
        t.refresh(new())
        target = s1[0]
    with unchanged(t), pytest.raises(LineageError, match="end or revert it first"):
        t.delete_segments([target])


def test_delete_segments_refuses_unknown_segments(t: lamina.Table) -> None:
    t.refresh(old())
    with unchanged(t), pytest.raises(lamina.LaminaError, match=r"t\.segments\(all=True\)"):
        t.delete_segments(["ev_no_such_segment"])


def test_delete_segments_of_a_completed_entry_to_and_of_plain_segments(t: lamina.Table) -> None:
    t.refresh(old())
    a = live_ids(t)[0]
    c = t.delete_segments([a])
    assert c.removed == (a,)
    sees(t, {1.0: 20})


@pytest.mark.parametrize(
    "props, hint",
    [
        ({"consistent_push": "maybe"}, "use true or false"),
        ({"ingestion_type": "UPSERT"}, "use APPEND or REFRESH"),
        ({"replaced_segments_retention": "soon"}, "write a number and a unit"),
        ({"lineage_cleanup_retention": "-1h"}, "write a number and a unit"),
        ({"orphan_grace_period": "1 week"}, "write a number and a unit"),
        ({"consistent_pushh": "false"}, "did you mean 'consistent_push'"),
        ({"Consistent_Push": "false"}, "did you mean 'consistent_push'"),
        ({"orphan-grace-period": "2h"}, "did you mean 'orphan_grace_period'"),
        ({"writer_wait_s": "5"}, r"lamina.connect\(writer_wait_s=...\)"),
        # a compaction policy's property without its prefix: kept as metadata, the
        # policy the user meant would never apply
        ({"skip_offset_from_latest": "1h"}, "'compaction.skip_offset_from_latest'"),
        ({"max_segments_per_chunk": "4"}, "'compaction.max_segments_per_chunk'"),
        ({"Sort-By": "k"}, "'compaction.sort_by'"),
        ({"compactoin.nice": "5"}, "'compaction.nice'"),
        ({"inline": "true"}, "'compaction.inline'"),
        ({"write.update.mode": "cow"}, "use merge-on-read"),
    ],
)
def test_bad_property_values(
    t: lamina.Table, cat: lamina.Catalog, props: dict[str, str], hint: str
) -> None:
    t.refresh(old())
    before = t.properties
    with unchanged(t), pytest.raises(PropertyError, match=hint):
        t.set_properties(**props)
    assert cat.load_table("ev").properties == before
    with pytest.raises(PropertyError, match=hint):
        cat.create_table("other", schema=SCHEMA, time_column="ts", properties=props)
    assert "other" not in cat.list_tables()


def test_own_metadata_properties_are_kept(t: lamina.Table, cat: lamina.Catalog) -> None:
    """Names lamina does not read are the user's, kept as given (Delta and Iceberg keep
    such properties); only near spellings of lamina's own are refused."""
    mine = {
        "owner": "ops",
        "app.team": "flights",
        "push": "nightly",
        "ingestion_time": "02:00",  # two letters from ingestion_type: not a typo of it
        "consistent_pull": "true",
        "app.sort_by": "k",  # a namespace of the user's own
        "online": "yes",  # one letter from compaction.inline, a short name: a word of its own
    }
    t.set_properties(**mine)
    assert cat.load_table("ev").properties.items() >= mine.items()


def test_concurrent_property_changes_are_merged(t: lamina.Table, cat: lamina.Catalog) -> None:
    """A change read the properties before another committed and wrote them all back,
    losing the other's (a hunt, PostgreSQL: its read took no row lock)."""
    import json
    import threading
    import time

    from sqlalchemy import update

    from lamina.meta.schema import tables
    from lamina.meta.tables import lock_table

    db = cat.context.db
    if db.sqlite:
        pytest.skip("SQLite runs one writer at a time: the race needs PostgreSQL")
    held, go = threading.Event(), threading.Event()

    def other(conn: Any) -> None:  # another process's change, paused before its commit
        row = lock_table(db, conn, "ev")
        props = {**json.loads(row.properties), "owner": "ops"}
        conn.execute(
            update(tables).where(tables.c.id == row.id).values(properties=json.dumps(props))
        )
        held.set()
        go.wait(10)

    first = threading.Thread(target=db.write, args=(other,))
    first.start()
    assert held.wait(10)
    second = threading.Thread(target=t.set_properties, kwargs={"consistent_push": True})
    second.start()
    time.sleep(0.3)  # the second change now waits for the first's row lock
    go.set()
    first.join(10)
    second.join(10)
    props = cat.load_table("ev").properties
    assert props["owner"] == "ops" and props["consistent_push"] == "true"


def test_properties_change_in_place(t: lamina.Table, cat: lamina.Catalog) -> None:
    t.set_properties(ingestion_type="append", consistent_push=False)
    again = cat.load_table("ev")
    assert again.ingestion_type == "APPEND" and not again.consistent_push
    t.set_properties(consistent_push=True)
    assert cat.load_table("ev").consistent_push


def test_properties_can_be_unset(t: lamina.Table, cat: lamina.Catalog) -> None:
    """Iceberg's remove_properties and Delta's UNSET TBLPROPERTIES: a property set by
    mistake can go (set_properties could only overwrite it); lamina's own take their
    defaults again, a name the table lacks is ignored."""
    t.set_properties(owner="ops", **{"compaction.skip_offset_from_latest": "1d"})
    assert t.consistent_push  # the fixture's
    t.unset_properties("owner", "consistent_push", "never_set")
    again = cat.load_table("ev")
    assert "owner" not in again.properties and not again.consistent_push
    assert again.properties["compaction.skip_offset_from_latest"] == "1d"
    keyed = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("n", pa.int64())])
    u = cat.create_table("u", keyed, primary_key=["k"], comparison_column="n")
    before = u.properties
    with pytest.raises(PropertyError, match="upsert definition"):
        u.unset_properties("upsert.primary_key")
    with pytest.raises(PropertyError, match="names"):
        u.unset_properties(["owner"])  # type: ignore[arg-type]
    assert cat.load_table("u").properties == before


# -- routing: IN_PROGRESS, COMPLETED, REVERTED in every reader --------------------------


def test_routing_in_progress_shows_from_hides_to(t: lamina.Table, cat: lamina.Catalog) -> None:
    t.refresh(old())
    a = live_ids(t)[0]
    e = t.start_replace([a], [])
    extra = write_under(t, e, events(days=1, per_day=4, start="2024-03-01", value=9.0)).added
    sees(t, {1.0: 30})
    assert a in live_ids(t) and extra[0] not in live_ids(t)
    assert extra[0] in {s.id for s in t.segments(all=True)}
    # COMPLETED: from hidden, to shown
    t.end_replace(e)
    sees(t, {1.0: 20, 9.0: 4})
    assert a not in live_ids(t) and extra[0] in live_ids(t)


def test_plain_append_plans_around_segments_lineage_hides(t: lamina.Table) -> None:
    """An append outside any entry reads the lineage only when the table has some; it
    then joins the visible version of a chunk, never one a reverted entry hides."""
    t.refresh(old())
    t.refresh(new())
    t.revert_replace(t.lineage()[-1].id)  # the newer versions are hidden again
    t.set_properties(consistent_push=False)
    t.append(events(days=1, per_day=3, value=5.0, seed=5))  # into day 1
    sees(t, {1.0: 30, 5.0: 3})


def test_routing_reverted_shows_from_hides_to(t: lamina.Table) -> None:
    t.refresh(old())
    t.refresh(new())
    s2 = live_ids(t)
    e2 = t.lineage()[-1]
    t.revert_replace(e2.id)
    sees(t, {1.0: 30})
    assert sorted(e2.segments_from) == live_ids(t)
    assert not set(s2) & set(live_ids(t))


def test_routing_of_past_snapshots_follows_the_entry_state_at_that_time(
    t: lamina.Table,
) -> None:
    c1 = t.refresh(old())
    c2 = t.refresh(new())
    t.revert_replace(t.lineage()[-1].id)
    revert_commit = t.history()[-1]
    assert revert_commit.action == "REVERT_REPLACE"
    assert arrow_vals(t, as_of=c1.version) == {1.0: 30}
    assert arrow_vals(t, as_of=c2.version) == {2.0: 21}  # was COMPLETED then
    assert arrow_vals(t, as_of=revert_commit.version) == {1.0: 30}


@pytest.mark.spark
def test_spark_routing_in_progress_and_completed(spark: Any, t: lamina.Table) -> None:
    t.refresh(old())
    with t.push() as p:
        p.append(events(days=1, per_day=4, start="2024-03-01", value=9.0))
        assert t.to_spark(spark).count() == 30
    rows = t.to_spark(spark).groupBy("v").count().collect()
    assert {r["v"]: r["count"] for r in rows} == {1.0: 30, 9.0: 4}


@pytest.mark.spark
def test_spark_routing_after_refresh_and_rollback(spark: Any, t: lamina.Table) -> None:
    t.refresh(old())
    t.refresh(new())
    rows = t.to_spark(spark).groupBy("v").count().collect()
    assert {r["v"]: r["count"] for r in rows} == {2.0: 21}
    t.revert_replace(t.lineage()[-1].id)
    rows = t.to_spark(spark).groupBy("v").count().collect()
    assert {r["v"]: r["count"] for r in rows} == {1.0: 30}


# -- multi-batch push ---------------------------------------------------------------------


def test_multi_batch_push_becomes_visible_at_once_and_reverts(t: lamina.Table) -> None:
    t.refresh(old())
    with t.push() as p:
        p.append(events(days=1, per_day=3, start="2024-02-01", value=2.0))
        sees(t, {1.0: 30})
        p.append(events(days=1, per_day=4, start="2024-02-02", value=2.0))
        sees(t, {1.0: 30})
        (e,) = in_progress(t)
        assert len(e.segments_to) == 2
    sees(t, {1.0: 30, 2.0: 7})
    e = entry(t, p.entry)
    assert e.state == COMPLETED and e.segments_from == ()
    assert sorted(e.segments_to) == sorted(a for c in p.commits for a in c.added)
    t.revert_replace(p.entry)
    sees(t, {1.0: 30})


def test_multi_batch_push_into_one_chunk_keeps_every_batch(t: lamina.Table) -> None:
    t.refresh(old())
    with t.push() as p:
        p.append(events(days=1, per_day=3, start="2024-02-01", value=2.0))
        p.append(events(days=1, per_day=4, start="2024-02-01", value=2.0, seed=1))
    sees(t, {1.0: 30, 2.0: 7})


def test_push_spanning_a_refresh_is_all_or_nothing(t: lamina.Table) -> None:
    t.refresh(old())
    try:
        with t.push() as p:
            p.append(events(days=1, per_day=3, value=2.0, seed=5))  # into day 1
            t.refresh(events(days=3, per_day=4, value=3.0, seed=3))
    except lamina.LaminaError:
        sees(t, {3.0: 12})  # refusing the push is fine: then none of it shows
        assert not in_progress(t)
    else:
        sees(t, {3.0: 12, 2.0: 3})


def test_failing_push_leaves_readers_on_the_previous_data(
    t: lamina.Table, cat: lamina.Catalog
) -> None:
    t.refresh(old())
    before = sorted(s.id for s in t.segments(all=True))
    files = parquet_files(cat, "ev")
    with pytest.raises(RuntimeError, match="upstream failed"), t.push() as p:
        p.append(events(days=1, per_day=3, start="2024-02-01", value=2.0))
        raise RuntimeError("upstream failed")
    sees(t, {1.0: 30})
    assert not in_progress(t)
    assert all(e.state != IN_PROGRESS for e in t.lineage())
    # what the push wrote is gone, rows and files
    assert sorted(s.id for s in t.segments(all=True)) == before
    assert parquet_files(cat, "ev") == files
    assert cat.find_orphans() == []


def test_append_on_a_consistent_push_table_is_one_revertible_entry(t: lamina.Table) -> None:
    t.refresh(old())
    c = t.append(events(days=1, per_day=5, start="2024-02-01", value=4.0))
    sees(t, {1.0: 30, 4.0: 5})
    e = t.lineage()[-1]
    assert e.state == COMPLETED and e.segments_from == () and e.segments_to == c.added
    assert arrow_vals(t, as_of=c.version) == {1.0: 30, 4.0: 5}
    t.revert_replace(e.id)
    sees(t, {1.0: 30})


def test_consistent_push_toggled_off_in_place(t: lamina.Table, cat: lamina.Catalog) -> None:
    t.refresh(old())
    t.refresh(new())
    entries = t.lineage()
    t.set_properties(consistent_push=False)
    assert not cat.load_table("ev").consistent_push
    c = t.refresh(events(days=2, per_day=5, value=3.0))
    sees(t, {3.0: 10})
    assert arrow_vals(t, as_of=c.version) == {3.0: 10}
    t.append(events(days=1, per_day=2, start="2024-02-01", value=4.0))
    sees(t, {3.0: 10, 4.0: 2})
    assert t.lineage() == entries  # no new entries; the old ones still route
    t.set_properties(consistent_push=True)
    t.refresh(new())
    sees(t, {2.0: 21})
    assert t.lineage()[-1].state == COMPLETED and len(t.lineage()) == len(entries) + 1


def test_rollback_refused_once_a_plain_refresh_replaced_the_entry(t: lamina.Table) -> None:
    t.refresh(old())
    t.refresh(new())
    e2 = t.lineage()[-1]
    t.set_properties(consistent_push=False)
    t.refresh(events(days=2, per_day=5, value=3.0))
    with unchanged(t), pytest.raises(LineageError):
        t.revert_replace(e2.id)
    sees(t, {3.0: 10})


# -- failing input for refresh --------------------------------------------------------------


def test_refresh_with_mismatching_schema_changes_nothing(t: lamina.Table) -> None:
    t.refresh(old())
    bad = old().drop_columns(["s"]).append_column("zz", pa.array([1] * 30))
    with unchanged(t), pytest.raises(errors.SchemaError, match="the table has columns"):
        t.refresh(bad)
    assert not in_progress(t)


def test_refresh_from_a_failing_stream_changes_nothing(t: lamina.Table) -> None:
    t.refresh(old())
    batches = new().to_batches(max_chunksize=5)

    def gen() -> Iterator[pa.RecordBatch]:
        yield batches[0]
        yield batches[1]
        raise RuntimeError("source broke")

    reader = pa.RecordBatchReader.from_batches(SCHEMA, gen())
    with unchanged(t), pytest.raises(Exception, match="source broke"):
        t.refresh(reader)
    sees(t, {1.0: 30})
    assert not in_progress(t)


def test_refresh_failing_mid_write_reverts_and_cleans(
    t: lamina.Table, cat: lamina.Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    t.refresh(old())
    entries = t.lineage()
    files = parquet_files(cat, "ev")
    from lamina.io import writer

    real = writer.pq.write_table
    calls = {"n": 0}

    def fail_second(*args: Any, **kwargs: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("disk full")
        real(*args, **kwargs)

    monkeypatch.setattr(writer.pq, "write_table", fail_second)
    with pytest.raises(OSError, match="disk full"):
        t.refresh(new())
    monkeypatch.undo()
    sees(t, {1.0: 30})
    assert not in_progress(t)
    assert [e for e in t.lineage() if e.state != REVERTED] == entries
    assert parquet_files(cat, "ev") == files
    assert cat.find_orphans() == []
    t.refresh(new())
    sees(t, {2.0: 21})


def test_next_refresh_cleans_up_a_refresh_that_died_after_start(
    t: lamina.Table, cat: lamina.Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refresh that could not even revert its entry (its process died, here:
    the revert is suppressed) is cleaned by the next refresh's force_cleanup."""
    t.refresh(old())
    from lamina.io import writer

    def broken(*args: Any, **kwargs: Any) -> None:
        raise OSError("disk full")

    def died(entry: str) -> None:  # the process died before it could revert its entry
        raise RuntimeError("gone")

    monkeypatch.setattr(writer.pq, "write_table", broken)
    with failpoints.armed("lineage.revert_quietly", died), pytest.raises(OSError):
        t.refresh(new())
    monkeypatch.undo()
    (stale,) = in_progress(t)
    sees(t, {1.0: 30})
    t.refresh(new())
    sees(t, {2.0: 21})
    assert entry(t, stale.id).state == REVERTED
    assert not in_progress(t)


# -- retention ----------------------------------------------------------------------------


def test_retention_of_completed_entries_waits_for_replaced_segments_retention(
    t: lamina.Table, cat: lamina.Catalog
) -> None:
    t.refresh(old())
    s1_files = [Path(s.location) for s in t.segments()]  # type: ignore[arg-type]
    t.refresh(new())
    e2 = t.lineage()[-1]
    cat.run_retention()  # default 24h: nothing yet
    assert all(p.exists() for p in s1_files)
    assert e2.id in [e.id for e in t.lineage()]
    report = cat.run_retention(now=later(hours=25))
    assert report.segment_files == len(s1_files)
    assert not any(p.exists() for p in s1_files)
    assert e2.id not in [e.id for e in t.lineage()]
    assert not set(e2.segments_from) & {s.id for s in t.segments(all=True)}
    sees(t, {2.0: 21})
    assert cat.find_orphans() == []


def test_retention_of_reverted_entries_deletes_their_to_segments(
    t: lamina.Table, cat: lamina.Catalog
) -> None:
    t.refresh(old())
    t.refresh(new())
    e2 = t.lineage()[-1]
    s2_files = [Path(s.location) for s in t.segments()]  # type: ignore[arg-type]
    t.revert_replace(e2.id)
    cat.run_retention(now=later(days=30))
    assert not any(p.exists() for p in s2_files)
    assert e2.id not in [e.id for e in t.lineage()]
    sees(t, {1.0: 30})
    assert cat.find_orphans() == []


def test_retention_of_in_progress_entries_waits_for_lineage_cleanup_retention(
    t: lamina.Table, cat: lamina.Catalog
) -> None:
    t.refresh(old())
    p = t.push().__enter__()
    written = p.append(events(days=1, per_day=3, start="2024-02-01", value=2.0)).added
    path = file_of(cat, t, written[0])
    cat.run_retention(now=later(hours=1))  # a running push is left alone
    assert path.exists() and in_progress(t)
    cat.run_retention(now=later(hours=25))  # an abandoned one is cleaned
    assert not path.exists()
    assert not in_progress(t) and p.entry not in [e.id for e in t.lineage()]
    sees(t, {1.0: 30})
    # the late pusher learns its push is gone, and why
    with pytest.raises(LineageError, match="lineage_cleanup_retention"):
        p.append(events(days=1, per_day=3, start="2024-02-02"))
    with pytest.raises(LineageEntryNotFoundError):
        t.end_replace(p.entry)
    sees(t, {1.0: 30})
    assert cat.find_orphans() == []


def test_third_push_removes_the_first_snapshot(t: lamina.Table, cat: lamina.Catalog) -> None:
    t.refresh(old())
    per_snapshot = len(parquet_files(cat, "ev"))
    assert per_snapshot == 3
    t.refresh(new())
    assert len(parquet_files(cat, "ev")) == 2 * per_snapshot
    for i in range(3, 6):
        t.refresh(events(days=3, per_day=5, value=float(i), seed=i))
        assert len(parquet_files(cat, "ev")) <= 2 * per_snapshot
        sees(t, {float(i): 15})
        assert not in_progress(t)
        # the previous snapshot is kept, so the newest push can still be rolled back
        newest = t.lineage()[-1]
        assert newest.state == COMPLETED
        assert set(newest.segments_from) <= {s.id for s in t.segments(all=True)}
    t.revert_replace(t.lineage()[-1].id)
    sees(t, {4.0: 15})


def test_third_push_keeps_the_previous_snapshot_readable(t: lamina.Table) -> None:
    c1 = t.refresh(old())
    c2 = t.refresh(new())
    t.refresh(events(days=3, per_day=5, value=3.0, seed=2))
    with pytest.raises(errors.SnapshotNotFoundError, match=r"t\.history\(\)"):
        t.to_arrow(as_of=c1.version)
    assert arrow_vals(t, as_of=c2.version) == {2.0: 21}


def test_as_of_a_purged_snapshot_is_a_typed_error(t: lamina.Table, cat: lamina.Catalog) -> None:
    t.set_properties(replaced_segments_retention="0s")
    c1 = t.refresh(old())
    c2 = t.refresh(new())
    assert arrow_vals(t, as_of=c1.version) == {1.0: 30}
    cat.run_retention(now=later(seconds=1))
    with pytest.raises(errors.SnapshotTooOldError, match="the earliest available is version"):
        t.to_arrow(as_of=c1.version)
    with pytest.raises(errors.SnapshotNotFoundError):
        t.count(as_of=c1.version)
    with pytest.raises(errors.SnapshotNotFoundError):
        t.segments(as_of=c1.version)
    assert arrow_vals(t, as_of=c2.version) == {2.0: 21}


def test_retention_of_pure_additions_keeps_old_snapshots_readable(
    t: lamina.Table, cat: lamina.Catalog
) -> None:
    t.set_properties(replaced_segments_retention="0s", consistent_push=False)
    c1 = t.append(old(days=1))
    t.set_properties(consistent_push=True)
    t.append(events(days=1, per_day=5, start="2024-02-01", value=2.0))
    cat.run_retention(now=later(seconds=1))
    assert t.lineage() == []  # nothing was replaced, the entry is simply dropped
    assert arrow_vals(t, as_of=c1.version) == {1.0: 10}


def test_history_keeps_the_commits_of_removed_entries(t: lamina.Table, cat: lamina.Catalog) -> None:
    t.set_properties(replaced_segments_retention="0s")
    t.refresh(old())
    t.refresh(new())
    ids = [e.id for e in t.lineage()]
    before = [(c.id, c.action, c.state) for c in t.history()]
    cat.run_retention(now=later(seconds=1))
    assert not set(ids) & {e.id for e in t.lineage()}
    hist = t.history()
    assert [(c.id, c.action, c.state) for c in hist] == before
    started = [c.metadata.get("entry") for c in hist if c.action == "START_REPLACE"]
    assert started == ids
    assert [c.action for c in hist].count("REFRESH") == 2


def test_find_orphans_and_their_grace_period(t: lamina.Table, cat: lamina.Catalog) -> None:
    t.refresh(old())
    stray_dir = Path(cat.warehouse.root) / "ev" / "data" / "stray"
    stray_dir.mkdir(parents=True)
    stray = stray_dir / "lost.parquet"
    import pyarrow.parquet as pq

    pq.write_table(old(days=1), stray)
    rel = str(stray.relative_to(cat.warehouse.root))
    assert cat.find_orphans() == [rel]
    assert cat.find_orphans(with_grace=True) == []  # younger than orphan_grace_period
    report = cat.run_retention()
    assert report.orphan_files == 0 and stray.exists()
    report = cat.run_retention(now=later(minutes=30))
    assert report.orphan_files == 0 and stray.exists()
    report = cat.run_retention(now=later(hours=2))
    assert report.orphan_files == 1 and not stray.exists()
    assert cat.find_orphans() == []
    sees(t, {1.0: 30})  # catalog files untouched


def test_retention_of_a_push_that_replaced_nothing_keeps_time_travel_exact(
    t: lamina.Table, cat: lamina.Catalog
) -> None:
    """A push into new days (its entry's segments_from empty), read between its two
    batches: once retention drops the entry, that snapshot is refused; it read the
    push's first batch before (a retention hunt)."""
    t.set_properties(replaced_segments_retention="0s")
    t.refresh(old())
    with t.push() as p:
        p.append(events(days=1, per_day=2, start="2024-03-01"))
        mid = t.history()[-1].version
        p.append(events(days=1, per_day=3, start="2024-03-02"))
    assert arrow_vals(t, mid) == {1.0: 30}  # the push does not show until it ends
    cat.run_retention(now=later(seconds=1))
    assert t.lineage() == []
    with pytest.raises(lamina.SnapshotNotFoundError, match="no longer readable"):
        t.to_arrow(as_of=mid)
    assert t.count() == 30 + 5


def test_dropping_a_rolled_back_delete_keeps_time_travel_exact(
    t: lamina.Table, cat: lamina.Catalog
) -> None:
    """An atomic delete (segments_to empty), rolled back; then retention (here the
    lineage-only run a failed push makes) drops its entry. The snapshot where the
    delete showed is refused from then on; it showed the deleted rows again (a lineage
    hunt)."""
    t.refresh(old())
    gone = live_ids(t)[0]
    entry = t.start_replace([gone], [])
    t.end_replace(entry)
    deleted = t.history()[-1].version
    without = arrow_vals(t, deleted)
    t.revert_replace(entry)
    assert arrow_vals(t, deleted) == without  # the rollback does not change the past
    cat.run_retention(lineage_only=True)
    assert entry not in {e.id for e in t.lineage()}
    with pytest.raises(lamina.SnapshotNotFoundError, match="no longer readable"):
        t.to_arrow(as_of=deleted)
    sees(t, {1.0: 30})


def test_a_push_ends_beside_a_newer_version_of_another_day_of_its_chunk(
    cat: lamina.Catalog,
) -> None:
    """A MONTH segment, one day of it overwritten at a newer version, then a push into
    another day (it lands in the MONTH chunk, as an append does): no row of it is
    hidden, so it ends (it was refused as hidden by a newer version; a lineage hunt)."""
    t = cat.create_table("m", schema=SCHEMA, time_column="ts")
    t.append(events(days=20, per_day=2, start="2024-01-01"))
    t.compact(mode="major", segment_granularity="MONTH", interval=("2024-01-01", "2024-02-01"))
    t.overwrite(
        events(days=1, per_day=3, start="2024-01-10"), interval=("2024-01-10", "2024-01-11")
    )
    t.set_properties(consistent_push=True)
    with t.push() as p:
        p.append(events(days=1, per_day=4, start="2024-01-05", value=7.0))
    assert t.count() == 40 - 2 + 3 + 4
    assert arrow_vals(t).get(7.0) == 4


def test_retention_never_deletes_the_files_of_a_write_still_open(
    t: lamina.Table, cat: lamina.Catalog
) -> None:
    """However old its files (a long write, or ``now`` far ahead), a commit still open
    keeps them: retention deleted them as orphans, then the commit published rows whose
    files were gone and the table's snapshot could not be read (a retention hunt)."""
    t.refresh(old())
    t.set_properties(orphan_grace_period="0s")
    with t.transaction() as tx:
        tx.append(new(days=1))
        assert cat.find_orphans()  # unregistered until the commit publishes
        assert cat.run_retention(now=later(days=3)).orphan_files == 0
    assert t.to_arrow().num_rows == 30 + 7
    assert cat.find_orphans() == []


def test_retention_keeps_what_a_commit_removed_after_an_open_write_began(
    t: lamina.Table, cat: lamina.Catalog
) -> None:
    """An overwrite lands while a write is open; however old, what it replaced stays
    until that write ends: the write's conflict check reads it at publish (an update
    that missed the overwrite would bring the replaced rows back)."""
    t.refresh(old())
    t.set_properties(replaced_segments_retention="0s")
    with t.transaction() as tx:
        tx.append(new(days=1))  # opened: its base is the refresh
        cat.load_table(t.name).refresh(new())  # replaces the three days' segments
        assert cat.run_retention(now=later(days=3)).segment_files == 0
    assert cat.run_retention(now=later(days=3)).segment_files == 3
    assert t.to_arrow().num_rows == 3 * 7 + 7


_DIE_OPEN = """
import os, sys
import lamina
from lamina import failpoints
from tests.test_lineage import new

t = lamina.connect(catalog=sys.argv[1], warehouse=sys.argv[2]).load_table("ev")
with failpoints.armed("write.publish.before", lambda **_: os._exit(9)), t.transaction() as tx:
    tx.append(new(days=1))
"""


def test_retention_is_not_held_back_by_a_write_whose_process_died(
    t: lamina.Table, cat: lamina.Catalog, catalog_url: str
) -> None:
    """A writer killed with its commit open keeps nothing: its process is gone."""
    import subprocess
    import sys

    t.refresh(old())
    t.set_properties(replaced_segments_retention="0s")
    args = [sys.executable, "-c", _DIE_OPEN, catalog_url, cat.warehouse.location]
    assert subprocess.run(args, timeout=120).returncode == 9
    assert t.history()[-1].state == "INFLIGHT"  # left open
    t.refresh(new())
    assert cat.run_retention().segment_files == 3


def test_orphan_grace_period_is_a_table_property(t: lamina.Table, cat: lamina.Catalog) -> None:
    t.refresh(old())
    t.set_properties(orphan_grace_period="10s")
    stray = Path(cat.warehouse.root) / "ev" / "data" / "x.parquet"
    stray.write_bytes(b"not really parquet")
    old_time = time.time() - 60
    os.utime(stray, (old_time, old_time))
    assert cat.run_retention().orphan_files == 1
    assert not stray.exists()
    sees(t, {1.0: 30})


def test_hidden_at_every_seq_equals_the_rule_over_whole_entries(t: lamina.Table) -> None:
    """Readers take the hidden set from SQL (only the lists that hide something); at
    every seq of a history with pushes, a rollback, an entry left open and a forced
    cleanup it is exactly ``hidden_by`` of the entries as they stood then."""
    from lamina.core.lineage import hidden_by
    from lamina.meta import lineage_lists as rows

    t.refresh(old())
    t.refresh(new())
    with t.push() as p:  # an empty from: a completed push hides nothing
        p.append(events(days=1, per_day=2, start="2024-02-01", value=3.0))
    t.revert_replace(t.lineage()[-2].id)
    first = t.start_replace([], [])
    write_under(t, first, events(days=1, per_day=2, start="2024-03-01", value=4.0))
    second = t.start_replace([], [])  # left open too
    write_under(t, second, events(days=1, per_day=2, start="2024-04-01", value=6.0))
    t.revert_replace(second, force=True)
    states = {e.state for e in t.lineage()}
    assert states == {IN_PROGRESS, COMPLETED, REVERTED}
    db, tid = t._handle.ctx.db, t._handle.record.id
    last = t.history()[0].seq
    assert last is not None
    for seq in [None, *range(last + 1)]:
        want = db.read(lambda conn: hidden_by(rows.entries(conn, tid, seq)))  # noqa: B023
        got = db.read(lambda conn: rows.hidden_at(conn, tid, seq))  # noqa: B023
        assert got == want, seq
    assert db.read(lambda conn: rows.hidden_at(conn, tid))  # the open and reverted hide


@pytest.mark.parametrize("how", ["no_force", "part_of_it", "append_table"])
def test_the_previous_snapshot_goes_only_as_pinot_cleans_it_up(
    cat: lamina.Catalog, t: lamina.Table, how: str
) -> None:
    """PinotHelixResourceManagerStatelessTest.testSegmentReplacementForRefresh: a new
    push deletes the snapshot before the previous one only with forceCleanup, on a
    REFRESH table, when it replaces exactly what the previous push published. Else
    that snapshot stays (readable, and the previous push can still be rolled back)
    until retention (a lineage audit found it deleted at any overlap)."""
    if how == "append_table":
        t = cat.create_table("ap", schema=SCHEMA, time_column="ts", consistent_push=True)
    c1 = t.refresh(old())
    t.refresh(new())
    e = t.lineage()[-1]
    stored = len(t.segments(all=True))
    from_ids = list(e.segments_to)[:1] if how == "part_of_it" else list(e.segments_to)
    x = t.start_replace(from_ids, [], force_cleanup=how != "no_force")
    assert len(t.segments(all=True)) == stored  # nothing deleted
    assert [x_.id for x_ in t.lineage()][:2] == [t.lineage()[0].id, e.id]
    assert arrow_vals(t, as_of=c1.version) == {1.0: 30}  # snapshot 1 still readable
    t.revert_replace(x, force=True)  # the third push fails
    t.revert_replace(e.id)  # and the second can still be rolled back
    sees(t, {1.0: 30})


def test_a_forced_full_refresh_still_keeps_two_snapshots(t: lamina.Table) -> None:
    t.refresh(old())
    t.refresh(new())
    first = t.lineage()[0]
    t.refresh(events(days=3, per_day=5, value=3.0, seed=2))
    assert first.id not in {e.id for e in t.lineage()}  # snapshot 1 went, and its entry
    t.revert_replace(t.lineage()[-1].id)  # snapshot 2 stays: the rollback shows it
    sees(t, {2.0: 21})


def test_a_rollback_after_deleting_some_of_the_pushed_segments(t: lamina.Table) -> None:
    """LineageDeleteInterleavingIntegrationTest.testFullLifecycleInterleavedWithDelete
    Attempts: a completed push's new segments may be deleted, and the push can still be
    rolled back (its sources show, the rest of what it wrote hides)."""
    t.refresh(old())
    t.refresh(new())
    e = t.lineage()[-1]
    t.delete_segments([sorted(e.segments_to)[0]])
    t.revert_replace(e.id)
    sees(t, {1.0: 30})
    assert entry(t, e.id).state == REVERTED


def test_an_end_with_a_subset_gives_up_names_never_written(t: lamina.Table) -> None:
    """PinotHelixResourceManagerStatelessTest.testSegmentReplacementWithCustomToSegments:
    an entry started with named segmentsTo ends with the subset that was uploaded. lamina
    names what it writes, so names given at start can only be given up (a lineage audit
    found such an entry could never end)."""
    t.refresh(old())
    e = t.start_replace([], ["ev_s5", "ev_s6"])
    write_under(t, e, events(days=1, per_day=4, start="2024-02-01", value=9.0))
    with pytest.raises(LineageError, match="never written"):
        t.end_replace(e)
    with unchanged(t), pytest.raises(LineageError, match="subset .* not in it: \\['ev_s7'\\]"):
        t.end_replace(e, segments_to=["ev_s7"])
    t.end_replace(e, segments_to=[])
    assert entry(t, e).state == COMPLETED
    assert "ev_s5" not in entry(t, e).segments_to
    sees(t, {1.0: 30, 9.0: 4})


def test_segments_to_names_of_lamina_s_own_form_are_refused(cat: lamina.Catalog) -> None:
    """A REST audit: an entry naming, in segments_to, the id lamina would give the next
    append (TABLE_START_END_vV_pP) hid that unrelated append's rows, its end took them
    as the replacement and a forced revert deleted its file. Such names are refused."""
    t = cat.create_table("ev", schema=SCHEMA, time_column="ts")
    t.append(old())
    day0 = sorted(live_ids(t))[0]
    assert day0.endswith("_p0")
    nxt = day0[: -len("p0")] + "p1"
    for name in (nxt, nxt + "_c7", f"{t.name}_-inf_+inf_v0_p3"):
        with unchanged(t), pytest.raises(LineageError, match="form of the ids lamina gives"):
            t.start_replace([], [name])
    e = t.start_replace([], [f"{t.name}_s5", "v1_p1"])  # names of another form: taken
    t.end_replace(e, segments_to=[])
    t.append(events(days=1, per_day=4, value=3.0))
    assert nxt in live_ids(t)  # the append took the very name refused above
    sees(t, {1.0: 30, 3.0: 4})
