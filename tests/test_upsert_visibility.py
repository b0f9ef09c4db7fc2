"""Pinot's upsert metadata-manager cases, retold on lamina upsert tables.

The cases come from Apache Pinot's ``ConcurrentMapPartitionUpsertMetadataManagerTest``,
``ConcurrentMapPartitionUpsertMetadataManagerForConsistentDeletesTest`` and
``BasePartitionUpsertMetadataManagerTest`` (pinot-segment-local, package
``org.apache.pinot.segment.local.upsert``); each test names the methods it retells. The
inputs (keys, comparison values, delete flags) are Pinot's; the checks are what Pinot's
record-location map and valid/queryable doc ids imply a query sees.

How Pinot maps onto lamina here:
- a Pinot segment is one upsert commit, written into a day chunk of its own (day = the
  segment's number) so that it can be replaced and removed alone; a consuming segment's
  records are single-record upserts into one day chunk;
- ``addSegment``/``addRecord`` -> ``t.upsert``; ``replaceSegment`` (a reload, an upload
  of the same name, the seal of a consuming segment) -> ``t.overwrite`` of that day,
  which is a new write: its records win ties as a re-upload's do in Pinot, where a
  reload keeps the segment's place (docs/upserts.md, "Which record wins");
  ``removeSegment`` -> ``t.delete_segments`` of the segments the commit wrote;
- a record's ``doc`` column is ``"<segment>:<docId>"``, so every read shows which stored
  record is visible; Pinot's queryable doc ids (valid, not deleted) are what
  ``t.to_arrow()``, ``cat.sql`` and the open records of ``all_versions=True`` must show.

Each case runs on three layouts where it can: a single int key compared by an int64
``cmp`` column, a two-column key (``tenant``, ``pk``) compared by ``cmp``, and a single
key compared by the time column (then every record lies in one chunk, so the cases that
replace a segment use the first two only).

Not retold (lamina has no such feature): metadata and deleted-keys TTL and watermarks
(``testRemoveExpiredPrimaryKeys``, ``testAddSegmentOutOfTTL``,
``testTTLWithNegativeComparisonValues``, ``testManageWatermark``,
``testReplaceSegmentOnReloadRebuildsFromSnapshot``, the TTL sweep of
``testRemoveExpiredDeletedKeys``), preloading (``testPreloadSegment*``,
``testPreloadSegments``), validDocIds/queryableDocIds snapshots (``testTakeSnapshot*``,
``testTakeQueryableDocIdsSnapshot*``, the ``enableSnapshot`` variants, which expect the
same maps), consistency modes and the upsert view (``testConsistencyMode*``,
``testTrackNewlyAddedSegments``), the manager's life cycle (``testStartFinishOperation``
and the no-op calls after ``stop()``), the PROTECTED-mode revert of a consuming segment
(``testProtectedModeRevertsMetadataForConsumingSegmentSeal``,
``testPrevKeyToRecordLocationMapClearedAfterSegmentCommitInNonProtectedMode``), the
configurable hash functions (``testHashPrimaryKey`` is retold as "key order matters"),
and the consistent-deletes manager's distinct-segment counts (its map expectations are
the same as the plain manager's and are checked by the same cases).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pyarrow as pa
import pytest

import lamina
from lamina.errors import SegmentNotFoundError

# every test here runs in both upsert write modes (merge-on-read, copy-on-write)
pytestmark = pytest.mark.usefixtures("write_mode")

T0 = datetime(2024, 1, 1)
SCHEMA = pa.schema(
    [
        pa.field("pk", pa.int64(), nullable=False),
        pa.field("tenant", pa.string(), nullable=False),
        pa.field("ts", pa.timestamp("us")),
        pa.field("cmp", pa.int64()),
        pa.field("doc", pa.string()),
        pa.field("n", pa.int64()),
        pa.field("deleted", pa.bool_()),
    ]
)

Want = dict[int, str]
Pair = tuple[int, str]


@dataclass(frozen=True)
class Layout:
    name: str
    primary_key: tuple[str, ...]
    comparison_column: str | None  # None: the time column, ts = T0 + cmp minutes


PK_CMP = Layout("pk-by-cmp", ("pk",), "cmp")
TENANT_PK_CMP = Layout("tenant-pk-by-cmp", ("tenant", "pk"), "cmp")
PK_TIME = Layout("pk-by-time", ("pk",), None)
ALL_LAYOUTS = pytest.mark.parametrize(
    "layout", [PK_CMP, TENANT_PK_CMP, PK_TIME], ids=lambda x: x.name
)
CHUNKED_LAYOUTS = pytest.mark.parametrize("layout", [PK_CMP, TENANT_PK_CMP], ids=lambda x: x.name)


class Partition:
    """One Pinot partition on a lamina upsert table, with soft checks: every step's
    answers are compared with Pinot's and the mismatches reported together at the end
    (a later step then shows how far a difference carries)."""

    def __init__(
        self,
        cat: lamina.Catalog,
        layout: Layout,
        *,
        deletes: bool = True,
        partial: dict[str, str] | None = None,
    ) -> None:
        self.cat, self.layout = cat, layout
        self.t = cat.create_table(
            "u",
            SCHEMA,
            time_column="ts",
            primary_key=list(layout.primary_key),
            comparison_column=layout.comparison_column,
            delete_column="deleted" if deletes else None,
            partial_upsert=partial,
            segment_granularity="DAY",
        )
        self.mismatches: list[str] = []

    # -- writing -----------------------------------------------------------------------

    def _row(
        self, segment: str, day: int, doc: int, pk: int, cmp: int, deleted: bool | None
    ) -> dict[str, Any]:
        if self.layout.comparison_column is None:
            ts = T0 + timedelta(minutes=cmp)
        else:
            ts = T0 + timedelta(days=day, minutes=doc)
        return {"pk": pk, "tenant": f"t{pk % 3}", "ts": ts, "cmp": cmp,
                "doc": f"{segment}:{doc}", "n": 1, "deleted": deleted}  # fmt: skip

    def records(
        self,
        segment: str,
        day: int,
        pks: Sequence[int],
        cmps: Sequence[int],
        deleted: Sequence[bool | None] | None = None,
    ) -> pa.Table:
        flags: Sequence[bool | None] = deleted if deleted is not None else [False] * len(pks)
        rows = [
            self._row(segment, day, i, pk, cmp, flag)
            for i, (pk, cmp, flag) in enumerate(zip(pks, cmps, flags, strict=True))
        ]
        return pa.Table.from_pylist(rows, schema=SCHEMA)

    def add_segment(
        self,
        segment: str,
        day: int,
        pks: Sequence[int],
        cmps: Sequence[int],
        deleted: Sequence[bool | None] | None = None,
    ) -> lamina.Commit:
        return self.t.upsert(self.records(segment, day, pks, cmps, deleted))

    def add_record(
        self, segment: str, day: int, doc: int, pk: int, cmp: int, deleted: bool = False
    ) -> lamina.Commit:
        row = self._row(segment, day, doc, pk, cmp, deleted)
        return self.t.upsert(pa.Table.from_pylist([row], schema=SCHEMA))

    def replace_segment(
        self,
        segment: str,
        day: int,
        pks: Sequence[int],
        cmps: Sequence[int],
        deleted: Sequence[bool | None] | None = None,
    ) -> lamina.Commit:
        assert self.layout.comparison_column is not None, "a replace needs its own chunk"
        start = T0 + timedelta(days=day)
        data = self.records(segment, day, pks, cmps, deleted)
        return self.t.overwrite(data, interval=(start, start + timedelta(days=1)))

    def segment_ids(self, commit: lamina.Commit) -> list[str]:
        """The live segments holding ``commit``'s records (not the copies a
        copy-on-write upsert made of the files it superseded records in)."""
        return [
            s.id for s in self.t.segments() if s.commit_id == commit.id and s.minor_version == 0
        ]

    def remove_segment(self, commit: lamina.Commit) -> lamina.Commit:
        ids = self.segment_ids(commit)
        assert ids, f"commit {commit.id} has no live segment"
        return self.t.delete_segments(ids)

    # -- reading -----------------------------------------------------------------------

    def answers(self, as_of: int | None = None) -> dict[str, list[Pair]]:
        """The visible (pk, doc) pairs on each read path, sorted; a key shown twice
        shows as two pairs."""
        arrow = self.t.to_arrow(as_of=as_of, columns=["pk", "doc"]).to_pylist()
        every = self.t.to_arrow(as_of=as_of, columns=["pk", "doc"], all_versions=True)
        got = {
            "to_arrow": sorted((r["pk"], r["doc"]) for r in arrow),
            "all_versions": sorted(
                (r["pk"], r["doc"]) for r in every.to_pylist() if r["$valid_until"] is None
            ),
        }
        if as_of is None:
            sql = self.cat.sql("SELECT pk, doc FROM u").to_pylist()
            got["cat.sql"] = sorted((r["pk"], r["doc"]) for r in sql)
        return got

    def expect(self, step: str, want: Want, as_of: int | None = None) -> None:
        wanted = sorted(want.items())
        wrong = {path: pairs for path, pairs in self.answers(as_of).items() if pairs != wanted}
        if len({str(pairs) for pairs in wrong.values()}) == 1:
            paths = ", ".join(wrong)
            shown = next(iter(wrong.values()))
            self.mismatches.append(f"{step} [{paths}]: lamina shows {shown}, Pinot {wanted}")
        else:
            for path, pairs in wrong.items():
                self.mismatches.append(f"{step} [{path}]: lamina shows {pairs}, Pinot {wanted}")

    def expect_never_shown(self, step: str, doc: str) -> None:
        """An out-of-order record: stored, never its key's latest (Pinot's addRecord
        returns false for it)."""
        every = self.t.to_arrow(columns=["doc"], all_versions=True).to_pylist()
        spans = [(r["$valid_from"], r["$valid_until"]) for r in every if r["doc"] == doc]
        if len(spans) != 1 or spans[0][0] != spans[0][1]:
            self.mismatches.append(f"{step}: {doc} is stored as {spans}, never shown in Pinot")

    def n_values(self) -> dict[int, int]:
        return {r["pk"]: r["n"] for r in self.t.to_arrow(columns=["pk", "n"]).to_pylist()}

    def verify(self) -> None:
        if self.mismatches:
            pytest.fail("differences from Pinot:\n" + "\n".join(self.mismatches), pytrace=False)


# The first segment of most of Pinot's cases: keys 0, 1, 2, 0, 1, 0 at 100, 100, 100, 80,
# 120, 100. Key 0's last doc ties with its first (the later doc wins), key 1's doc 4 is
# the greatest; doc 3 is out of order within the segment.
S1_PKS = [0, 1, 2, 0, 1, 0]
S1_CMPS = [100, 100, 100, 80, 120, 100]
# The second: keys 0, 1, 2, 3, 0 at 100, 100, 120, 80, 80. Key 0's doc 0 ties with
# segment 1's latest (the later segment wins), key 1's doc 1 is older than segment 1's.
S2_PKS = [0, 1, 2, 3, 0]
S2_CMPS = [100, 100, 120, 80, 80]


# -- adding, replacing and removing segments -----------------------------------------


@CHUNKED_LAYOUTS
def test_add_replace_remove_segment(cat: lamina.Catalog, layout: Layout) -> None:
    """testAddReplaceRemoveSegment (verifyAddReplaceRemoveSegment), in both the plain
    and the consistent-deletes manager tests."""
    p = Partition(cat, layout)
    s1 = p.add_segment("s1", 1, S1_PKS, S1_CMPS)
    p.expect("add s1", {0: "s1:5", 1: "s1:4", 2: "s1:2"})
    s2 = p.add_segment("s2", 2, S2_PKS, S2_CMPS)
    after_s2: Want = {0: "s2:0", 1: "s1:4", 2: "s2:2", 3: "s2:3"}
    p.expect("add s2", after_s2)
    p.add_segment("empty", 3, [], [])  # Pinot skips an empty segment
    p.expect("add an empty segment", after_s2)

    # Replace s1 with the same records. In Pinot a reload keeps s1's place in the tie
    # order, so key 0 stays in s2. An overwrite in lamina is a new write, as a
    # re-uploaded segment (with a newer creation time) is in Pinot: key 0's tie goes to
    # the copy (see verifyAddReplaceUploadedSegment1 below); key 2 stays in s2 (greater).
    old_s1 = p.segment_ids(s1)
    p.replace_segment("s1r", 1, S1_PKS, S1_CMPS)
    replaced: Want = {0: "s1r:5", 1: "s1r:4", 2: "s2:2", 3: "s2:3"}
    p.expect("replace s1", replaced)
    with contextlib.suppress(SegmentNotFoundError):  # Pinot: a no-op (lamina refuses)
        p.t.delete_segments(old_s1)
    p.expect("remove the replaced s1 again", replaced)

    # Removing s2 takes the keys whose latest record it holds (2 and 3); their older
    # records do not come back.
    p.remove_segment(s2)
    p.expect("remove s2", {0: "s1r:5", 1: "s1r:4"})
    p.verify()


@ALL_LAYOUTS
def test_removing_a_segment_does_not_bring_back_older_records(
    cat: lamina.Catalog, layout: Layout
) -> None:
    """The remove step of verifyAddReplaceRemoveSegment without the reload before it
    (Pinot's removeSegment drops the keys located in the removed segment and restores
    nothing): keys 0, 2 and 3 go, although s1 holds older records of 0 and 2."""
    p = Partition(cat, layout)
    s1 = p.add_segment("s1", 1, S1_PKS, S1_CMPS)
    s2 = p.add_segment("s2", 2, S2_PKS, S2_CMPS)
    p.remove_segment(s2)
    p.expect("remove s2", {1: "s1:4"})
    p.expect("as of s1", {0: "s1:5", 1: "s1:4", 2: "s1:2"}, as_of=s1.version)
    p.expect("as of s2", {0: "s2:0", 1: "s1:4", 2: "s2:2", 3: "s2:3"}, as_of=s2.version)
    p.verify()


@CHUNKED_LAYOUTS
def test_add_replace_remove_segment_with_record_delete(cat: lamina.Catalog, layout: Layout) -> None:
    """testAddReplaceRemoveSegmentWithRecordDelete
    (verifyAddReplaceRemoveSegmentWithRecordDelete), plain and consistent-deletes."""
    p = Partition(cat, layout)
    p.add_segment("s1", 1, S1_PKS, S1_CMPS, [False, False, False, True, True, False])
    # valid: docs 2, 4, 5; doc 4 (key 1) is a delete, so only 2 and 5 are queryable
    p.expect("add s1", {0: "s1:5", 2: "s1:2"})
    s2 = p.add_segment("s2", 2, S2_PKS, S2_CMPS, [False, True, True, False, False])
    # key 1's delete at 100 is older than s1's delete at 120: key 1 stays deleted;
    # key 2's delete at 120 wins; key 0 ties and moves to s2; key 3 is new
    p.expect("add s2", {0: "s2:0", 3: "s2:3"})
    p.add_segment("empty", 3, [], [])
    p.expect("add an empty segment", {0: "s2:0", 3: "s2:3"})

    # an overwrite is a new write (see test_add_replace_remove_segment): key 0's tie
    # goes to the copy
    p.replace_segment("s1r", 1, S1_PKS, S1_CMPS, [False, False, False, True, True, False])
    p.expect("replace s1", {0: "s1r:5", 3: "s2:3"})

    p.remove_segment(s2)
    # key 1's latest record is the copy's delete; key 0's is in the copy too
    p.expect("remove s2", {0: "s1r:5"})
    # that delete (at 120) still wins over an older record of key 1
    p.add_record("m", 4, 0, 1, 110)
    p.expect("an older record of the deleted key 1", {0: "s1r:5"})
    p.verify()


@CHUNKED_LAYOUTS
def test_add_replace_uploaded_segments(cat: lamina.Catalog, layout: Layout) -> None:
    """verifyAddReplaceUploadedSegment1 (a @Test in both manager tests): on a tie an
    uploaded segment wins over an older one by creation time. Pinot's last step, two
    uploaded segments with the same creation time keeping the current record, has no
    counterpart: lamina's commits are totally ordered, so the later one wins."""
    p = Partition(cat, layout)
    p.add_segment("s1", 1, S1_PKS, S1_CMPS)  # created at 1000
    p.expect("add s1", {0: "s1:5", 1: "s1:4", 2: "s1:2"})
    p.add_segment("u2", 2, [0, 3], [100, 80])  # uploaded, also created at 1000
    p.expect("add u2", {0: "u2:0", 1: "s1:4", 2: "s1:2", 3: "u2:1"})
    p.replace_segment("u2r", 2, [0, 3], [100, 80])  # the same name, created at 1020
    p.expect("replace u2", {0: "u2r:0", 1: "s1:4", 2: "s1:2", 3: "u2r:1"})
    p.add_segment("u3", 3, [0], [100])  # created at 1040
    p.expect("add u3", {0: "u3:0", 1: "s1:4", 2: "s1:2", 3: "u2r:1"})
    # In Pinot also created at 1040 (key 0's tie would stay with u3); here a later
    # commit: both ties go to u4.
    p.add_segment("u4", 4, [0, 1], [100, 120])
    p.expect("add u4", {0: "u4:0", 1: "u4:1", 2: "s1:2", 3: "u2r:1"})
    p.verify()


