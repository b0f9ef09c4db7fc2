"""Appends into chunks a compaction cut finer: Druid's segment allocation.

Druid's ``SegmentAllocateAction`` puts a row into the visible segment interval that
holds it if there is one; else it tries the preferred segment granularity's bucket,
then finer ones, and takes the first that no visible segment overlaps
(``SegmentAllocateActionTest``: ``testAddToExistingLinearShardSpecsSameGranularity``,
``testAllocateAllGranularity``, the finer-granularity fallback). The pure rule is
:func:`lamina.core.planner.allocate`; the write paths use it when a publish finds a
chunk covered by chunks of another granularity. Catalog tests run on SQLite and
PostgreSQL (the ``cat`` fixture).
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

import lamina
from lamina.core.interval import US_PER_HOUR, Granularity, Interval, to_us
from lamina.core.planner import allocate, finer_or_equal
from tests.helpers import SCHEMA

DAY = 24 * US_PER_HOUR
T0 = to_us(dt.datetime(2024, 1, 1, tzinfo=dt.UTC))


def hours(a: int, b: int) -> Interval:
    """Hours ``a`` to ``b`` of 2024-01-01 (hour 24 is the next midnight)."""
    return Interval.of(T0 + a * US_PER_HOUR, T0 + b * US_PER_HOUR)


# -- the pure rule ------------------------------------------------------------------


def whole(*chunks: Interval) -> list[tuple[Interval, Interval]]:
    """Visible pieces of chunks that show whole."""
    return [(c, c) for c in chunks]


def test_an_hour_inside_a_visible_chunk_goes_to_that_chunk() -> None:
    assert allocate(T0 + 1 * US_PER_HOUR, whole(hours(1, 2), hours(5, 6)), Granularity.DAY) == (
        hours(1, 2)
    )
    # a coarser visible chunk holds it too (Druid: the used segment's interval)
    month = Interval.of(T0, to_us(dt.datetime(2024, 2, 1, tzinfo=dt.UTC)))
    assert allocate(T0 + 30 * US_PER_HOUR, whole(month), Granularity.DAY) == month
    # where a finer chunk hides the month, the finer chunk shows: it takes the hour
    pieces = [(hours(0, 6), month), (hours(6, 7), hours(6, 7)), (hours(7, 24), month)]
    assert allocate(T0 + 6 * US_PER_HOUR, pieces, Granularity.DAY) == hours(6, 7)
    assert allocate(T0 + 5 * US_PER_HOUR, pieces, Granularity.DAY) == month


def test_a_free_hour_takes_the_coarsest_bucket_no_chunk_overlaps() -> None:
    # the day overlaps the HOUR chunks: the hour's own bucket
    assert allocate(T0 + 3 * US_PER_HOUR, whole(hours(1, 2)), Granularity.DAY) == hours(3, 4)
    # nothing in the day: the preferred DAY bucket
    got = allocate(T0 + DAY + 3 * US_PER_HOUR, whole(hours(1, 2)), Granularity.DAY)
    assert got == hours(24, 48)
    # a MONTH table whose month holds one DAY chunk: a free day is a DAY bucket
    got = allocate(T0 + DAY + US_PER_HOUR, whole(hours(0, 24)), Granularity.MONTH)
    assert got == hours(24, 48)


def test_finer_granularities_nest_in_the_preferred_one() -> None:
    assert finer_or_equal(Granularity.MONTH) == [
        Granularity.MONTH,
        Granularity.DAY,
        Granularity.HOUR,
    ]
    assert finer_or_equal(Granularity.WEEK) == [Granularity.WEEK, Granularity.DAY, Granularity.HOUR]
    assert finer_or_equal(Granularity.HOUR) == [Granularity.HOUR]


CHUNK_GRANS = [Granularity.HOUR, Granularity.DAY, Granularity.MONTH]


@st.composite
def layouts(draw: st.DrawFn) -> tuple[list[Interval], Granularity, int]:
    """Non-overlapping visible chunks of several granularities in 2024, a preferred
    granularity and an hour."""
    chunks: list[Interval] = []
    for _ in range(draw(st.integers(0, 6))):
        g = draw(st.sampled_from(CHUNK_GRANS))
        start = g.floor(T0 + draw(st.integers(0, 24 * 90)) * US_PER_HOUR)
        c = Interval.of(start, g.next_start(start))
        if not any(c.overlaps(o) for o in chunks):
            chunks.append(c)
    preferred = draw(st.sampled_from([*CHUNK_GRANS, Granularity.WEEK, Granularity.YEAR]))
    return chunks, preferred, T0 + draw(st.integers(0, 24 * 90)) * US_PER_HOUR


@settings(max_examples=400, deadline=None)
@given(layouts())
def test_allocation_oracle(case: tuple[list[Interval], Granularity, int]) -> None:
    """Against a direct reading of Druid's rule: the chunk holding the hour, else the
    first of the preferred-then-finer buckets free of visible chunks."""
    chunks, preferred, hour = case
    got = allocate(hour, whole(*chunks), preferred)
    assert got.start <= hour < got.end
    holding = [c for c in chunks if c.start <= hour < c.end]
    if holding:
        assert got == holding[0]
        return
    assert not any(got.overlaps(c) for c in chunks)
    tried = finer_or_equal(preferred)
    g = next(g for g in tried if Interval.of(g.floor(hour), g.next_start(g.floor(hour))) == got)
    for coarser in tried[: tried.index(g)]:  # every coarser bucket was taken
        start = coarser.floor(hour)
        assert any(Interval.of(start, coarser.next_start(start)).overlaps(c) for c in chunks)
    root = Granularity.DAY if preferred is Granularity.WEEK else preferred
    table_chunk = Interval.of(preferred.floor(hour), preferred.next_start(preferred.floor(hour)))
    assert table_chunk.contains(got) or root is Granularity.DAY


# -- the write paths ----------------------------------------------------------------


KEYED = SCHEMA.set(1, pa.field("k", pa.int64(), nullable=False))


def rows(*spec: tuple[int, float], schema: pa.Schema = SCHEMA) -> pa.Table:
    """One row per (hour of 2024-01-01, v); ``k`` numbers them."""
    return pa.table(
        {
            "ts": pa.array([dt.datetime(2024, 1, 1) + dt.timedelta(hours=h) for h, _ in spec]),
            "k": pa.array(range(len(spec)), pa.int64()),
            "v": pa.array([v for _, v in spec]),
            "s": pa.array([f"r{i}" for i in range(len(spec))]),
        },
        schema=schema,
    )


def split_day(cat: lamina.Catalog) -> lamina.Table:
    """A DAY table whose 2024-01-01 a major compaction cut into HOUR chunks (1, 5)."""
    t = cat.create_table("ev", SCHEMA, time_column="ts", segment_granularity="DAY")
    t.append(rows((1, 1.0), (5, 2.0)))
    t.compact(mode="major", segment_granularity="HOUR")
    assert sorted(s.interval for s in t.segments()) == [hours(1, 2), hours(5, 6)]
    return t


def chunks_of(t: lamina.Table) -> list[Interval]:
    return sorted({s.interval for s in t.segments()})


def test_an_append_into_a_split_day_goes_hour_by_hour(cat: lamina.Catalog) -> None:
    t = split_day(cat)
    c = t.append(rows((1, 3.0), (3, 4.0), (3, 5.0), (30, 6.0)))
    assert chunks_of(t) == [hours(1, 2), hours(3, 4), hours(5, 6), hours(24, 48)]
    assert sorted(t.to_arrow().column("v").to_pylist()) == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    got = cat.sql("SELECT count(*) AS n, sum(v) AS s FROM ev").to_pylist()
    assert got == [{"n": 6, "s": 21.0}]
    # the row of hour 1 joined the compacted hour's version; one commit for all
    by_chunk = {}
    for s in t.segments():
        by_chunk.setdefault(s.interval, set()).add(s.version)
    assert len(by_chunk[hours(1, 2)]) == 1
    assert {s.commit_id for s in t.segments() if s.commit_id == c.id} == {c.id}
    # the first try, refused at publish, is an aborted commit: it showed nothing
    before = [h for h in t.history() if h.seq is not None and h.id < c.id][-1]
    assert sorted(t.to_arrow(as_of=before.version).column("v").to_pylist()) == [1.0, 2.0]


def test_a_push_and_an_upsert_into_a_split_day(cat: lamina.Catalog) -> None:
    t = split_day(cat)
    t.set_properties(consistent_push=True)  # appends now go through lineage entries
    t.append(rows((3, 4.0)))
    assert hours(3, 4) in chunks_of(t)
    assert t.lineage()[-1].state == "COMPLETED"
    u = cat.create_table(
        "up", KEYED, time_column="ts", segment_granularity="DAY", primary_key=["k"]
    )
    u.upsert(rows((1, 1.0), (5, 2.0), schema=KEYED))
    u.compact(mode="major", segment_granularity="HOUR")
    u.upsert(rows((3, 7.0), schema=KEYED))  # k=0 again: a newer record of the first key
    got = {r["k"]: r["v"] for r in u.to_arrow().to_pylist()}
    assert got == {0: 7.0, 1: 2.0}
    assert hours(3, 4) in chunks_of(u)


def test_a_stream_into_a_split_day_goes_hour_by_hour(cat: lamina.Catalog) -> None:
    """A RecordBatchReader is read once: its pieces are split by the allocation before
    they are written, so the append publishes on its first try (no aborted commit)."""
    t = split_day(cat)
    commits = len(t.history())
    data = rows((1, 3.0), (3, 4.0), (30, 6.0))
    t.append(pa.RecordBatchReader.from_batches(data.schema, data.to_batches(max_chunksize=1)))
    assert chunks_of(t) == [hours(1, 2), hours(3, 4), hours(5, 6), hours(24, 48)]
    assert sorted(t.to_arrow().column("v").to_pylist()) == [1.0, 2.0, 3.0, 4.0, 6.0]
    assert [c.state for c in t.history()[commits:]] == ["COMPLETED"]


def test_hours_a_finer_compaction_cut_out_of_a_month_take_appends(cat: lamina.Catalog) -> None:
    """What a Druid audit found: a DAY table compacted to MONTH, then one day of it to
    HOUR. The month still shows elsewhere, but in that day the hours show: an append
    there goes into the hour (a tombstone's hour too), not into the month the hours
    hide, and a batch that also holds a day the month shows is not refused."""

    def at(day: int, hour: int, v: float) -> dict[str, object]:
        return {"ts": dt.datetime(2024, 1, day, hour), "k": 0, "v": v, "s": "x"}

    t = cat.create_table("m", SCHEMA, time_column="ts", segment_granularity="DAY")
    t.append(pa.Table.from_pylist([at(3, 0, 1.0), at(15, 6, 2.0), at(20, 0, 3.0)], SCHEMA))
    t.compact(mode="major", segment_granularity="MONTH", interval="2024-01-01/2024-02-01")
    t.compact(mode="major", segment_granularity="HOUR", interval="2024-01-15/2024-01-16")
    t.append(pa.Table.from_pylist([at(15, 6, 4.0), at(15, 5, 5.0), at(20, 12, 6.0)], SCHEMA))
    assert sorted(t.to_arrow()["v"].to_pylist()) == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]

    def in_hour(h: int) -> list[int]:
        return [
            s.row_count for s in t.segments() if s.interval == hours(24 * 14 + h, 24 * 14 + h + 1)
        ]

    assert in_hour(6) == [1, 1] and in_hour(5) == [1]
    assert cat.sql("SELECT count(*) AS n FROM m").to_pylist() == [{"n": 6}]
