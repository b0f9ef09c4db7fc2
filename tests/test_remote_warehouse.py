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

        def plan_then_replace(name: str) -> Any:
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