_REPLACEMENTS = {
    # Pinot method: (old keys, old values, new keys, new values)
    "testFullUpsertConsistencyNoneSameDocs": ([10, 20, 30], [1000, 2000, 3000],
                                              [10, 20, 30], [1500, 2500, 3500]),
    "testFullUpsertConsistencyNoneOldSegmentMoreDocs": ([10, 30, 40], [1500, 3500, 4000],
                                                        [10, 30], [1600, 3600]),
    "testFullUpsertRegularConsistencyMode": ([100, 200, 300], [10000, 20000, 30000],
                                             [100], [15000]),
    "testNoRevertForImmutableSegmentReplacement": ([10, 20, 30], [1000, 2000, 3000],
                                                   [10], [1500]),
}  # fmt: skip


@CHUNKED_LAYOUTS
@pytest.mark.parametrize("method", sorted(_REPLACEMENTS))
def test_replacing_a_segment_keeps_only_the_new_records(
    cat: lamina.Catalog, layout: Layout, method: str
) -> None:
    """Replacing an immutable segment: every key of the new one points there; a key
    only the old one had is gone (the last two also in the consistent-deletes test)."""
    old_pks, old_cmps, new_pks, new_cmps = _REPLACEMENTS[method]
    p = Partition(cat, layout)
    p.add_segment("old", 1, old_pks, old_cmps)
    p.expect("add", {k: f"old:{i}" for i, k in enumerate(old_pks)})
    p.replace_segment("new", 1, new_pks, new_cmps)
    p.expect("replace", {k: f"new:{i}" for i, k in enumerate(new_pks)})
    p.verify()


