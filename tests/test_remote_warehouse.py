"""A warehouse on an object store: segment files and key index snapshots in S3.

The store is moto's S3 server (an S3 implementation speaking the HTTP protocol, run in
a thread of this process); lamina reaches it through pyarrow's own S3 filesystem, as it
would reach AWS. ``cat.sql`` reads them too: DuckDB opens the files through that same
filesystem (registered with it as an fsspec filesystem), not through an extension.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import lamina

moto_server = pytest.importorskip("moto.server", reason="moto[server] is a dev dependency")

BUCKET = "lamina-test"
SCHEMA = pa.schema(
    [
        pa.field("k", pa.int64(), nullable=False),
        pa.field("ts", pa.timestamp("us")),
        pa.field("v", pa.int64()),
    ]
)
T0 = 1_699_920_000_000_000  # a midnight (UTC): keys 0-23 fall on day 1, 24-47 on day 2
HOUR = 3_600_000_000


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """host:port of an S3 server holding the bucket ``BUCKET``."""
    import os

    import pyarrow.fs as pafs

    creds = {"AWS_ACCESS_KEY_ID": "lamina", "AWS_SECRET_ACCESS_KEY": "lamina"}
    saved = {k: os.environ.get(k) for k in creds}
    os.environ.update(creds)
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"{host}:{port}"
    fs = pafs.S3FileSystem(
        endpoint_override=endpoint, scheme="http", region="us-east-1", allow_bucket_creation=True
    )
    fs.create_dir(BUCKET)
    try:
        yield endpoint
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture
def remote(s3_endpoint: str, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(catalog URL, warehouse URI) of a new lake under its own prefix of the bucket."""
    prefix = tmp_path.name
    uri = f"s3://{BUCKET}/{prefix}?endpoint_override={s3_endpoint}&scheme=http&region=us-east-1"
    yield f"sqlite:///{tmp_path}/catalog.db", uri


def _rows(keys: range | list[int], v: int) -> pa.Table:
    ks = np.asarray(list(keys), np.int64)
    return pa.table(
        {"k": ks, "ts": pa.array(T0 + ks * HOUR, pa.timestamp("us")), "v": np.full(len(ks), v)},
        schema=SCHEMA,
    )


def _latest(t: lamina.Table) -> dict[int, int]:
    got = t.to_arrow(columns=["k", "v"])
    return dict(zip(got["k"].to_pylist(), got["v"].to_pylist(), strict=True))


def test_appends_overwrites_and_time_travel_on_an_object_store(remote: tuple[str, str]) -> None:
    catalog, uri = remote
    with lamina.connect(catalog=catalog, warehouse=uri) as cat:
        assert not cat.warehouse.local
        t = cat.create_table("e", SCHEMA, time_column="ts", segment_granularity="DAY")
        first = t.append(_rows(range(48), 1))
        t.overwrite(_rows(range(24), 2))  # day 1 replaced
        assert sorted(_latest(t).items()) == [(k, 2) for k in range(24)] + [
            (k, 1) for k in range(24, 48)
        ]
        assert t.to_arrow(as_of=first).num_rows == 48
        assert all(cat.warehouse.exists(s.location) for s in t.segments())
        assert cat.find_orphans() == []
        got = cat.sql("SELECT v, count(*) AS n FROM e GROUP BY v ORDER BY v").to_pylist()
        assert got == [{"v": 1, "n": 24}, {"v": 2, "n": 24}]
        day2 = "SELECT count(*) AS n FROM e WHERE ts >= '2023-11-15'"  # a time bound
        assert cat.sql(day2).to_pylist() == [{"n": 24}]


