"""Columnar planning through the catalog: segment manifests plus the rows changed since.

Thresholds are lowered so that every plan goes columnar and manifests are written
often; after every step each completed snapshot, whole and over an interval, must plan
exactly as the object planner plans the same catalog rows.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from sqlalchemy import select

import lamina
import lamina.read
from lamina import failpoints
from lamina.core.interval import Interval
from lamina.core.scan import ScanPlan, plan_scan
from lamina.meta.schema import manifests
from tests.helpers import SCHEMA, events

DAY = 86_400_000_000
JAN1 = 1_704_067_200_000_000  # 2024-01-01


@pytest.fixture
def t(cat: lamina.Catalog, monkeypatch: pytest.MonkeyPatch) -> lamina.Table:
    monkeypatch.setattr(lamina.read, "COLUMNAR_AT", 1)
    monkeypatch.setattr(lamina.read, "MANIFEST_EVERY", 3)
    return cat.create_table("m", SCHEMA, time_column="ts", segment_granularity="DAY")


def manifest_rows(cat: lamina.Catalog) -> list[tuple[int, str]]:
    with cat.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(select(manifests.c.seq, manifests.c.location))]


def object_plan(t: lamina.Table, as_of: int | None, iv: Interval | None) -> ScanPlan:
    return plan_scan(t.snapshot(as_of, interval=iv), iv)


def check_every_snapshot(t: lamina.Table) -> None:
    """Each completed commit, whole and over two intervals: columnar == objects."""
    intervals = [None, Interval.of(JAN1 + DAY // 2, JAN1 + 2 * DAY), Interval.of(JAN1, JAN1 + DAY)]
    for c in [None] + [c.version for c in t.history() if c.state == "COMPLETED"]:
        for iv in intervals:
            try:
                want = object_plan(t, c, iv)
            except lamina.errors.SnapshotNotFoundError:
                continue
            got = t.scan(as_of=c, interval=iv)
            assert got.columns is not None or len(want) == 0, "planned over columns"
            assert got == want, (c, iv)
            assert got.row_count == want.row_count


def test_appends_overwrites_and_deletes_plan_as_objects_do(
    t: lamina.Table, cat: lamina.Catalog
) -> None:
    for i in range(4):
        t.append(events(days=3, per_day=5, seed=i))
        check_every_snapshot(t)
    assert manifest_rows(cat), "a whole-table plan wrote a manifest"
    t.overwrite(events(days=1, per_day=4, seed=9))
    check_every_snapshot(t)
    t.overwrite(
        events(days=2, per_day=3, seed=8, start="2024-01-02"), interval=("2024-01-02", "2024-01-04")
    )
    check_every_snapshot(t)
    victim = t.segments()[0].id
    t.delete_segments([victim])
    check_every_snapshot(t)
    assert victim not in {task.segment.id for task in t.scan().tasks}
    assert t.count() == t.to_arrow().num_rows


def test_lineage_pushes_and_rollbacks_plan_as_objects_do(
    t: lamina.Table, cat: lamina.Catalog
) -> None:
    t.set_properties(consistent_push="true")
    t.append(events(days=3, per_day=5))
    t.refresh(events(days=3, per_day=4, seed=1))
    check_every_snapshot(t)
    with t.push() as p:
        p.append(events(days=2, per_day=2, seed=2))
        check_every_snapshot(t)  # the push is not visible yet
    check_every_snapshot(t)
    t.revert_replace(t.lineage()[-1].id)
    check_every_snapshot(t)
    assert manifest_rows(cat)


def test_retention_drops_manifests_that_name_deleted_rows(
    t: lamina.Table, cat: lamina.Catalog
) -> None:
    """A manifest names rows; once retention deletes some, it must not plan again
    (else a reverted push's segments, no longer hidden by a dropped entry, would show)."""
    t.set_properties(consistent_push="true", replaced_segments_retention="0s")
    t.append(events(days=3, per_day=5))
    entry = t.start_replace([], [])
    with t.push() as p:  # visible, then rolled back
        p.append(events(days=3, per_day=3, seed=3))
    t.revert_replace(t.lineage()[-1].id)
    t.revert_replace(entry, force=True)
    for _ in range(3):
        t.append(events(days=1, per_day=1, seed=4))
    t.scan()  # writes a manifest holding the reverted segments (hidden by lineage)
    files = manifest_rows(cat)
    assert files
    cat.run_retention(now=dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1))
    assert manifest_rows(cat) == [] or all(f not in manifest_rows(cat) for f in files)
    for _, rel in files:
        assert not (Path(cat.warehouse.root) / rel).exists()
    check_every_snapshot(t)
    assert t.to_arrow().num_rows == 15 + 3


@pytest.mark.parametrize("how", ["delete", "replace"])
def test_a_manifest_read_before_a_core_partition_went_is_not_recorded(
    t: lamina.Table, cat: lamina.Catalog, how: str
) -> None:
    """Removing one core partition of a chunk version zeroes the core count of the
    rest in place (so they stay visible) and drops the manifests. A reader that read
    the rows before that and writes its manifest after must not record it: its stale
    core counts would make the chunk incomplete, hiding every row of it, in every
    later plan (and in every manifest built from it)."""
    t.append(events(days=1, per_day=6, value=1.0))
    t.compact(mode="major", target_rows_per_segment=2)  # three core partitions of two
    p0 = next(s for s in t.segments() if s.partition_id == 0)
    assert p0.num_core_partitions == 3
    ran: list[bool] = []

    def removing_first(**_: object) -> None:  # the removal lands between read and write
        if ran:  # once: the other connection's own plans are not held up
            return
        ran.append(True)
        other = lamina.connect(catalog=str(cat.engine.url), warehouse=cat.warehouse.location)
        with other:
            o = other.load_table("m")
            if how == "delete":
                o.delete_segments([p0.id])
            else:
                entry = o.start_replace([p0.id], [])
                w = o.push()
                w.entry = entry
                w.append(events(days=1, per_day=1, value=5.0))
                o.end_replace(entry)

    t.append(events(days=1, per_day=1, value=4.0, start="2024-01-03"))
    with failpoints.armed("read.plan.before_manifest_write", removing_first):
        t.scan()  # plans the latest snapshot; its manifest is written after the removal
    assert ran, "the removal ran"
    want = [1.0] * 4 + [4.0] + ([5.0] if how == "replace" else [])
    assert sorted(t.to_arrow()["v"].to_pylist()) == want  # got: only 4.0 (and 5.0)
    check_every_snapshot(t)