_PARTIAL_REPLACEMENTS = {
    "testPartialUpsertSameDocsReplacement": ([1, 2, 3], [100, 200, 300],
                                             [1, 2, 3], [150, 250, 350]),
    "testPartialUpsertOldSegmentLesserDocs": ([1, 2], [100, 200],
                                              [1, 2, 3, 4], [150, 250, 300, 400]),
}  # fmt: skip


@CHUNKED_LAYOUTS
@pytest.mark.parametrize("method", sorted(_PARTIAL_REPLACEMENTS))
def test_replacing_a_segment_of_a_partial_upsert_table(
    cat: lamina.Catalog, layout: Layout, method: str
) -> None:
    """The same on a partial-upsert table: the replacement's records are taken as they
    are (Pinot merges when a record is ingested, never when a segment is replaced); an
    INCREMENT column shows that nothing was merged from the removed records."""
    old_pks, old_cmps, new_pks, new_cmps = _PARTIAL_REPLACEMENTS[method]
    p = Partition(cat, layout, deletes=False, partial={"n": "INCREMENT"})
    p.add_segment("old", 1, old_pks, old_cmps)
    p.replace_segment("new", 1, new_pks, new_cmps)
    p.expect("replace", {k: f"new:{i}" for i, k in enumerate(new_pks)})
    assert p.n_values() == dict.fromkeys(new_pks, 1)
    p.verify()


