"""The console's timeline picture: which (chunk interval, version) groups are visible,
partly covered or overshadowed, and what each bucket of a view adds up to — checked
against a brute-force oracle on a grid of hours (Hypothesis) — and the catalog's
groups kept current commit by commit (``TimelineCache``) against grouping anew."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lamina
from lamina.core import console as rules
from lamina.core.interval import Interval
from lamina.meta import console as queries
from tests.helpers import SCHEMA, events

H = 3_600_000_000


@st.composite
def group_sets(draw: Any) -> rules.Groups:
    """Groups on a 48-hour grid: chunks of 1, 2, 3, 6 or 24 hours, versions 1-5."""
    rows = []
    seen = set()
    for _ in range(draw(st.integers(0, 30))):
        width = draw(st.sampled_from([1, 2, 3, 6, 24]))
        start = draw(st.integers(0, 48 // width - 1)) * width
        version = draw(st.integers(1, 5))
        if (start, width, version) in seen:
            continue
        seen.add((start, width, version))
        segs = draw(st.integers(1, 4))
        core = draw(st.integers(0, segs))
        present = draw(st.integers(0, core))
        live = draw(st.sampled_from([0, segs, draw(st.integers(0, segs))]))
        tomb = draw(st.integers(0, segs))
        minor = draw(st.sampled_from([0, 0, 1]))
        rows.append(
            (start * H, (start + width) * H, version, segs, core, present, live, tomb,
             segs * 10, segs * 100, draw(st.integers(0, segs)), minor, draw(st.integers(0, segs)))
        )  # fmt: skip
    return rules.Groups.of(rows)


def oracle_states(groups: rules.Groups) -> list[str]:
    """Hour by hour: the hours of a group that a higher complete live version holds."""
    out = []
    complete, removed = groups.complete, groups.removed
    for i in range(len(groups)):
        if removed[i]:
            out.append("overshadowed")
            continue
        hours = range(int(groups["start"][i]) // H, int(groups["end"][i]) // H)
        covered = [
            any(
                complete[j] and not removed[j] and groups["version"][j] > groups["version"][i]
                and groups["start"][j] <= h * H < groups["end"][j]
                for j in range(len(groups))
            )
            for h in hours
        ]  # fmt: skip
        out.append("overshadowed" if all(covered) else "partial" if any(covered) else "visible")
    return out


@settings(max_examples=300, deadline=None)
@given(group_sets())
def test_group_states_match_an_hour_by_hour_oracle(groups: rules.Groups) -> None:
    got = [rules.STATE_NAMES[s] for s in rules.group_states(groups)]
    assert got == oracle_states(groups)


@settings(max_examples=200, deadline=None)
@given(group_sets(), st.sampled_from([1, 2, 5, 12, 48]))
def test_buckets_add_up_their_groups(groups: rules.Groups, width: int) -> None:
    edges = list(range(0, 48 * H + 1, width * H))
    locks = [Interval.of(2 * H, 5 * H)]
    buckets = rules.aggregate(groups, edges, locks)
    states = oracle_states(groups)
    assert [(b.start, b.end) for b in buckets] == list(zip(edges, edges[1:], strict=False))
    for b in buckets:
        inside = [
            i for i in range(len(groups))
            if groups["start"][i] < b.end and groups["end"][i] > b.start
        ]  # fmt: skip
        shown = [i for i in inside if states[i] != "overshadowed"]
        assert b.segments == sum(int(groups["live"][i]) for i in inside)
        assert b.rows == sum(int(groups["rows"][i]) for i in shown)
        assert b.bytes == sum(int(groups["bytes"][i]) for i in shown)
        assert b.small == sum(int(groups["small"][i]) for i in inside)
        assert b.chunks == len({(int(groups["start"][i]), int(groups["end"][i])) for i in inside})
        assert b.locks == (1 if b.start < 5 * H and b.end > 2 * H else 0)
        want = {}
        for i in inside:
            v = int(groups["version"][i])
            want.setdefault(v, set()).add(states[i])
        cells = {c.version: c.state for c in b.versions}
        assert cells == {v: s.pop() if len(s) == 1 else "partial" for v, s in want.items()}
        assert [c.version for c in b.versions] == sorted(cells, reverse=True)
        assert b.visible_version == max(
            (v for v, s in cells.items() if s != "overshadowed"), default=None
        )


def test_no_groups_make_empty_buckets() -> None:
    buckets = rules.aggregate(rules.Groups.of([]), [0, H, 2 * H], [])
    assert [(b.segments, b.versions, b.visible_version) for b in buckets] == [
        (0, [], None),
        (0, [], None),
    ]


def _sorted(groups: rules.Groups) -> list[tuple[int, ...]]:
    return sorted(zip(*(groups[c].tolist() for c in rules.GROUP_COLUMNS), strict=True))


def test_kept_groups_catch_up_with_every_kind_of_commit(
    cat: lamina.Catalog,
) -> None:
    """Appends, an overwrite, a compaction, row deletes (deletion vectors), a push and
    its revert (lineage hides, then shows): after each, the kept groups equal the
    table grouped anew."""
    kept = queries.TimelineCache()
    db = cat.context.db
    t = cat.create_table("ev", SCHEMA, "ts", "DAY", consistent_push=True)

    def same() -> None:
        whole = Interval.of(-(2**62), 2**62)
        assert _sorted(kept.groups(db, "ev", 5)) == _sorted(
            queries.timeline_groups(db, "ev", whole, 5)
        )

    same()  # an empty table
    with t.push() as p:
        p.append(events(days=3, per_day=4))
    same()
    for i in range(3):
        t.append(events(days=1, per_day=2, seed=i, start="2024-01-02"))
        same()
    t.overwrite(events(days=1, per_day=3, seed=9), "2024-01-01/2024-01-02")
    same()
    t.compact(mode="minor")
    same()
    t.delete("k % 2 = 0")
    same()
    with t.push() as p:
        p.append(events(days=1, per_day=5, start="2024-01-03", seed=7))
    same()
    t.revert_replace(t.lineage()[-1].id)
    same()
    cat.drop_table("ev")
    cat.create_table("ev", SCHEMA, "ts", "DAY").append(events(days=1, per_day=1))
    same()  # a new table under the name: grouped anew


def test_many_touched_chunks_group_the_table_again(cat: lamina.Catalog) -> None:
    kept = queries.TimelineCache()
    kept.MOST_KEYS = 2
    t = cat.create_table("ev", SCHEMA, "ts", "DAY")
    t.append(events(days=1, per_day=2))
    assert len(kept.groups(cat.context.db, "ev", 5)) == 1
    t.append(events(days=5, per_day=2, start="2024-02-01"))
    assert len(kept.groups(cat.context.db, "ev", 5)) == 6


@pytest.mark.parametrize("rows", [0, 3])
def test_groups_of_no_rows_have_the_columns(rows: int) -> None:
    g = rules.Groups.of([tuple(range(13))] * rows)
    assert len(g) == rows and all(g[c].dtype == np.int64 for c in rules.GROUP_COLUMNS)
    assert pa.array(g["start"]).type == pa.int64()


def test_table_totals_catch_up_with_every_kind_of_commit(cat: lamina.Catalog) -> None:
    """Kept totals (segments, rows, bytes, small ones) equal totals read anew after
    appends, an overwrite, a compaction, a property change and a dropped table."""
    kept = queries.TotalsCache()
    db = cat.context.db

    def small(props: Any) -> int:
        return int(props.get("target_rows_per_segment", "100")) // 2

    def same() -> None:
        assert kept.totals(db, small) == queries.TotalsCache().totals(db, small)

    a = cat.create_table("a", SCHEMA, "ts", "DAY")
    b = cat.create_table("b", SCHEMA, "ts", "DAY")
    same()
    for i in range(3):
        a.append(events(days=2, per_day=30 + i, seed=i))
        same()
    b.append(events(days=1, per_day=70))
    a.overwrite(events(days=1, per_day=5, seed=7), "2024-01-01/2024-01-02")
    same()
    a.compact(mode="minor")
    same()
    b.set_properties(target_rows_per_segment=1000)  # a new small threshold
    same()
    cat.drop_table("a")
    same()
    assert [n for n, _, _, _ in kept.totals(db, small).values()] == [1]  # b's one segment


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(0, 100), min_size=1, max_size=8, unique=True),
    st.lists(st.tuples(st.integers(-20, 120), st.integers(1, 50)), max_size=8),
)
def test_overlaps_count_each_interval_in_every_bucket_it_touches(
    cuts: list[int], spans: list[tuple[int, int]]
) -> None:
    edges = sorted(cuts)
    intervals = [Interval.of(a, a + w) for a, w in spans]
    got = rules.overlap_counts(edges, intervals)
    want = [
        sum(1 for iv in intervals if iv.start < hi and iv.end > lo)
        for lo, hi in zip(edges, edges[1:], strict=False)
    ]
    assert got == want
