"""Sorted runs of key-index entries: the storage of :class:`lamina.core.keyindex.KeyIndex`.

A :class:`Run` is a set of parallel numpy arrays (key hash high and low words, segment
code, row, comparison value, state) sorted by the high word, searched with numpy's
binary search or, for a few queries into a big run, through a directory of the high
words' top bits. :func:`merge_two` and :func:`merge_runs` merge runs of disjoint keys;
:func:`argsort_u64` is the fast sort they and the index use. A :class:`Lookup` is what a
search of the runs answers. Pure (numpy only).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "DIRECTORY_MIN",
    "DIRECTORY_RATIO",
    "Lookup",
    "Run",
    "argsort_u64",
    "merge_runs",
    "merge_two",
]


@dataclass(frozen=True)
class Lookup:
    """The answer of :meth:`KeyIndex.lookup`, one position per key asked. Where
    ``found`` is false: segment -1, row 0, cmp 0, tomb false."""

    found: np.ndarray  # bool
    segment: np.ndarray  # int32
    row: np.ndarray  # uint32
    cmp: np.ndarray  # int64 or float64
    tomb: np.ndarray  # bool
    #: the keys asked (hi, lo), where each sits in the index that answered (per run:
    #: slot, or -1) and that index's version then: :meth:`KeyIndex.put` of the same
    #: keys need not search again
    asked: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False, compare=False)
    where: tuple[np.ndarray, ...] = field(default=(), repr=False, compare=False)
    version: int = field(default=-1, repr=False, compare=False)

    def take(self, idx: np.ndarray) -> Lookup:
        """The answers for keys ``idx`` (positions among those asked)."""
        return Lookup(
            self.found[idx],
            self.segment[idx],
            self.row[idx],
            self.cmp[idx],
            self.tomb[idx],
            None if self.asked is None else (self.asked[0][idx], self.asked[1][idx]),
            tuple(w[idx] for w in self.where),
            self.version,
        )


class Run:
    """Parallel arrays sorted by ``hi`` (equal ``hi`` contiguous, any order within), and
    for big runs a directory of the top bits of ``hi``: ``dir[b]`` is the first slot
    whose ``hi >> shift`` is at least b, so a search reads a few adjacent slots instead of
    a binary search's ~24 scattered ones."""

    __slots__ = ("hi", "lo", "seg", "row", "cmp", "state", "_dir", "_shift", "_steps")
    FIELDS = ("hi", "lo", "seg", "row", "cmp", "state")

    def __init__(
        self,
        hi: np.ndarray,
        lo: np.ndarray,
        seg: np.ndarray,
        row: np.ndarray,
        cmp: np.ndarray,
        state: np.ndarray,
    ) -> None:
        self.hi, self.lo, self.seg, self.row, self.cmp, self.state = hi, lo, seg, row, cmp, state
        self._dir: np.ndarray | None = None
        self._shift = 64
        self._steps = 0

    @classmethod
    def empty(cls, cmp_dtype: np.dtype) -> Run:
        return cls(
            np.zeros(0, np.uint64),
            np.zeros(0, np.uint64),
            np.zeros(0, np.int32),
            np.zeros(0, np.uint32),
            np.zeros(0, cmp_dtype),
            np.zeros(0, np.uint8),
        )

    def __len__(self) -> int:
        return len(self.hi)

    @property
    def nbytes(self) -> int:
        arrays = (self.hi, self.lo, self.seg, self.row, self.cmp, self.state)
        return sum(a.nbytes for a in arrays) + (0 if self._dir is None else self._dir.nbytes)

    def take(self, idx: np.ndarray) -> Run:
        return Run(
            self.hi[idx], self.lo[idx], self.seg[idx], self.row[idx], self.cmp[idx], self.state[idx]
        )

    def prepare(self) -> None:
        """Build the directory of a big run now, not on the first search that uses it."""
        if self._dir is None and len(self.hi) >= DIRECTORY_MIN:
            self._directory()

    def _directory(self) -> None:
        n = len(self.hi)
        bits = max(1, (n // 8).bit_length())  # about 4-8 slots per bucket
        self._shift = 64 - bits
        buckets = (self.hi >> np.uint64(self._shift)).astype(np.intp)
        counts = np.bincount(buckets, minlength=1 << bits)
        dtype = np.uint32 if n < 2**32 else np.int64
        self._dir = np.zeros((1 << bits) + 1, dtype)
        np.cumsum(counts, out=self._dir[1:])
        self._steps = int(counts.max()).bit_length()

    def _first_at_least(self, hi: np.ndarray) -> np.ndarray:
        """Slot of the first entry whose hi is >= each of ``hi`` (len(self): none).
        Many (sorted) queries: numpy's binary search, which walks forwards; a few into a
        big run: the directory (built on first use), which reads a few adjacent slots."""
        if len(self.hi) < DIRECTORY_MIN or len(hi) * DIRECTORY_RATIO >= len(self.hi):
            return np.searchsorted(self.hi, hi, "left")
        if self._dir is None:
            self._directory()
        d = self._dir
        assert d is not None
        b = (hi >> np.uint64(self._shift)).astype(np.intp)
        lo = d[b].astype(np.int64)
        hi_b = d[b + 1].astype(np.int64)
        last = len(self.hi) - 1
        for _ in range(self._steps):  # binary search inside each bucket, all at once
            mid = (lo + hi_b) >> 1
            below = (lo < hi_b) & (self.hi[np.minimum(mid, last)] < hi)
            lo = np.where(below, mid + 1, lo)
            hi_b = np.where(below | (lo >= hi_b), hi_b, mid)
        return lo

    def find(self, hi: np.ndarray, lo: np.ndarray, directory: bool = False) -> np.ndarray:
        """Slot of each key (-1: absent; vacant slots are found). ``directory``: search
        through (and build once) the directory of a big run."""
        n = len(self.hi)
        out = np.full(len(hi), -1, np.int64)
        if n == 0:
            return out
        pos = self._first_at_least(hi) if directory else np.searchsorted(self.hi, hi, "left")
        pending = np.arange(len(hi))
        while len(pending):
            p = pos[pending]
            inside = p < n
            pending, p = pending[inside], p[inside]
            same_hi = self.hi[p] == hi[pending]
            pending, p = pending[same_hi], p[same_hi]
            match = self.lo[p] == lo[pending]
            out[pending[match]] = p[match]
            pending = pending[~match]  # same high word, other key: look at the next slot
            pos[pending] += 1
        return out


DIRECTORY_MIN = 1 << 14
#: the directory pays off for fewer queries than 1/this of a run's entries (measured:
#: 10k into 1M or 10M entries 3-6x faster; 100k into 1M 1.7x slower than searchsorted)
DIRECTORY_RATIO = 32


def argsort_u64(x: np.ndarray) -> np.ndarray:
    """An order sorting ``x`` (uint64). For big arrays, sorts values packed with their
    positions (much faster than an indirect sort), then repairs the rare ties of the
    packed high bits with a stable sort of the nearly sorted result."""
    n = len(x)
    if n < 1 << 16:
        return np.argsort(x)
    bits = n.bit_length()
    packed = (x >> np.uint64(bits)) << np.uint64(bits)
    packed |= np.arange(n, dtype=np.uint64)
    packed.sort()
    order = (packed & np.uint64((1 << bits) - 1)).astype(np.int64)
    del packed
    got = x[order]
    if (got[1:] < got[:-1]).any():
        order = order[np.argsort(got, kind="stable")]
    return order


def merge_runs(runs: list[Run], cmp_dtype: np.dtype) -> Run:
    """One run of several runs' entries (disjoint keys), sorted by hi."""
    runs = [r for r in runs if len(r)]
    if not runs:
        return Run.empty(cmp_dtype)
    runs.sort(key=len, reverse=True)
    out = runs[0]
    if len(runs) > 2:  # the small ones first: one sort, then one merge into the biggest
        rest = [np.concatenate([getattr(r, a) for r in runs[1:]]) for a in Run.FIELDS]
        order = np.argsort(rest[0], kind="stable")
        return merge_two(out, Run(*(x[order] for x in rest)))
    for r in runs[1:]:
        out = merge_two(out, r)
    return out


def merge_two(a: Run, b: Run) -> Run:
    """One run of a's and b's entries (disjoint keys), sorted by hi."""
    if not len(b):
        return a
    if not len(a):
        return b
    na, nb = len(a), len(b)
    at = np.searchsorted(a.hi, b.hi, "right")  # b[j] goes after a[:at[j]]
    b_pos = at + np.arange(nb)
    a_pos = np.cumsum(np.bincount(at, minlength=na + 1)[:na])
    a_pos += np.arange(na)
    arrays = []
    for x, y in zip(
        (a.hi, a.lo, a.seg, a.row, a.cmp, a.state),
        (b.hi, b.lo, b.seg, b.row, b.cmp, b.state),
        strict=True,
    ):
        out = np.empty(na + nb, x.dtype)
        out[a_pos] = x
        out[b_pos] = y
        arrays.append(out)
    return Run(*arrays)