_SEALS = {
    # Pinot method: (partial?, consumed keys, consumed values, sealed keys, sealed values)
    "testRevertOnlyAppliesForConsumingSegmentSeal": (False, [10, 20, 30], [1000, 2000, 3000],
                                                     [10, 20], [1500, 2500]),
    "testPartialUpsertOldSegmentTriggerReversion": (True, [1, 2, 3, 4], [100, 200, 300, 400],
                                                    [1, 3], [150, 350]),
}  # fmt: skip


@CHUNKED_LAYOUTS
@pytest.mark.parametrize("method", sorted(_SEALS))
def test_sealing_a_consuming_segment(cat: lamina.Catalog, layout: Layout, method: str) -> None:
    """A consuming segment (records added one by one into one chunk) sealed into an
    immutable segment that lacks some of its keys (default consistency mode, so no
    revert): only the sealed segment's keys remain (also in the consistent-deletes
    test for the first)."""
    partial, pks, cmps, sealed_pks, sealed_cmps = _SEALS[method]
    p = Partition(cat, layout, deletes=not partial, partial={"n": "INCREMENT"} if partial else None)
    for doc, (pk, cmp) in enumerate(zip(pks, cmps, strict=True)):
        p.add_record("m", 2, doc, pk, cmp)
    p.expect("consume", {k: f"m:{i}" for i, k in enumerate(pks)})
    p.replace_segment("sealed", 2, sealed_pks, sealed_cmps)
    p.expect("seal", {k: f"sealed:{i}" for i, k in enumerate(sealed_pks)})
    assert p.n_values() == dict.fromkeys(sealed_pks, 1)
    p.verify()


