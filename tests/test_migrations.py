"""The catalog schema is versioned; existing catalogs upgrade in place."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Connection, inspect, text

import lamina
from lamina import errors
from lamina.meta import schema
from tests.helpers import SCHEMA, events


def _add_note_column(conn: Connection) -> None:
    conn.execute(text("ALTER TABLE lamina_commits ADD COLUMN note VARCHAR(64)"))


def test_existing_catalog_upgrades_in_place(
    catalog_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wh = str(tmp_path / "wh")
    with lamina.connect(catalog=catalog_url, warehouse=wh) as cat:
        cat.create_table("events", schema=SCHEMA, time_column="ts").append(events())
    monkeypatch.setattr(schema, "MIGRATIONS", [*schema.MIGRATIONS, _add_note_column])
    monkeypatch.setattr(schema, "SCHEMA_VERSION", len(schema.MIGRATIONS))
    with lamina.connect(catalog=catalog_url, warehouse=wh) as cat:
        with cat.engine.connect() as conn:
            cols = {c["name"] for c in inspect(conn).get_columns("lamina_commits")}
            version = conn.execute(text("SELECT version FROM lamina_schema")).scalar()
        assert "note" in cols and version == len(schema.MIGRATIONS)
        assert cat.load_table("events").count() == 300  # data survived the upgrade
    # opening it again does not re-run the migration
    with lamina.connect(catalog=catalog_url, warehouse=wh) as cat:
        assert cat.list_tables() == ["events"]


def test_catalog_newer_than_library_is_refused(catalog_url: str, tmp_path: Path) -> None:
    wh = str(tmp_path / "wh")
    with lamina.connect(catalog=catalog_url, warehouse=wh) as cat, cat.engine.begin() as conn:
        conn.execute(text("UPDATE lamina_schema SET version = 99"))
    with pytest.raises(errors.CatalogUnavailableError, match="upgrade lamina"):
        lamina.connect(catalog=catalog_url, warehouse=wh)


def test_v1_catalog_gains_lineage(catalog_url: str, tmp_path: Path) -> None:
    """A catalog of schema version 1 (before lineage) upgrades to the current one."""
    wh = str(tmp_path / "wh")
    with lamina.connect(catalog=catalog_url, warehouse=wh) as cat:
        cat.create_table("events", schema=SCHEMA, time_column="ts").append(events())
        with cat.engine.begin() as conn:  # back to the v1 shape
            conn.execute(text("DROP TABLE lamina_lineage"))
            conn.execute(text("ALTER TABLE lamina_segments DROP COLUMN suffix"))
            conn.execute(text("ALTER TABLE lamina_tables DROP COLUMN purged_seq"))
            conn.execute(text("UPDATE lamina_schema SET version = 1"))
    with lamina.connect(catalog=catalog_url, warehouse=wh) as cat:
        with cat.engine.connect() as conn:
            insp = inspect(conn)
            assert insp.has_table("lamina_lineage")
            assert "suffix" in {c["name"] for c in insp.get_columns("lamina_segments")}
        t = cat.load_table("events")
        assert t.count() == 300 and t.lineage() == []


def test_v2_catalog_gains_span_bound(catalog_url: str, tmp_path: Path) -> None:
    """Upgrading to v3 records each table's longest segment span from its rows, so
    interval reads of segments written before the upgrade still find them."""
    wh = str(tmp_path / "wh")
    with lamina.connect(catalog=catalog_url, warehouse=wh) as cat:
        t = cat.create_table("events", schema=SCHEMA, time_column="ts", segment_granularity="MONTH")
        t.append(events(days=40, per_day=2, start="2024-01-01"))
        cat.create_table("dim", schema=SCHEMA).append(events(days=1, per_day=3))
        with cat.engine.begin() as conn:  # back to the v2 shape
            conn.execute(text("DROP INDEX ix_segments_start"))
            conn.execute(text("ALTER TABLE lamina_tables DROP COLUMN max_span_us"))
            conn.execute(text("UPDATE lamina_schema SET version = 2"))
    with lamina.connect(catalog=catalog_url, warehouse=wh) as cat:
        with cat.engine.connect() as conn:
            spans = dict(conn.execute(text("SELECT name, max_span_us FROM lamina_tables")).all())
            assert "ix_segments_start" in {
                i["name"] for i in inspect(conn).get_indexes("lamina_segments")
            }
        assert spans["events"] >= 31 * 86_400_000_000  # January's chunk
        assert spans["dim"] == schema.MAX_SPAN_US  # the ALL chunk: unbounded
        t = cat.load_table("events")
        assert t.to_arrow(interval="2024-01-20/2024-01-21").num_rows == 2
        assert cat.load_table("dim").count() == 3


def test_a_v3_catalog_upgrades_to_many_writers(catalog_url: str, tmp_path: Path) -> None:
    """v4 adds the one-open-commit index, v6 drops it again (optimistic concurrency)
    and adds the commits' base seq and footprint; two writers can then be open."""
    wh = str(tmp_path / "wh")
    with lamina.connect(catalog=catalog_url, warehouse=wh) as cat:
        cat.create_table("events", schema=SCHEMA, time_column="ts").append(events())
        with cat.engine.begin() as conn:  # back to the v3 shape
            conn.execute(text("ALTER TABLE lamina_commits DROP COLUMN base_seq"))
            conn.execute(text("ALTER TABLE lamina_commits DROP COLUMN footprint"))
            conn.execute(text("UPDATE lamina_schema SET version = 3"))
    with lamina.connect(catalog=catalog_url, warehouse=wh) as cat:
        with cat.engine.connect() as conn:
            indexes = {i["name"] for i in inspect(conn).get_indexes("lamina_commits")}
            cols = {c["name"] for c in inspect(conn).get_columns("lamina_commits")}
        assert "ux_commits_one_open" not in indexes
        assert {"base_seq", "footprint"} <= cols
        t = cat.load_table("events")
        with t.transaction() as a, t.transaction() as b:
            a.append(events(days=1, per_day=2, start="2024-03-01"))
            b.append(events(days=1, per_day=3, start="2024-03-02"))
        assert t.count() == 305