def test_an_upsert_table_saves_and_loads_its_key_index_in_the_object_store(
    remote: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index snapshot goes to TABLE/_keys/ in the bucket; a process without the
    index loads it from there instead of rebuilding from the data files, and upserts
    as the rules say; a damaged snapshot is rebuilt from the files instead."""
    from lamina.meta.keyindex import replay as key_replay
    from lamina.meta.keyindex import snapshots as key_snapshots

    monkeypatch.setattr(key_snapshots, "SAVE_EVERY", 50)
    catalog, uri = remote
    with lamina.connect(catalog=catalog, warehouse=uri) as cat:
        t = cat.create_table("u", SCHEMA, time_column="ts", primary_key=["k"])
        t.upsert(_rows(range(60), 1))
        t.upsert(_rows(range(30, 120), 2))
        t._handle.ctx.keys.wait()
        saved = max(i.path for i in cat.warehouse.list_files(cat.warehouse.path("u/_keys")))
        assert saved.endswith(".keys") and "/u/_keys/000000000002-" in saved  # the newest
        keys, tid = t._handle.ctx.keys, t._handle.record.id

        rebuilt: list[int] = []
        real_rebuild = key_replay.rebuild

        def rebuild(*args: Any) -> Any:
            rebuilt.append(1)
            return real_rebuild(*args)

        monkeypatch.setattr(key_replay, "rebuild", rebuild)
        keys.forget(tid)  # as a new process
        t.upsert(_rows([0, 119, 500], 3))
        assert rebuilt == []  # loaded from the bucket
        want = {**dict.fromkeys(range(30), 1), **dict.fromkeys(range(30, 120), 2)}
        want.update(dict.fromkeys([0, 119, 500], 3))
        assert _latest(t) == want

        # a snapshot cut short in the store: rebuilt from the data files, same answer
        data = cat.warehouse.fs.open_input_file(saved).read()
        with cat.warehouse.fs.open_output_stream(saved) as out:
            out.write(data[: len(data) // 2])
        keys.forget(tid)
        t.upsert(_rows([1], 4))
        assert rebuilt == [1]
        assert _latest(t) == {**want, 1: 4}
        assert cat.find_orphans() == []


def test_cat_sql_over_the_object_store_applies_deletion_vectors_and_added_columns(
    remote: tuple[str, str],
) -> None:
    """An upsert table's hidden rows stay hidden in SQL (its deletion vectors joined to
    files named by the warehouse's protocol), and files from before ``add_columns``
    read their new column as nulls."""
    catalog, uri = remote
    with lamina.connect(catalog=catalog, warehouse=uri) as cat:
        t = cat.create_table("u", SCHEMA, time_column="ts", primary_key=["k"])
        t.upsert(_rows(range(48), 1))
        t.upsert(_rows(range(10, 20), 2))
        got = cat.sql("SELECT v, count(*) AS n FROM u GROUP BY v ORDER BY v").to_pylist()
        assert got == [{"v": 1, "n": 38}, {"v": 2, "n": 10}]
        assert t.scan().deletes  # the SQL above applied them

        e = cat.create_table("e", SCHEMA, time_column="ts")
        e.append(_rows(range(4), 1))
        e.add_columns(pa.field("w", pa.string()))
        e.append(_rows(range(4, 6), 2).append_column("w", pa.array(["x", "y"])))
        got = cat.sql("SELECT k, w FROM e ORDER BY k").to_pylist()
        assert got == [{"k": k, "w": None} for k in range(4)] + [
            {"k": 4, "w": "x"},
            {"k": 5, "w": "y"},
        ]


def test_cat_sql_plans_again_when_retention_deleted_files_it_had_read(
    remote: tuple[str, str],
) -> None:
    """Files the engine's filesystem has opened before (it keeps them open) and that
    retention deleted under a plan: the read fails as a missing file, and the query
    is planned again on the newer snapshot."""
    import datetime as dt

    from lamina.engines.duckdb import SqlEngine
    from lamina.meta.tables import latest_seqs
    from lamina.read import plan

    catalog, uri = remote
    with lamina.connect(catalog=catalog, warehouse=uri) as cat:
        t = cat.create_table("e", SCHEMA, time_column="ts")
        t.set_properties(replaced_segments_retention="0s")
        t.append(_rows(range(48), 1))
        later = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=5)
        calls = 0

        def plan_then_replace(name: str, as_of: None = None) -> Any:
            """Plans; the second time, an overwrite and retention delete its files."""
            nonlocal calls
            calls += 1
            got = plan(cat.context, name)
            if calls == 2:
                t.overwrite(_rows(range(48), 2))
                assert cat.run_retention(now=later).segment_files == 2
            return got

        engine = SqlEngine(
            lambda names: latest_seqs(cat.context.db, names),
            plan_then_replace,
            filesystem=cat.warehouse.fsspec(),
        )
        try:
            query = "SELECT v, count(*) AS n FROM e GROUP BY v ORDER BY v"
            assert engine.sql(query).to_pylist() == [{"v": 1, "n": 48}]  # files opened
            t.append(_rows([100], 3))  # a day of its own; a new version: planned again
            assert engine.sql(query).to_pylist() == [{"v": 2, "n": 48}, {"v": 3, "n": 1}]
            assert calls == 3
        finally:
            engine.close()


def _files(cat: lamina.Catalog, table: str) -> list[str]:
    """The table's files in the bucket, relative to the warehouse root."""
    root = cat.warehouse.root + "/"
    return sorted(i.path.removeprefix(root) for i in cat.warehouse.list_files(root + table))


def test_minor_and_major_compaction_on_an_object_store(remote: tuple[str, str]) -> None:
    catalog, uri = remote
    with lamina.connect(catalog=catalog, warehouse=uri) as cat:
        t = cat.create_table("e", SCHEMA, time_column="ts", segment_granularity="DAY")
        for v in range(3):
            t.append(_rows(range(v * 16, v * 16 + 16), v))
        want = _latest(t)
        assert len(t.segments()) == 4  # keys 0-23 on day 1, 24-47 on day 2
        assert t.compact(mode="minor", engine="local") is not None
        assert len(t.segments()) == 2 and _latest(t) == want
        assert t.compact(mode="major", engine="local", sort_by=["v"]) is not None
        assert len(t.segments()) == 2 and _latest(t) == want
        assert all(cat.warehouse.exists(s.location) for s in t.segments())
        got = cat.sql("SELECT count(*) AS n, sum(v) AS s FROM e").to_pylist()
        assert got == [{"n": 48, "s": sum(want.values())}]


def test_spark_compaction_refuses_an_object_store_and_auto_runs_here(
    remote: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spark's own Parquet reader and writer do not reach the bucket: engine='spark'
    is refused before anything is locked or written, and 'auto' compacts a run of any
    size in this process."""
    catalog, uri = remote
    monkeypatch.setenv("LAMINA_LOCAL_MAX_BYTES", "1")  # every run "too big" for here
    with lamina.connect(catalog=catalog, warehouse=uri) as cat:
        t = cat.create_table("e", SCHEMA, time_column="ts", segment_granularity="DAY")
        for v in range(2):
            t.append(_rows(range(v * 24, v * 24 + 24), v))
            t.append(_rows(range(v * 24, v * 24 + 24), v + 5))
        before = len(t.history())
        with pytest.raises(lamina.CompactionError, match="engine='local'"):
            t.compact(mode="minor", engine="spark")
        assert len(t.history()) == before and t.locks() == []
        assert t.compact(mode="minor") is not None  # auto: here, not Spark
        assert len(t.segments()) == 2


def test_a_fresh_catalog_reads_an_upsert_table_and_its_key_index_from_the_store(
    remote: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process (a new catalog object, nothing in memory) loads the key index
    snapshot from the bucket instead of rebuilding it from the data files."""
    from lamina.meta.keyindex import replay as key_replay
    from lamina.meta.keyindex import snapshots as key_snapshots

    monkeypatch.setattr(key_snapshots, "SAVE_EVERY", 50)
    catalog, uri = remote
    with lamina.connect(catalog=catalog, warehouse=uri) as cat:
        t = cat.create_table("u", SCHEMA, time_column="ts", primary_key=["k"])
        t.upsert(_rows(range(100), 1))
        t.upsert(_rows(range(50, 150), 2))
    assert any(f.startswith("u/_keys/") for f in _files(cat, "u"))  # saved at close

    def no_rebuild(*args: Any) -> Any:
        raise AssertionError("the key index was rebuilt, not loaded")

    monkeypatch.setattr(key_replay, "rebuild", no_rebuild)
    with lamina.connect(catalog=catalog, warehouse=uri) as cat:
        t = cat.load_table("u")
        t.upsert(_rows([0, 149, 500], 3))
        want = {**dict.fromkeys(range(50), 1), **dict.fromkeys(range(50, 150), 2)}
        want.update(dict.fromkeys([0, 149, 500], 3))
        assert _latest(t) == want
        got = cat.sql("SELECT v, count(*) AS n FROM u GROUP BY v ORDER BY v").to_pylist()
        assert got == [{"v": 1, "n": 49}, {"v": 2, "n": 99}, {"v": 3, "n": 3}]


def test_the_change_feed_on_an_object_store(remote: tuple[str, str]) -> None:
    catalog, uri = remote
    with lamina.connect(catalog=catalog, warehouse=uri) as cat:
        t = cat.create_table("e", SCHEMA, time_column="ts", segment_granularity="DAY")
        first = t.append(_rows(range(48), 1))
        t.overwrite(_rows(range(24), 2))  # day 1: 24 rows out, 24 in
        changes = t.read_changes(0, columns=["k", "v"])
        kinds = list(zip(changes["_change"].to_pylist(), changes["v"].to_pylist(), strict=True))
        assert kinds.count(("insert", 1)) == 48
        assert kinds.count(("delete", 1)) == 24 and kinds.count(("insert", 2)) == 24
        assert t.read_changes(first.seq).num_rows == 48


def test_retention_deletes_replaced_segments_and_orphans_in_the_store(
    remote: tuple[str, str],
) -> None:
    import datetime as dt

    catalog, uri = remote
    with lamina.connect(catalog=catalog, warehouse=uri) as cat:
        t = cat.create_table("e", SCHEMA, time_column="ts", segment_granularity="DAY")
        t.set_properties(replaced_segments_retention="0s", orphan_grace_period="1h")
        t.append(_rows(range(48), 1))
        replaced = [s.location for s in t.segments() if s.interval.start == T0]
        t.overwrite(_rows(range(24), 2))
        orphan = cat.warehouse.path("e/data/c0000009999/part-00000-dead.parquet")
        with cat.warehouse.fs.open_output_stream(orphan) as out:
            out.write(b"a write that died")
        report = cat.run_retention()
        assert (report.segment_files, report.orphan_files) == (1, 0)  # orphan: grace
        assert not cat.warehouse.exists(replaced[0]) and cat.warehouse.exists(orphan)
        later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=2)
        report = cat.run_retention(now=later)
        assert (report.segment_files, report.orphan_files) == (0, 1)
        assert not any(cat.warehouse.exists(p) for p in [*replaced, orphan])
        assert cat.find_orphans() == [] and t.to_arrow().num_rows == 48
        assert len(_files(cat, "e")) == len(t.segments(all=True)) == 2


def test_dropping_a_table_in_the_store(
    remote: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its files go after the commit; a process that dies in between leaves them, and
    retention deletes them once they are older than the grace period (not while a
    table has the name: then they are that table's orphans)."""
    import datetime as dt

    from lamina import failpoints
    from lamina.maintenance import drops

    catalog, uri = remote
    with lamina.connect(catalog=catalog, warehouse=uri) as cat:
        t = cat.create_table("e", SCHEMA, time_column="ts")
        t.append(_rows(range(48), 1))
        cat.sql("SELECT count(*) FROM e")
        cat.drop_table("e")
        assert _files(cat, "e") == [] and cat.list_tables() == []
        t = cat.create_table("e", SCHEMA, time_column="ts")
        assert t.to_arrow().num_rows == 0
        assert cat.sql("SELECT count(*) AS n FROM e").to_pylist() == [{"n": 0}]
        t.append(_rows(range(10), 1))

        made: list[lamina.Table] = []

        def create_again(**_: Any) -> None:
            made.append(cat.create_table("e", SCHEMA, time_column="ts"))
            made[0].append(_rows(range(5), 2))

        with failpoints.armed("catalog.drop.before_remove_files", create_again):
            cat.drop_table("e")
        assert _latest(made[0]) == dict.fromkeys(range(5), 2)  # its files are kept
        t = made[0]

        def die(**_: Any) -> None:
            raise KeyboardInterrupt  # as a process killed after the commit

        with (
            failpoints.armed("catalog.drop.before_remove_files", die),
            pytest.raises(KeyboardInterrupt),
        ):
            cat.drop_table("e")
        left = _files(cat, "e")
        assert left and cat.list_tables() == []
        later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=2)
        report = cat.run_retention(now=later)  # seconds old: a drop may be committing
        assert report.drop_folders_deleted == 0 and _files(cat, "e") == left
        monkeypatch.setattr(drops, "MIN_AGE_S", 0)
        assert cat.run_retention().drop_folders_deleted == 0  # within the grace period
        assert cat.run_retention(now=later).drop_folders_deleted == 1
        assert _files(cat, "e") == []
        assert [i.path for i in cat.warehouse.list_files(cat.warehouse.root)] == [
            cat.warehouse.path(cat.warehouse.MARKER)
        ]


def test_the_command_line_on_an_object_store(remote: tuple[str, str], tmp_path: Path) -> None:
    import pyarrow.parquet as pq
    from typer.testing import CliRunner

    from lamina.cli import app

    catalog, uri = remote
    runner = CliRunner(env={"LAMINA_CATALOG": catalog, "LAMINA_WAREHOUSE": uri, "NO_COLOR": "1"})

    def ok(*args: str) -> str:
        result = runner.invoke(app, list(args))
        assert result.exit_code == 0, result.output
        return result.stdout

    schema = "k:int64,ts:timestamp[us],v:int64"
    ok("create-table", "e", "--time-column", "ts", "--granularity", "day", "--schema", schema)
    for v in range(3):
        pq.write_table(_rows(range(v * 16, v * 16 + 16), v), tmp_path / f"part{v}.parquet")
        ok("ingest", "e", str(tmp_path / f"part{v}.parquet"))
    out = ok("query", "SELECT count(*) AS n, sum(v) AS s FROM e", "--format", "csv")
    assert out.split() == ["n,s", "48,48"]
    ok("compact", "e")
    with lamina.connect(catalog=catalog, warehouse=uri) as cat:
        assert len(cat.load_table("e").segments()) == 2
    out = ok("query", "SELECT count(*) AS n, sum(v) AS s FROM e", "--format", "csv")
    assert out.split() == ["n,s", "48,48"]


def test_the_rest_controller_on_an_object_store(remote: tuple[str, str]) -> None:
    import warnings

    from lamina.rest import create_app
    from tests.helpers import signed_in

    with warnings.catch_warnings():  # newer Starlette prefers httpx2 for its test client
        warnings.filterwarnings("ignore", message=".*httpx2")
        from fastapi.testclient import TestClient

    catalog, uri = remote
    auth = {"Authorization": "Bearer t0ken"}
    with lamina.connect(catalog=catalog, warehouse=uri) as cat:
        t = cat.create_table("e", SCHEMA, time_column="ts", segment_granularity="DAY")
        for v in range(3):
            t.append(_rows(range(v * 16, v * 16 + 16), v))
        with TestClient(create_app(cat, token="t0ken"), cookies=signed_in("t0ken")) as client:
            assert [x["name"] for x in client.get("/tables").json()] == ["e"]
            segs = client.get("/tables/e/segments").json()
            assert sum(s["rows"] for s in segs) == 48 and len(segs) == 4
            r = client.post("/tables/e/compact", json={"mode": "minor"}, headers=auth)
            assert r.status_code == 200, r.text
            assert (r.json()["segmentsBefore"], r.json()["segmentsAfter"]) == (4, 2)
            day1 = [s["id"] for s in client.get("/tables/e/segments").json()][:1]
            r = client.post(
                "/tables/e/startReplaceSegments",
                json={"segmentsFrom": day1, "segmentsTo": []},
                headers=auth,
            )
            assert r.status_code == 200, r.text
            entry = r.json()["segmentLineageEntryId"]
            r = client.post(
                "/tables/e/endReplaceSegments",
                params={"segmentLineageEntryId": entry},
                headers=auth,
            )
            assert r.status_code == 200, r.text
        assert t.count() == 24