# -- adding records to a consuming segment -------------------------------------------


@ALL_LAYOUTS
def test_add_record(cat: lamina.Catalog, layout: Layout) -> None:
    """testAddRecord (verifyAddRecord), plain and consistent-deletes."""
    p = Partition(cat, layout)
    p.add_segment("s1", 1, [0, 1, 2], [100, 120, 100])
    p.add_record("m", 2, 0, 3, 100)  # a new key
    p.expect("new key 3", {0: "s1:0", 1: "s1:1", 2: "s1:2", 3: "m:0"})
    p.add_record("m", 2, 1, 2, 120)  # newer than s1's
    p.expect("newer key 2", {0: "s1:0", 1: "s1:1", 2: "m:1", 3: "m:0"})
    p.add_record("m", 2, 2, 1, 100)  # older than s1's 120
    p.expect("older key 1", {0: "s1:0", 1: "s1:1", 2: "m:1", 3: "m:0"})
    p.expect_never_shown("older key 1", "m:2")
    p.add_record("m", 2, 3, 0, 100)  # a tie: the newer record wins
    p.expect("tied key 0", {0: "m:3", 1: "s1:1", 2: "m:1", 3: "m:0"})
    p.verify()


@ALL_LAYOUTS
def test_add_records_in_one_input(cat: lamina.Catalog, layout: Layout) -> None:
    """testAddRecord's records as one upsert: the same end state."""
    p = Partition(cat, layout)
    p.add_segment("s1", 1, [0, 1, 2], [100, 120, 100])
    p.add_segment("m", 2, [3, 2, 1, 0], [100, 120, 100, 100])
    p.expect("one input", {0: "m:3", 1: "s1:1", 2: "m:1", 3: "m:0"})
    p.verify()