def test_a_v8_catalog_gains_minor_versions(catalog_url: str, tmp_path: Path) -> None:
    """v9 gives every existing segment its first-generation shard fields (root range
    (pid, pid + 1), minor version 0, a group of one) in place; appends keep their ids
    and the table compacts."""
    wh = str(tmp_path / "wh")
    with lamina.connect(catalog=catalog_url, warehouse=wh) as cat:
        t = cat.create_table("events", schema=SCHEMA, time_column="ts")
        for seed in range(3):
            t.append(events(days=2, per_day=4, seed=seed))
        with cat.engine.begin() as conn:  # back to the v8 shape
            for col in ("minor_version", "root_start", "root_end", "aug_size"):
                conn.execute(text(f"ALTER TABLE lamina_segments DROP COLUMN {col}"))
            conn.execute(text("ALTER TABLE lamina_locks DROP COLUMN segment_ids"))
            conn.execute(text("ALTER TABLE lamina_commits DROP COLUMN inflight_at"))
            conn.execute(text("UPDATE lamina_schema SET version = 8"))
    with lamina.connect(catalog=catalog_url, warehouse=wh) as cat:
        with cat.engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT partition_id, root_start, root_end, minor_version, aug_size "
                    "FROM lamina_segments"
                )  # fmt: skip
            ).all()
        assert rows and all((r[1], r[2], r[3], r[4]) == (r[0], r[0] + 1, 0, 1) for r in rows)
        t = cat.load_table("events")
        assert {c.inflight_at for c in t.history()} == {None}  # not recorded before v9
        c = t.append(events(days=1, per_day=2, seed=9))
        assert [s.partition_id for s in t.segments() if s.id in c.added] == [3]
        assert t.history()[-1].inflight_at is not None
        t.compact()
        assert len(t.segments()) == 2 and t.count() == 26
