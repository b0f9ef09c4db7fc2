"""Test data builders."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa

SCHEMA = pa.schema(
    [
        ("ts", pa.timestamp("us")),
        ("k", pa.int64()),
        ("v", pa.float64()),
        ("s", pa.string()),
    ]
)


def events(
    days: int = 3,
    per_day: int = 100,
    start: str = "2024-01-01",
    seed: int = 0,
    value: float | None = None,
) -> pa.Table:
    """``per_day`` rows in each of ``days`` days from ``start`` (times spread in the day)."""
    rng = np.random.default_rng(seed)
    base = np.datetime64(start, "us")
    day_us = 86_400_000_000
    offsets = np.concatenate(
        [d * day_us + np.sort(rng.integers(0, day_us, per_day)) for d in range(days)]
    )
    n = len(offsets)
    return pa.table(
        {
            "ts": pa.array(base + offsets.astype("timedelta64[us]")),
            "k": pa.array(np.arange(n, dtype=np.int64)),
            "v": pa.array(np.full(n, value) if value is not None else rng.random(n)),
            "s": pa.array([f"row{i}" for i in range(n)]),
        }
    )


def at(*args: int) -> dt.datetime:
    return dt.datetime(*args)  # type: ignore[arg-type]


def signed_in(token: str) -> dict[str, str]:
    """The console's sign-in cookie for a server with ``token``: it opens reads (GET)
    only, so POSTs without the Bearer header are still refused."""
    from lamina.rest.auth import READ_COOKIE, read_pass

    return {READ_COOKIE: read_pass(token)}