@ALL_LAYOUTS
def test_add_out_of_order_record(cat: lamina.Catalog, layout: Layout) -> None:
    """testAddOutOfOrderRecord (verifyAddOutOfOrderRecord), plain and consistent-deletes."""
    p = Partition(cat, layout)
    p.add_segment("s1", 1, [0, 1, 2], [100, 120, 100])
    p.add_record("m", 2, 0, 3, 100)  # a new key: in order
    p.expect("new key 3", {0: "s1:0", 1: "s1:1", 2: "s1:2", 3: "m:0"})
    p.add_record("m", 2, 1, 2, 80)  # out of order
    p.expect("key 2 at 80", {0: "s1:0", 1: "s1:1", 2: "s1:2", 3: "m:0"})
    p.expect_never_shown("key 2 at 80", "m:1")
    p.add_record("m", 2, 2, 2, 150)  # in order
    p.expect("key 2 at 150", {0: "s1:0", 1: "s1:1", 2: "m:2", 3: "m:0"})
    p.verify()


@ALL_LAYOUTS
def test_add_record_with_delete_column(cat: lamina.Catalog, layout: Layout) -> None:
    """testAddRecordWithDeleteColumn (verifyAddRecordWithDeleteColumn), plain and
    consistent-deletes; also the steps of the plain verifyRemoveExpiredDeletedKeys
    before its TTL sweep, which are the same."""
    p = Partition(cat, layout)
    p.add_segment("s1", 1, [0, 1, 2], [100, 120, 100])
    p.expect("add s1", {0: "s1:0", 1: "s1:1", 2: "s1:2"})
    p.add_record("m", 2, 0, 3, 100)
    p.expect("new key 3", {0: "s1:0", 1: "s1:1", 2: "s1:2", 3: "m:0"})
    p.add_record("m", 2, 1, 2, 120, deleted=True)  # deletes s1's latest of key 2
    p.expect("delete key 2", {0: "s1:0", 1: "s1:1", 3: "m:0"})
    p.add_record("m", 2, 2, 3, 150, deleted=True)  # deletes m's latest of key 3
    p.expect("delete key 3", {0: "s1:0", 1: "s1:1"})
    p.add_record("m", 2, 3, 3, 200)  # a greater value revives key 3
    p.expect("revive key 3", {0: "s1:0", 1: "s1:1", 3: "m:3"})
    p.verify()


