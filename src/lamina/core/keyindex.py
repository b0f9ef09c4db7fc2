"""The primary-key index of an upsert table: where each key's latest record is stored.

Pure (numpy and pyarrow, no I/O); :mod:`lamina.io.keyindex` saves and loads it.

**Keys** are 128-bit hashes of the key columns (:mod:`lamina.core.keyhash`), held as
:data:`KEY_DTYPE` arrays: the index never keeps the key values themselves.

**Entries** map a key to (segment code: int32 chosen by the caller, row position in
that segment's file: uint32, comparison value: int64 or float64, tombstone flag). The
caller keeps the segment-code -> segment-id mapping and the commit seq the index
reflects.

**Layout** (LSM-style, no per-key Python object): a base run, a delta run and up to
eight fresh runs (one per recent put's new keys), each a set of parallel numpy arrays
sorted by the key's high word (entries of one high word contiguous). Queries are
sorted, then searched with numpy's binary search; a few queries into a big base use a
directory of its high words' top bits instead, reading a few adjacent slots. A lookup
remembers where it found each key, so a put of the same keys right after need not
search again. A put or remove of a key already held updates its slot in place; new
keys make a fresh run; fresh runs merge into the delta, and the delta into the base
once it exceeds ``max(merge_threshold, len(base) // 32)`` entries. Removed keys leave a
vacant slot until the next merge. Memory: 16 B of hash + 17 B of entry = 33 B per key, ~0.5 B of
directory, the vacant slots and, during a merge, a second copy. Not thread-safe: one
writer, or a lock around it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from lamina.core.keyhash import INDEX_SCHEMA_VERSION, KEY_DTYPE
from lamina.core.keyruns import Lookup, Run, argsort_u64, merge_runs
from lamina.errors import UpsertError

__all__ = ["INDEX_SCHEMA_VERSION", "KEY_DTYPE", "KeyIndex", "Lookup"]

# ---------------------------------------------------------------------------------------
# The index
# ---------------------------------------------------------------------------------------

_LIVE, _TOMB, _VACANT = np.uint8(0), np.uint8(1), np.uint8(2)


_VERSIONS = itertools.count(1)
_FRESH_RUNS = 8  # more than this many fresh runs merge into the delta


def _as_keys(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if not isinstance(keys, np.ndarray) or keys.dtype != KEY_DTYPE or keys.ndim != 1:
        raise UpsertError(
            "keys must be a one-dimensional numpy array of KEY_DTYPE (from key_hashes), got "
            f"{type(keys).__name__} {getattr(keys, 'dtype', '')}"
        )
    return np.ascontiguousarray(keys["hi"]), np.ascontiguousarray(keys["lo"])


def _column(value: Any, n: int, dtype: Any, what: str) -> np.ndarray:
    arr = np.asarray(value)
    if arr.ndim == 0:
        arr = np.full(n, arr)
    if arr.shape != (n,):
        raise UpsertError(f"{what} has shape {arr.shape}; give one value per key ({n}) or a scalar")
    if np.dtype(dtype).kind in "iu" and arr.dtype.kind not in "iub" and arr.size:
        raise UpsertError(f"{what} must be integers, got {arr.dtype}")
    if np.dtype(dtype).kind in "iu" and len(arr):
        info = np.iinfo(dtype)
        if arr.min() < info.min or arr.max() > info.max:
            raise UpsertError(f"{what} holds values outside {np.dtype(dtype)}'s range")
    return arr.astype(dtype, copy=False)


class KeyIndex:
    """Primary key hash -> (segment code, row, comparison value, tombstone).

    ``cmp_dtype`` is int64 (timestamps as their integer value) or float64;
    ``merge_threshold`` the delta size below which new keys are never merged into the
    base (the delta merges past ``max(merge_threshold, len(base) // 32)``).
    Raises UpsertError for another comparison dtype or a threshold below 1.
    """

    def __init__(self, cmp_dtype: Any = np.int64, merge_threshold: int = 65_536) -> None:
        dt = np.dtype(cmp_dtype)
        if dt not in (np.dtype(np.int64), np.dtype(np.float64)):
            raise UpsertError(f"comparison values must be int64 or float64, not {dt}")
        if merge_threshold < 1:
            raise UpsertError(f"merge_threshold must be at least 1, not {merge_threshold}")
        self._cmp_dtype = dt
        self._threshold = int(merge_threshold)
        self._base = Run.empty(dt)
        self._delta = Run.empty(dt)
        self._fresh: list[Run] = []  # one run per recent put's new keys
        self._len = 0
        self._counts: dict[int, int] = {}
        # a new number at every change, unique across indexes: a Lookup's slots are valid
        # for the index and version that gave them
        self._version = next(_VERSIONS)

    @property
    def cmp_dtype(self) -> np.dtype:
        return self._cmp_dtype

    def __len__(self) -> int:
        """Keys held (tombstones included)."""
        return self._len

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays held (vacant slots included)."""
        return sum(r.nbytes for r in self._runs())

    def __repr__(self) -> str:
        return (
            f"KeyIndex({self._len:,} keys, {len(self._counts)} segments, "
            f"cmp {self._cmp_dtype}, {self.nbytes:,} bytes)"
        )

    # -- reading ------------------------------------------------------------------------

    def _find(
        self, hi: np.ndarray, lo: np.ndarray, order: np.ndarray | None = None
    ) -> list[np.ndarray]:
        """Each run's slot of each key (-1: not there); ``order`` sorts ``hi``."""
        runs = self._runs()
        if not any(len(r) for r in runs):
            return [np.full(len(hi), -1, np.int64) for _ in runs]
        if order is None:
            order = argsort_u64(hi)  # sorted queries: searches walk each run forwards
        hs, ls = hi[order], lo[order]
        out = []
        for r in runs:
            slot = np.full(len(hi), -1, np.int64)
            if len(r):
                slot[order] = r.find(hs, ls, directory=r is self._base)
            out.append(slot)
        return out

    def _runs(self) -> list[Run]:
        return [self._base, self._delta, *self._fresh]

    def lookup(self, keys: np.ndarray) -> Lookup:
        """Where each key's latest record is (vectorized). Raises UpsertError if ``keys``
        is not a KEY_DTYPE array."""
        hi, lo = _as_keys(keys)
        n = len(hi)
        found = np.zeros(n, bool)
        seg = np.full(n, -1, np.int32)
        row = np.zeros(n, np.uint32)
        cmp = np.zeros(n, self._cmp_dtype)
        tomb = np.zeros(n, bool)
        slots = self._find(hi, lo)
        for run, slot in zip(self._runs(), slots, strict=True):
            q = np.nonzero(slot >= 0)[0]
            s = slot[q]
            live = run.state[s] != _VACANT
            q, s = q[live], s[live]
            found[q] = True
            seg[q] = run.seg[s]
            row[q] = run.row[s]
            cmp[q] = run.cmp[s]
            tomb[q] = run.state[s] == _TOMB
        return Lookup(found, seg, row, cmp, tomb, (hi, lo), tuple(slots), self._version)

    def prepare(self) -> None:
        """Build the search structures that the first lookups would build (a process
        loading the index in the background calls this there)."""
        self._base.prepare()

    def segments(self) -> np.ndarray:
        """The segment codes some key points at, sorted (int32)."""
        return np.array(sorted(self._counts), np.int32)

    def segment_counts(self) -> dict[int, int]:
        """How many keys (tombstones included) point at each segment code."""
        return dict(self._counts)

    # -- writing ------------------------------------------------------------------------

    def _count(self, codes: np.ndarray, sign: int) -> None:
        if not len(codes):
            return
        lo, hi = int(codes.min()), int(codes.max())
        if lo >= 0 and hi < 4 * len(codes) + 4096:  # dense codes: count without sorting
            counts = np.bincount(codes, minlength=hi + 1)
            uniq = np.flatnonzero(counts)
            counts = counts[uniq]
        else:
            uniq, counts = np.unique(codes, return_counts=True)
        for code, c in zip(uniq.tolist(), counts.tolist(), strict=True):
            left = self._counts.get(code, 0) + sign * c
            if left:
                self._counts[code] = left
            else:
                self._counts.pop(code, None)

    def put(
        self,
        keys: np.ndarray,
        segment: int | np.ndarray,
        row: np.ndarray,
        cmp: np.ndarray,
        tomb: bool | np.ndarray = False,
        at: Lookup | None = None,
    ) -> None:
        """Insert or replace the entries of ``keys`` (``segment`` and ``tomb`` may be
        scalars). ``at``: this index's :meth:`lookup` of exactly ``keys`` (or its
        :meth:`Lookup.take` of them), saving a search when nothing changed since.
        Raises UpsertError, changing nothing, if a key appears twice, the arrays'
        lengths differ from the keys', a segment code or row is outside int32 / uint32,
        or a float comparison value is NaN."""
        hi, lo = _as_keys(keys)
        n = len(hi)
        seg_a = _column(segment, n, np.int32, "segment")
        row_a = _column(row, n, np.uint32, "row")
        cmp_a = np.asarray(cmp)
        if cmp_a.ndim == 0:
            cmp_a = np.full(n, cmp_a)
        if cmp_a.shape != (n,):
            raise UpsertError(f"cmp has shape {cmp_a.shape}; give one value per key ({n})")
        if self._cmp_dtype.kind == "i" and cmp_a.dtype.kind not in "iub" and n:
            raise UpsertError(f"cmp must be integers for an int64 index, got {cmp_a.dtype}")
        cmp_a = cmp_a.astype(self._cmp_dtype, copy=False)
        if self._cmp_dtype.kind == "f" and np.isnan(cmp_a).any():
            raise UpsertError("cmp holds NaN; NaN has no order: give every key a comparison value")
        state = np.where(np.asarray(_column(tomb, n, bool, "tomb")), _TOMB, _LIVE).astype(np.uint8)
        if n == 0:
            return
        by_hi = argsort_u64(hi)
        h = hi[by_hi]
        same = h[1:] == h[:-1]
        dup = np.zeros(0, bool)
        if same.any():  # rare: a shared high word; compare whole keys
            order = np.lexsort((lo, hi))
            dup = (hi[order][1:] == hi[order][:-1]) & (lo[order][1:] == lo[order][:-1])
        if dup.any():
            first = int(order[1:][dup][0])
            raise UpsertError(
                f"put got {int(dup.sum())} repeated key(s) (the first at position {first}); "
                "give each key once per call (its latest record)"
            )
        self._version = next(_VERSIONS)
        if not self._len and not any(len(r) for r in self._runs()):  # empty: all new
            self._fresh.append(
                Run(h, lo[by_hi], seg_a[by_hi], row_a[by_hi], cmp_a[by_hi], state[by_hi])
            )
            self._len = n
            self._count(seg_a, +1)
            self._settle()
            return
        slots = self._slots(hi, lo, at) if at is not None else None
        if slots is None:
            slots = self._find(hi, lo, by_hi)
        held = np.zeros(n, bool)
        for run, slot in zip(self._runs(), slots, strict=True):
            held |= slot >= 0
            q = np.nonzero(slot >= 0)[0]
            if not len(q):
                continue
            s = slot[q]
            was = run.state[s] != _VACANT
            self._count(run.seg[s[was]], -1)
            self._len += int(len(q) - was.sum())
            run.seg[s] = seg_a[q]
            run.row[s] = row_a[q]
            run.cmp[s] = cmp_a[q]
            run.state[s] = state[q]
        new = by_hi[~held[by_hi]]  # new keys, sorted by hi
        if len(new):
            self._fresh.append(
                Run(hi[new], lo[new], seg_a[new], row_a[new], cmp_a[new], state[new])
            )
            self._len += len(new)
        self._count(seg_a, +1)
        self._settle()

    def _settle(self) -> None:
        """Merge the fresh runs into the delta, and the delta into the base, when due."""
        if len(self._fresh) > _FRESH_RUNS:
            self._delta = merge_runs([self._delta, *self._fresh], self._cmp_dtype)
            self._fresh = []
        if len(self._delta) + sum(map(len, self._fresh)) > max(
            self._threshold, len(self._base) // 32
        ):
            self.merge()

    def _slots(self, hi: np.ndarray, lo: np.ndarray, at: Lookup) -> list[np.ndarray] | None:
        """``at``'s slots of keys (hi, lo) when it answered exactly these keys and the
        index has not changed since (None: search instead)."""
        if at.version != self._version or len(at.where) != len(self._runs()):
            return None
        if at.asked is None or not (
            np.array_equal(at.asked[0], hi) and np.array_equal(at.asked[1], lo)
        ):
            return None
        return list(at.where)

    def remove(self, keys: np.ndarray) -> int:
        """Forget ``keys`` (absent ones are ignored); returns how many were held. Raises
        UpsertError if ``keys`` is not a KEY_DTYPE array."""
        hi, lo = _as_keys(keys)
        removed = 0
        self._version = next(_VERSIONS)
        for run, slot in zip(self._runs(), self._find(hi, lo), strict=True):
            s = slot[slot >= 0]
            s = np.unique(s[run.state[s] != _VACANT])
            self._count(run.seg[s], -1)
            run.state[s] = _VACANT
            removed += len(s)
        self._len -= removed
        return removed

    def drop_segments(self, codes: list[int]) -> int:
        """Forget every key whose entry points into one of the segment ``codes`` (their
        files left the table); returns how many were held."""
        want = np.array(sorted(c for c in set(codes) if c in self._counts), np.int32)
        if not len(want):
            return 0
        dropped = 0
        self._version = next(_VERSIONS)
        for run in self._runs():
            at = np.flatnonzero(np.isin(run.seg, want) & (run.state != _VACANT))
            run.state[at] = _VACANT
            dropped += len(at)
        for code in want.tolist():
            self._counts.pop(code, None)
        self._len -= dropped
        return dropped

    def relocate(self, old_segment: int, new_segment: int, row_map: np.ndarray) -> int:
        """A compaction rewrote ``old_segment``'s rows into ``new_segment``: every entry
        at (old_segment, r) moves to (new_segment, row_map[r]). Returns how many moved.

        Raises UpsertError, changing nothing, if an entry's row is beyond ``row_map`` or
        maps to -1 (a dropped row is some key's latest record: the compaction must keep
        it), or a new row is outside uint32.
        """
        return self.relocate_all([(old_segment, new_segment, row_map)])

    def relocate_all(self, moves: list[tuple[int, int, np.ndarray]]) -> int:
        """:meth:`relocate` of several segments at once (old segment, new segment, row
        map), in one pass over the entries. Returns how many moved. Raises UpsertError,
        changing nothing (as :meth:`relocate`)."""
        maps = []
        for old_segment, new_segment, row_map in moves:
            rmap = np.asarray(row_map)
            if rmap.ndim != 1 or rmap.dtype.kind not in "iu":
                raise UpsertError(
                    f"row_map must be a 1-D integer array, got {rmap.dtype} {rmap.shape}"
                )
            new_code = int(_column(new_segment, 1, np.int32, "new_segment")[0])
            maps.append((int(old_segment), new_code, rmap))
        if not maps:
            return 0
        olds = np.array([m[0] for m in maps], np.int64)
        plans = []
        for run in self._runs():
            hit = np.nonzero(np.isin(run.seg, olds) & (run.state != _VACANT))[0]
            for old_code, new_code, rmap in maps:
                at = hit[run.seg[hit] == old_code]
                rows = run.row[at].astype(np.int64)
                beyond = rows >= len(rmap)
                if beyond.any():
                    raise UpsertError(
                        f"relocate: {int(beyond.sum())} key(s) point at rows of segment "
                        f"{old_code} beyond row_map's {len(rmap)} rows (first: row "
                        f"{int(rows[beyond][0])}); give a row_map covering the whole segment"
                    )
                new_rows = rmap[rows].astype(np.int64) if len(rows) else rows
                if len(new_rows) and (
                    new_rows.min() < 0 or new_rows.max() > np.iinfo(np.uint32).max
                ):
                    bad = (new_rows < 0) | (new_rows > np.iinfo(np.uint32).max)
                    raise UpsertError(
                        f"relocate: {int(bad.sum())} key(s) of segment {old_code} point at "
                        f"rows the compaction dropped or mapped out of range (first: row "
                        f"{int(rows[bad][0])} -> {int(new_rows[bad][0])}); a key's latest "
                        "record must survive compaction"
                    )
                plans.append((run, at, new_rows, old_code, new_code))
        moved = 0
        self._version = next(_VERSIONS)
        for run, at, new_rows, old_code, new_code in plans:
            run.seg[at] = new_code
            run.row[at] = new_rows.astype(np.uint32)
            moved += len(at)
            if len(at) and old_code != new_code:
                self._counts[old_code] = self._counts.get(old_code, 0) - len(at)
                if self._counts[old_code] <= 0:
                    self._counts.pop(old_code)
                self._counts[new_code] = self._counts.get(new_code, 0) + len(at)
        return moved

    def merge(self) -> None:
        """Merge the delta into the base and drop vacant slots (put does it when the
        delta grows; cheap when there is nothing to do)."""
        if not len(self._delta) and not self._fresh and not (self._base.state == _VACANT).any():
            return
        self._version = next(_VERSIONS)
        base = merge_runs([self._base, self._delta, *self._fresh], self._cmp_dtype)
        if (base.state == _VACANT).any():
            base = base.take(np.nonzero(base.state != _VACANT)[0])
        self._base = base
        self._delta = Run.empty(self._cmp_dtype)
        self._fresh = []

    # -- persistence --------------------------------------------------------------------

    def to_arrow(self) -> pa.Table:
        """Every entry, sorted by (hi, lo): columns hi, lo (uint64), segment (int32),
        row (uint32), cmp, tomb (bool). Merges the delta first."""
        self.merge()
        b = self._base
        if len(b) > 1 and (b.hi[1:] == b.hi[:-1]).any():  # rare: order shared high words
            self._base = b = b.take(np.lexsort((b.lo, b.hi)))
            self._version = next(_VERSIONS)
        return pa.table(
            {
                "hi": b.hi,
                "lo": b.lo,
                "segment": b.seg,
                "row": b.row,
                "cmp": b.cmp,
                "tomb": b.state == _TOMB,
            },
            schema=index_schema(self._cmp_dtype),
        )

    @classmethod
    def from_arrow(
        cls,
        table: pa.Table,
        merge_threshold: int = 65_536,
        adopt: Callable[[pa.Array, np.dtype], np.ndarray | None] | None = None,
    ) -> KeyIndex:
        """The index :meth:`to_arrow` gave. ``adopt(array, dtype)``: a writable numpy
        array over a column's own memory, or None to copy it (a loader that owns the
        memory the table was read into saves the copy). Raises UpsertError if the
        table's columns or types differ, or its keys are not sorted by (hi, lo) without
        repeats."""
        cmp_field = table.schema.field("cmp") if "cmp" in table.column_names else None
        cmp_dtype = np.dtype(np.float64) if cmp_field and cmp_field.type == pa.float64() else None
        expected = index_schema(cmp_dtype or np.dtype(np.int64))
        got = [(f.name, f.type) for f in table.schema]
        if got != [(f.name, f.type) for f in expected]:
            raise UpsertError(
                f"not a key index table: expected columns {expected.to_string()}, got "
                f"{table.schema.remove_metadata().to_string()}"
            )
        if any(table.column(i).null_count for i in range(table.num_columns)):
            raise UpsertError("not a key index table: it holds nulls")

        def col(name: str, dtype: Any) -> np.ndarray:
            c = table.column(name)
            if c.num_chunks == 1 and adopt is not None:
                got = adopt(c.chunk(0), np.dtype(dtype))
                if got is not None:
                    return got
            arr = c.to_numpy() if c.num_chunks != 1 else c.chunk(0).to_numpy(zero_copy_only=False)
            return np.array(arr, dtype=dtype)  # a writable copy

        hi, lo = col("hi", np.uint64), col("lo", np.uint64)
        if len(hi) > 1:
            same = hi[1:] == hi[:-1]
            if (hi[1:] < hi[:-1]).any() or (same & (lo[1:] <= lo[:-1])).any():
                raise UpsertError(
                    "not a key index table: keys are not sorted by (hi, lo) without repeats"
                )
        idx = cls(cmp_dtype or np.int64, merge_threshold)
        tomb = col("tomb", bool)
        idx._base = Run(
            hi,
            lo,
            col("segment", np.int32),
            col("row", np.uint32),
            col("cmp", idx._cmp_dtype),
            np.where(tomb, _TOMB, _LIVE).astype(np.uint8),
        )
        idx._len = len(hi)
        idx._count(idx._base.seg, +1)
        return idx

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, KeyIndex):
            return NotImplemented
        return self._cmp_dtype == other._cmp_dtype and self.to_arrow().equals(other.to_arrow())

    __hash__ = None  # type: ignore[assignment]


def index_schema(cmp_dtype: Any) -> pa.Schema:
    """The Arrow schema of :meth:`KeyIndex.to_arrow` for int64 or float64 comparisons."""
    cmp_type = pa.float64() if np.dtype(cmp_dtype) == np.float64 else pa.int64()
    return pa.schema(
        [
            pa.field("hi", pa.uint64(), nullable=False),
            pa.field("lo", pa.uint64(), nullable=False),
            pa.field("segment", pa.int32(), nullable=False),
            pa.field("row", pa.uint32(), nullable=False),
            pa.field("cmp", cmp_type, nullable=False),
            pa.field("tomb", pa.bool_(), nullable=False),
        ],
        metadata={"lamina.keyindex": str(INDEX_SCHEMA_VERSION)},
    )
