"""Deletion vectors kept between reads (:class:`lamina.meta.deletes.Known`): a catalog
that read a snapshot fetches, at its next read of a newer one, only the vector rows
committed since. Every read through such a catalog must equal a read through a new
one, which fetches them all: after upserts, deletes, row-level changes, compactions
and retention, and after reads back in time."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

import lamina
from tests.test_upsert import SCHEMA, rows


def _seen(cat: lamina.Catalog, name: str, as_of: int | None = None) -> list[tuple[object, ...]]:
    t = cat.load_table(name)
    got = t.to_arrow(as_of=as_of).select(["key", "value"]).to_pylist()
    return sorted((r["key"], r["value"]) for r in got)


def _sql(cat: lamina.Catalog, name: str) -> list[tuple[object, ...]]:
    got = cat.sql(f'SELECT key, value FROM "{name}"').to_pylist()
    return sorted((r["key"], r["value"]) for r in got)


@pytest.mark.parametrize("seed", range(2))
def test_reads_from_kept_vectors_equal_reads_that_fetch_them_all(
    catalog_url: str, tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    wh = str(tmp_path / "wh")
    props = {"replaced_segments_retention": "0s"}
    with lamina.connect(catalog=catalog_url, warehouse=wh) as cat:
        u = cat.create_table(
            "u", SCHEMA, time_column="ts", primary_key="key", delete_column="deleted",
            properties=props,
        )  # fmt: skip
        p = cat.create_table("p", SCHEMA, time_column="ts", properties=props)
        for step in range(30):
            keys = rng.sample(range(30), rng.randint(1, 12))
            day = rng.randrange(3) * 24 * 60  # three days: several files
            batch = rows(*((f"k{k}", day + step, step * 100 + k) for k in keys))
            op = rng.choice(["upsert", "upsert", "tombstone", "rowlevel", "compact", "retention"])
            if op == "upsert":
                u.upsert(batch)
                p.append(batch)
            elif op == "tombstone":
                u.upsert(rows(*((f"k{k}", day + step, -1, True) for k in keys[:3])))
            elif op == "rowlevel":
                p.delete(f"value % 7 = {rng.randrange(7)}")
                u.update(f"value % 5 = {rng.randrange(5)}", set={"value": "value + 1"})
            elif op == "compact":
                u.compact()
                p.compact()
            else:
                cat.run_retention()
            back = rng.random() < 0.2  # a read back in time between two latest reads
            if back and len(u.history()) > 2:
                v = rng.choice(u.history()[1:]).version
                with lamina.connect(catalog=catalog_url, warehouse=wh) as fresh:
                    try:
                        want = _seen(fresh, "u", v)
                    except lamina.SnapshotNotFoundError:  # retention took it
                        want = None
                    if want is not None:
                        assert _seen(cat, "u", v) == want, (step, v)
            with lamina.connect(catalog=catalog_url, warehouse=wh) as fresh:
                for name in ("u", "p"):
                    assert _seen(cat, name) == _seen(fresh, name), (step, op, name)
                    assert _sql(cat, name) == _sql(fresh, name), (step, op, name)
        # the long-lived catalog did start from what it kept
        assert u.history()[-1].version in {k.seq for k in cat.context.vectors.values()}