def test_a_manifest_deleted_under_a_reader_is_planned_without(
    t: lamina.Table, cat: lamina.Catalog
) -> None:
    for i in range(3):
        t.append(events(days=2, per_day=2, seed=i))
    t.scan()
    ((_, rel),) = manifest_rows(cat)
    (Path(cat.warehouse.root) / rel).unlink()  # lost, or retention mid-read
    assert t.scan() == object_plan(t, None, None)  # planned from the rows instead
    ((_, fresh),) = manifest_rows(cat)  # and a new manifest replaced the lost one
    assert fresh != rel and (Path(cat.warehouse.root) / fresh).exists()
    check_every_snapshot(t)


@pytest.mark.parametrize("flip", [2382, 1240, -40, 700])
def test_a_damaged_manifest_is_planned_around(
    t: lamina.Table, cat: lamina.Catalog, flip: int
) -> None:
    """A bit flipped anywhere in a manifest (its name carries its bytes' digest) is
    never read: before, some flips gave a plan short of rows, others a crash (SIGSEGV)
    in Arrow's reader, with no error."""
    for i in range(4):
        t.append(events(days=4, per_day=12, seed=i))
    t.scan()
    ((_, rel),) = manifest_rows(cat)
    path = Path(cat.warehouse.root) / rel
    data = bytearray(path.read_bytes())
    data[flip % len(data)] ^= 0x20
    path.write_bytes(bytes(data))
    assert t.scan() == object_plan(t, None, None)  # from the rows
    assert t.count() == 4 * 48
    ((_, fresh),) = manifest_rows(cat)  # and a new manifest replaced the damaged one
    assert fresh != rel
    check_every_snapshot(t)


def test_manifest_files_no_row_names_are_orphans(t: lamina.Table, cat: lamina.Catalog) -> None:
    """A reader that died between writing a manifest and registering it, or a
    manifest row a deletion dropped, left its file for good: retention now deletes it."""
    for i in range(3):
        t.append(events(days=2, per_day=2, seed=i))
    t.scan()
    ((_, kept),) = manifest_rows(cat)
    stray = Path(cat.warehouse.root) / "m" / "_manifests" / "m000000000001-dead-0.arrow"
    stray.write_bytes(b"written, never registered")
    assert cat.find_orphans() == ["m/_manifests/m000000000001-dead-0.arrow"]
    cat.run_retention(now=dt.datetime.now(dt.UTC) + dt.timedelta(days=1))
    assert not stray.exists() and (Path(cat.warehouse.root) / kept).exists()
    assert t.scan() == object_plan(t, None, None)


def test_a_manifest_that_cannot_be_written_never_fails_the_read(
    t: lamina.Table, cat: lamina.Catalog
) -> None:
    for i in range(3):
        t.append(events(days=2, per_day=2, seed=i))
    (Path(cat.warehouse.root) / "m" / "_manifests").write_text("not a directory")
    assert t.scan() == object_plan(t, None, None)
    assert manifest_rows(cat) == []


def test_time_travel_plans_from_an_older_manifest_without_writing_one(
    t: lamina.Table, cat: lamina.Catalog
) -> None:
    for i in range(4):
        t.append(events(days=2, per_day=2, seed=i))
    first = t.history()[-1].version  # the oldest commit
    t.scan()
    written = manifest_rows(cat)
    assert t.scan(as_of=first) == object_plan(t, first, None)
    assert manifest_rows(cat) == written


def test_a_manifest_written_before_the_overwrite_columns_reads_with_defaults(
    tmp_path: Path,
) -> None:
    """Manifests from before minor versions lack four columns: they read as first
    generation (minor 0, root range (p, p + 1), group of 1) and plan as before."""
    import pyarrow as pa

    from lamina.core.columnar import SEGMENT_SCHEMA, segment_table
    from lamina.io.manifest import read_manifest
    from lamina.io.warehouse import Warehouse

    new = segment_table(
        {
            "start_us": [JAN1, JAN1],
            "end_us": [JAN1 + DAY, JAN1 + DAY],
            "version": [1, 1],
            "partition_id": [0, 1],
            "num_core_partitions": [2, 2],
            "location": ["m/a.parquet", "m/b.parquet"],
        }
    )
    old_fields = [
        f
        for f in SEGMENT_SCHEMA
        if f.name not in ("minor_version", "root_start", "root_end", "aug_size")
    ]
    old = new.select([f.name for f in old_fields])
    wh = Warehouse(str(tmp_path))
    with pa.OSFile(str(tmp_path / "old.arrow"), "wb") as out, pa.ipc.new_file(out, old.schema) as w:
        w.write_table(old)
    got = read_manifest(wh, "old.arrow")
    assert got.schema == SEGMENT_SCHEMA
    assert got.equals(new)
