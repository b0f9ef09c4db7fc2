"""Pinot's partial-upsert strategies on Arrow columns: how a new record's value merges
with the stored one, vectorized (for all but the two overwrites, a null on either
side takes the other value)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lamina.core.comparison import total_order
from lamina.core.upsert_spec import Strategy
from lamina.errors import UpsertError

__all__ = ["merge"]


def merge(strategy: Strategy, prev: pa.Array, new: pa.Array) -> pa.Array:
    """Per row, ``new`` merged into ``prev`` by ``strategy`` (a null ``prev``: none)."""
    return _MERGERS[strategy](prev, new)


def _numpy(arr: pa.Array | pa.ChunkedArray, dtype: type) -> np.ndarray:
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=dtype)


def _concat_lists(a: pa.Array, b: pa.Array) -> pa.Array:
    """Per row a + b (a null list counts as empty); null only where both are null."""
    n = len(a)
    la = _numpy(pc.fill_null(pc.list_value_length(a), 0), np.int64)
    lb = _numpy(pc.fill_null(pc.list_value_length(b), 0), np.int64)
    va, vb = pc.list_flatten(a), pc.list_flatten(b)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(la + lb, out=offsets[1:])
    start_a = np.cumsum(la) - la
    start_b = len(va) + np.cumsum(lb) - lb
    row = np.repeat(np.arange(n), la + lb)
    k = np.arange(offsets[-1]) - offsets[row]
    src = np.where(k < la[row], start_a[row] + k, start_b[row] + k - la[row])
    vals = pa.concat_arrays([va, vb]).take(pa.array(src, pa.int64()))
    mask = pa.array(~(_numpy(a.is_valid(), bool) | _numpy(b.is_valid(), bool)))
    off_type = pa.int64() if pa.types.is_large_list(a.type) else pa.int32()
    cls = pa.LargeListArray if pa.types.is_large_list(a.type) else pa.ListArray
    return cls.from_arrays(pa.array(offsets, off_type), vals, type=a.type, mask=mask)


def _sorted_set(lists: pa.Array) -> pa.Array:
    """Per row the sorted distinct elements (null elements last, kept once); floats in
    the order and equality of Java's ``Double.compareTo`` (Pinot's TreeSet): -0.0
    below 0.0, NaN above everything and equal to itself."""
    n = len(lists)
    lens = _numpy(pc.fill_null(pc.list_value_length(lists), 0), np.int64)
    row = np.repeat(np.arange(n), lens)
    vals = pc.list_flatten(lists)
    key = vals
    if pa.types.is_floating(vals.type):  # one NaN, then Java's order as int64 keys
        wide = vals.cast(pa.float64())
        key = total_order(pc.if_else(pc.is_nan(wide), math.nan, wide))
    idx = pc.sort_indices(
        pa.table({"r": row, "v": key}),
        [("r", "ascending"), ("v", "ascending")],  # nulls at the end
    )
    r, v, k = row[_numpy(idx, np.int64)], vals.take(idx), key.take(idx)
    keep = np.ones(len(r), bool)
    if len(r) > 1:
        differ = _numpy(pc.fill_null(pc.not_equal(k[1:], k[:-1]), True), bool)
        both_null = _numpy(pc.and_(k[1:].is_null(), k[:-1].is_null()), bool)
        keep[1:] = (r[1:] != r[:-1]) | (differ & ~both_null)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(r[keep], minlength=n), out=offsets[1:])
    off_type = pa.int64() if pa.types.is_large_list(lists.type) else pa.int32()
    cls = pa.LargeListArray if pa.types.is_large_list(lists.type) else pa.ListArray
    mask = pa.array(~_numpy(lists.is_valid(), bool))
    return cls.from_arrays(
        pa.array(offsets, off_type), v.filter(pa.array(keep)), type=lists.type, mask=mask
    )


def _union(p: pa.Array, q: pa.Array) -> pa.Array:
    both = pc.and_(p.is_valid(), q.is_valid())
    return pc.if_else(both, _sorted_set(_concat_lists(p, q)), pc.coalesce(q, p))


def _increment(p: pa.Array, q: pa.Array) -> pa.Array:
    """The sum, a null taking the other value: integers wrap around on overflow, as
    Java's do; decimals add exactly (Pinot goes through a double), and a sum past the
    column's precision is an UpsertError."""
    if pa.types.is_decimal(p.type):
        try:
            total = pc.add_checked(p, q).cast(p.type)
        except pa.ArrowInvalid:
            raise UpsertError(
                f"INCREMENT overflows the {p.type} column: widen its precision"
            ) from None
        return pc.coalesce(total, p, q)
    return pc.coalesce(pc.add(p, q), p, q)


def _signed_zeros(p: pa.Array, q: pa.Array, res: pa.Array, sign: int) -> pa.Array:
    """``res`` (MAX: ``sign`` 1, MIN: -1) where ``p`` and ``q`` are both zeros of floats
    as Java's ``Math.max``/``Math.min`` (Pinot's) take them: 0.0 above -0.0. The IEEE sum
    of two zeros is -0.0 only when both are: their MAX; MIN is the negated sum of the
    negations."""
    if not pa.types.is_floating(res.type):
        return res
    both = pc.fill_null(pc.and_(pc.equal(p, 0), pc.equal(q, 0)), False)
    if not pc.any(both).as_py():
        return res
    zero = pc.add(p, q) if sign > 0 else pc.negate(pc.add(pc.negate(p), pc.negate(q)))
    return pc.if_else(both, zero, res)


def _extreme(p: pa.Array, q: pa.Array, sign: int) -> pa.Array:
    """MAX (``sign`` 1) or MIN (-1) of each pair, a null taking the other value. Zoned
    timestamps (which pyarrow has no kernel for) compare as their UTC instants."""
    t = p.type
    if pa.types.is_timestamp(t) and t.tz is not None:
        return _extreme(p.cast(pa.int64()), q.cast(pa.int64()), sign).cast(t)
    pick = pc.max_element_wise if sign > 0 else pc.min_element_wise
    return _signed_zeros(p, q, pick(p, q, skip_nulls=True), sign)


_MERGERS: dict[Strategy, Callable[[pa.Array, pa.Array], pa.Array]] = {
    Strategy.OVERWRITE: lambda p, q: pc.coalesce(q, p),
    Strategy.FORCE_OVERWRITE: lambda p, q: q,
    Strategy.IGNORE: lambda p, q: pc.coalesce(p, q),
    Strategy.INCREMENT: _increment,
    Strategy.APPEND: _concat_lists,
    Strategy.UNION: _union,
    Strategy.MAX: lambda p, q: _extreme(p, q, 1),
    Strategy.MIN: lambda p, q: _extreme(p, q, -1),
}