@ALL_LAYOUTS
def test_deletes_that_tie_or_follow_in_a_consuming_segment(
    cat: lamina.Catalog, layout: Layout
) -> None:
    """The consistent-deletes verifyRemoveExpiredDeletedKeys before its TTL sweep: a
    delete of a key whose latest record is in the consuming segment, and a delete that
    ties with an older segment's record (the delete, being newer, wins)."""
    p = Partition(cat, layout)
    p.add_segment("s1", 1, [0, 1, 2], [100, 120, 100])
    p.add_record("m", 2, 0, 3, 100)
    p.add_record("m", 2, 1, 2, 150, deleted=True)
    p.expect("delete key 2", {0: "s1:0", 1: "s1:1", 3: "m:0"})
    p.add_record("m", 2, 2, 3, 120, deleted=True)
    p.expect("delete key 3", {0: "s1:0", 1: "s1:1"})
    p.add_record("m", 2, 3, 1, 120, deleted=True)  # ties with s1's key 1
    p.expect("delete key 1 on a tie", {0: "s1:0"})
    p.verify()


# -- queryable records and ties within one segment -----------------------------------


_QUERYABLE: dict[str, tuple[list[bool | None], Want]] = {
    # case: (delete flags, visible records)
    "some-deleted": ([False, False, False, True, True, False], {0: "s1:5", 2: "s1:2"}),
    "none-deleted": ([False] * 6, {0: "s1:5", 1: "s1:4", 2: "s1:2"}),
    "delete-column-null": ([None] * 6, {0: "s1:5", 1: "s1:4", 2: "s1:2"}),
    "all-deleted": ([True] * 6, {}),
}


@ALL_LAYOUTS
@pytest.mark.parametrize("case", sorted(_QUERYABLE))
def test_get_queryable_doc_ids(cat: lamina.Catalog, layout: Layout, case: str) -> None:
    """testGetQueryableDocIds (plain and consistent-deletes): of the valid docs 2, 4
    and 5, the queryable ones are those not marked deleted; a null in the delete
    column is not a delete."""
    flags, want = _QUERYABLE[case]
    p = Partition(cat, layout)
    p.add_segment("s1", 1, S1_PKS, S1_CMPS, flags)
    p.expect(case, want)
    p.verify()


@ALL_LAYOUTS
def test_resolve_comparison_ties(cat: lamina.Catalog, layout: Layout) -> None:
    """BasePartitionUpsertMetadataManagerTest.testResolveComparisonTies: within one
    segment whose comparison values all tie, each key keeps its last doc."""
    p = Partition(cat, layout)
    p.add_segment("s1", 1, S1_PKS, [0] * 6)
    p.expect("all tied", {0: "s1:5", 1: "s1:4", 2: "s1:2"})
    p.verify()


# -- multi-column keys ---------------------------------------------------------------

UUIDS = pa.schema(
    [
        pa.field("a", pa.string(), nullable=False),
        pa.field("b", pa.string(), nullable=False),
        pa.field("c", pa.string(), nullable=False),
        pa.field("ts", pa.timestamp("us")),
        pa.field("version", pa.int64()),
        pa.field("doc", pa.string()),
    ]
)


def test_hash_primary_key_order_matters(cat: lamina.Catalog) -> None:
    """testHashPrimaryKey (plain and consistent-deletes): the key (uuid-1, uuid-2,
    uuid-3) and its reverse hash differently, so they are two keys; an update of one
    leaves the other."""
    t = cat.create_table(
        "k3", UUIDS, time_column="ts", primary_key=["a", "b", "c"], comparison_column="version"
    )

    def rec(key: tuple[str, str, str], version: int, doc: str) -> dict[str, Any]:
        return {"a": key[0], "b": key[1], "c": key[2], "ts": T0, "version": version, "doc": doc}

    fwd, rev = ("uuid-1", "uuid-2", "uuid-3"), ("uuid-3", "uuid-2", "uuid-1")
    t.upsert(pa.Table.from_pylist([rec(fwd, 1, "x"), rec(rev, 1, "y")], schema=UUIDS))
    t.upsert(pa.Table.from_pylist([rec(fwd, 2, "z")], schema=UUIDS))
    want = [("uuid-1", "z"), ("uuid-3", "y")]
    assert sorted((r["a"], r["doc"]) for r in t.to_arrow().to_pylist()) == want
    got = cat.sql("SELECT a, doc FROM k3 ORDER BY a").to_pylist()
    assert [(r["a"], r["doc"]) for r in got] == want
