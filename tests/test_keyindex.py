"""The primary-key index: key hashing (pinned encoding, MurmurHash3 checked against a
scalar reference), the index against a dict oracle, persistence and damaged files."""

from __future__ import annotations

import datetime as dt
import struct
import zlib
from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from lamina.core.keyhash import KEY_DTYPE, key_hashes, key_signature
from lamina.core.keyindex import KeyIndex, Lookup
from lamina.errors import LaminaError, UpsertError
from lamina.io.keyindex import KeyIndexFileError, read_index, write_index

M64 = 2**64 - 1

# --- a scalar MurmurHash3_x64_128 and key encoding, written from the specification ------


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & M64


def _fmix(k: int) -> int:
    k ^= k >> 33
    k = (k * 0xFF51AFD7ED558CCD) & M64
    k ^= k >> 33
    k = (k * 0xC4CEB9FE1A85EC53) & M64
    return k ^ (k >> 33)


def murmur3_128(data: bytes, seed: int) -> tuple[int, int]:
    c1, c2 = 0x87C37B91114253D5, 0x4CF5AD432745937F
    h1 = h2 = seed
    nblocks = len(data) // 16
    for i in range(nblocks):
        k1, k2 = struct.unpack_from("<QQ", data, 16 * i)
        h1 ^= (_rotl((k1 * c1) & M64, 31) * c2) & M64
        h1 = (_rotl(h1, 27) + h2) & M64
        h1 = (h1 * 5 + 0x52DCE729) & M64
        h2 ^= (_rotl((k2 * c2) & M64, 33) * c1) & M64
        h2 = (_rotl(h2, 31) + h1) & M64
        h2 = (h2 * 5 + 0x38495AB5) & M64
    tail = data[16 * nblocks :] + bytes(16)
    k1, k2 = struct.unpack_from("<QQ", tail)
    if len(data) % 16 > 8:
        h2 ^= (_rotl((k2 * c2) & M64, 33) * c1) & M64
    if len(data) % 16 > 0:
        h1 ^= (_rotl((k1 * c1) & M64, 31) * c2) & M64
    h1 ^= len(data)
    h2 ^= len(data)
    h1 = (h1 + h2) & M64
    h2 = (h2 + h1) & M64
    h1, h2 = _fmix(h1), _fmix(h2)
    h1 = (h1 + h2) & M64
    h2 = (h2 + h1) & M64
    return h1, h2


def encode_value(v: object) -> bytes:
    if isinstance(v, bool):
        return struct.pack("<q", int(v))
    if isinstance(v, int):
        return struct.pack("<q", v)
    if isinstance(v, float):
        return struct.pack("<d", v)
    if isinstance(v, str | bytes):
        b = v.encode() if isinstance(v, str) else v
        return struct.pack("<Q", len(b)) + b + bytes(-len(b) % 8)
    raise AssertionError(v)


def reference_hash(row: tuple[object, ...], types: list[pa.DataType]) -> tuple[int, int]:
    seed = zlib.crc32(key_signature(types).encode())
    return murmur3_128(b"".join(encode_value(v) for v in row), seed)


def keys_of(pairs: list[tuple[int, int]]) -> np.ndarray:
    out = np.empty(len(pairs), KEY_DTYPE)
    out["hi"] = [p[0] for p in pairs]
    out["lo"] = [p[1] for p in pairs]
    return out


# --- hashing ------------------------------------------------------------------------------


def test_reference_murmur_matches_the_published_vector() -> None:
    h1, h2 = murmur3_128(b"The quick brown fox jumps over the lazy dog", 0)
    assert (h1, h2) == (0xE34BBC7BBC071B6C, 0x7A433CA9C49A9347)
    assert murmur3_128(b"", 0) == (0, 0)


def test_hash_stability_pinned_digests() -> None:
    """A change of the encoding, the seed or the hash changes these: that would make
    every saved index unreadable, so it must be deliberate (bump the version)."""
    t = pa.table(
        {
            "id": pa.array([0, 1, -1, 2**62], pa.int64()),
            "name": ["", "a", "user-42", "ünïcødé"],
        }
    )
    got = key_hashes(t, ["id"])
    assert [(int(k["hi"]), int(k["lo"])) for k in got] == [
        (0x9C32C6E482C06395, 0x4E33C7FC9EAE4B81),
        (0x67CC2075744C2ED5, 0x128EC18317B379BE),
        (0x24A96DAD9886F2E8, 0x62888EE1D836A589),
        (0xFF5B3AFA31F20D96, 0xBC896A78E36056B8),
    ]
    got = key_hashes(t, ["id", "name"])
    assert [(int(k["hi"]), int(k["lo"])) for k in got] == [
        (0xF6DA9F5DDF89244B, 0x0DF63DC18E486C2C),
        (0xEAA121B6C70231A7, 0x29602602D1B7BCFD),
        (0xF5B9B32F84FEEAE9, 0x32BE31B248B70C00),
        (0xBA8E55D11132475C, 0x91F94A7427223F9C),
    ]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(-(2**63), 2**63 - 1),
            st.text(max_size=40),
            st.binary(max_size=40),
            st.booleans(),
        ),
        max_size=50,
    )
)
def test_vectorized_hash_equals_the_reference(rows: list[tuple[int, str, bytes, bool]]) -> None:
    types = [pa.int64(), pa.string(), pa.binary(), pa.bool_()]
    t = pa.table(
        {
            n: pa.array([r[i] for r in rows], ty)
            for i, (n, ty) in enumerate(zip("isbo", types, strict=True))
        }
    )
    for cols in (["i"], ["s"], ["b", "i"], ["s", "o", "b", "i"]):
        got = key_hashes(t, cols)
        sel = ["isbo".index(c) for c in cols]
        exp = [reference_hash(tuple(r[j] for j in sel), [types[j] for j in sel]) for r in rows]
        assert [(int(k["hi"]), int(k["lo"])) for k in got] == exp


def test_hash_across_chunks_slices_and_batch_boundaries() -> None:
    n = 70_000  # more than one hashing chunk
    ints = np.arange(n, dtype=np.int64) * 7919
    strs = [f"k{i}" * (1 + i % 5) for i in range(n)]
    whole = pa.table({"i": ints, "s": strs})
    chunked = pa.Table.from_batches(whole.to_batches(max_chunksize=9_999))
    assert chunked.column("s").num_chunks > 1
    for cols in (["i"], ["s"], ["s", "i"]):
        a = key_hashes(whole, cols)
        assert np.array_equal(a, key_hashes(chunked, cols))
        assert np.array_equal(a[123:4567], key_hashes(whole.slice(123, 4444), cols))
        assert len(np.unique(a)) == n


def test_type_families() -> None:
    def h(arr: pa.Array) -> np.ndarray:
        return key_hashes(pa.table({"k": arr}), ["k"])

    ints = [0, 1, 100, 127]
    base = h(pa.array(ints, pa.int64()))
    for t in (pa.int8(), pa.int16(), pa.int32(), pa.uint8(), pa.uint16(), pa.uint32()):
        assert np.array_equal(h(pa.array(ints, t)), base), t  # widening keeps hashes
    assert not np.array_equal(h(pa.array(ints, pa.uint64())), base)
    assert np.array_equal(h(pa.array(["x", "yz"])), h(pa.array(["x", "yz"], pa.large_string())))
    assert np.array_equal(h(pa.array(["x", "yz"])), h(pa.array(["x", "yz"], pa.string_view())))
    assert np.array_equal(h(pa.array([b"ab", b"cd"])), h(pa.array([b"ab", b"cd"], pa.binary(2))))
    assert np.array_equal(
        h(pa.array([b"ab", b"cd"])), h(pa.array([b"ab", b"cd"], pa.large_binary()))
    )
    assert not np.array_equal(h(pa.array(["ab"])), h(pa.array([b"ab"])))  # str vs binary
    day = dt.date(2024, 1, 2)
    ts = dt.datetime(2024, 1, 2, 3, 4, 5)
    for arr in (
        pa.array([day, dt.date(1970, 1, 1)]),
        pa.array([day, day], pa.date64()),
        pa.array([ts, ts], pa.timestamp("us")),
        pa.array([ts, ts], pa.timestamp("ms", tz="UTC")),
        pa.array([dt.time(1, 2), dt.time(3)], pa.time32("s")),
        pa.array([dt.time(1, 2), dt.time(3)], pa.time64("us")),
        pa.array([1, 2], pa.duration("ns")),
        pa.array([True, False]),
        pa.array([1.5, -0.0], pa.float32()),
        pa.array([Decimal("1.25"), Decimal("-3.50")], pa.decimal128(10, 2)),
        pa.array([Decimal("1.25"), Decimal("-3.50")], pa.decimal256(40, 2)),
    ):
        got = h(arr)
        assert len(got) == 2 and len(np.unique(got)) == len(set(arr.to_pylist())), arr.type
    # a timestamp's hash is its integer value in its unit, under its own signature
    us = h(pa.array([ts], pa.timestamp("us")))
    assert np.array_equal(us, h(pa.array([ts], pa.timestamp("us", tz="Europe/Paris"))))
    assert not np.array_equal(us, h(pa.array([ts], pa.timestamp("ns"))))
    assert not np.array_equal(h(pa.array([0.0])), h(pa.array([-0.0])))  # as Arrow's hashing


def test_composite_keys_are_unambiguous() -> None:
    t = pa.table({"a": ["ab", "a", ""], "b": ["c", "bc", "abc"], "n": [1, 1, 1]})
    got = key_hashes(t, ["a", "b"])
    assert len(np.unique(got)) == 3
    assert not np.array_equal(key_hashes(t, ["a", "n"]), key_hashes(t, ["n", "a"]))
    grid = pa.table({"x": np.repeat(np.arange(300), 300), "y": np.tile(np.arange(300), 300)})
    assert len(np.unique(key_hashes(grid, ["x", "y"]))) == 90_000


@pytest.mark.parametrize(
    "table, cols, match",
    [
        (pa.table({"k": pa.array([1, None])}), ["k"], "null"),
        (pa.table({"k": pa.array(["a", None])}), ["k"], "null"),
        (pa.table({"k": pa.array([1.0, float("nan")])}), ["k"], "NaN"),
        (pa.table({"k": pa.array([[1], [2]])}), ["k"], "cannot be hashed"),
        (pa.table({"k": pa.array(["a"]).dictionary_encode()}), ["k"], "cannot be hashed"),
        (pa.table({"k": [1]}), ["nope"], "not in the data"),
        (pa.table({"k": [1]}), [], "at least one"),
    ],
)
def test_hash_refusals(table: pa.Table, cols: list[str], match: str) -> None:
    with pytest.raises(UpsertError, match=match):
        key_hashes(table, cols)


def test_empty_table_hashes_to_nothing() -> None:
    assert len(key_hashes(pa.table({"k": pa.array([], pa.string())}), ["k"])) == 0


# --- the index against a dict oracle --------------------------------------------------------

# a pool of keys: random ones plus groups that share a high word (searches must look on)
_rng = np.random.default_rng(7)
POOL = [(int(h), int(l_)) for h, l_ in _rng.integers(0, 2**63, (40, 2), dtype=np.uint64)]
POOL += [(12345, lo) for lo in (1, 2, 3, 99)] + [(0, 5), (0, 6), (M64, 0), (M64, M64)]


class IndexMachine(RuleBasedStateMachine):
    """Random puts, removes, dropped segments, relocations and lookups, checked against
    a dict."""

    def __init__(self) -> None:
        super().__init__()
        self.index = KeyIndex(np.int64, merge_threshold=3)
        self.oracle: dict[tuple[int, int], tuple[int, int, int, bool]] = {}
        self.segments = 8
        self.earlier: Lookup | None = None

    @rule(
        picks=st.lists(st.integers(0, len(POOL) - 1), unique=True, max_size=12),
        seg=st.integers(0, 7),
        data=st.data(),
    )
    def put(self, picks: list[int], seg: int, data: st.DataObject) -> None:
        keys = [POOL[i] for i in picks]
        rows = data.draw(st.lists(st.integers(0, 50), min_size=len(keys), max_size=len(keys)))
        cmps = data.draw(
            st.lists(st.integers(-(2**62), 2**62), min_size=len(keys), max_size=len(keys))
        )
        tombs = data.draw(st.lists(st.booleans(), min_size=len(keys), max_size=len(keys)))
        # the lookup put may reuse: none; of these keys (asked among all, then taken);
        # or one from an earlier step (other keys, or the index changed since: ignored)
        hint = data.draw(st.sampled_from(["none", "current", "earlier"]))
        at = {
            "none": None,
            "current": self.index.lookup(keys_of(POOL)).take(np.array(picks, np.int64)),
            "earlier": self.earlier,
        }[hint]
        self.index.put(
            keys_of(keys), seg, np.array(rows), np.array(cmps), np.array(tombs, bool), at=at
        )
        for k, r, c, t in zip(keys, rows, cmps, tombs, strict=True):
            self.oracle[k] = (seg, r, c, t)
        self.earlier = self.index.lookup(keys_of(keys))

    @rule(picks=st.lists(st.integers(0, len(POOL) - 1), max_size=8))
    def remove(self, picks: list[int]) -> None:
        keys = [POOL[i] for i in picks]
        held = len({k for k in keys if k in self.oracle})
        assert self.index.remove(keys_of(keys)) == held
        for k in keys:
            self.oracle.pop(k, None)

    @rule(codes=st.lists(st.integers(0, 9), max_size=3))
    def drop_segments(self, codes: list[int]) -> None:
        held = [k for k, v in self.oracle.items() if v[0] in codes]
        assert self.index.drop_segments(codes) == len(held)
        for k in held:
            del self.oracle[k]

    @rule(old=st.integers(0, 7), new=st.integers(0, 9), data=st.data())
    def relocate(self, old: int, new: int, data: st.DataObject) -> None:
        rows = [v[1] for v in self.oracle.values() if v[0] == old]
        size = max(rows, default=-1) + 1
        row_map = np.array(data.draw(st.permutations(range(size + 3))), np.int64)[:size]
        drop = data.draw(st.booleans()) and size > 0
        if drop:
            row_map[rows[0]] = -1
            before = self.index.to_arrow()
            with pytest.raises(UpsertError, match="dropped"):
                self.index.relocate(old, new, row_map)
            assert self.index.to_arrow().equals(before)
            return
        assert self.index.relocate(old, new, row_map) == len(rows)
        for k, (s, r, c, t) in list(self.oracle.items()):
            if s == old:
                self.oracle[k] = (new, int(row_map[r]), c, t)

    @precondition(lambda self: len(self.oracle) > 0)
    @rule(pick=st.integers(0, len(POOL) - 1))
    def duplicate_put_is_refused(self, pick: int) -> None:
        k = list(self.oracle)[pick % len(self.oracle)]
        before = self.index.to_arrow()
        with pytest.raises(UpsertError, match="repeated"):
            self.index.put(keys_of([k, POOL[pick], k]), 1, np.arange(3), np.arange(3))
        assert self.index.to_arrow().equals(before)

    @rule()
    def round_trip(self) -> None:
        self.index = KeyIndex.from_arrow(self.index.to_arrow(), merge_threshold=3)

    @invariant()
    def matches_oracle(self) -> None:
        got = self.index.lookup(keys_of(POOL))
        for i, k in enumerate(POOL):
            exp = self.oracle.get(k)
            assert bool(got.found[i]) == (exp is not None), k
            if exp is not None:
                act = (int(got.segment[i]), int(got.row[i]), int(got.cmp[i]), bool(got.tomb[i]))
                assert act == exp, k
        assert len(self.index) == len(self.oracle)
        counts: dict[int, int] = {}
        for s, *_ in self.oracle.values():
            counts[s] = counts.get(s, 0) + 1
        assert self.index.segment_counts() == counts
        assert self.index.segments().tolist() == sorted(counts)


TestIndexMachine = IndexMachine.TestCase
TestIndexMachine.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def test_many_reputs_and_merges_against_a_dict() -> None:
    """Batches of a few hundred keys, half of them known, re-put many times over
    hundreds of merges (threshold 64), with removals: the same answers as a dict."""
    rng = np.random.default_rng(3)
    universe = key_hashes(pa.table({"k": np.arange(5_000)}), ["k"])
    index = KeyIndex(np.float64, merge_threshold=64)
    oracle: dict[int, tuple[int, int, float, bool]] = {}
    for step in range(300):
        ids = np.unique(rng.integers(0, 5_000 if step > 20 else 500, 300))
        cmp = rng.normal(size=len(ids))
        tomb = rng.random(len(ids)) < 0.1
        rows = rng.integers(0, 2**32, len(ids), dtype=np.uint64).astype(np.uint32)
        index.put(universe[ids], step, rows, cmp, tomb)
        for j, i in enumerate(ids.tolist()):
            oracle[i] = (step, int(rows[j]), float(cmp[j]), bool(tomb[j]))
        if step % 7 == 0:
            gone = np.unique(rng.integers(0, 5_000, 50))
            index.remove(universe[gone])
            for i in gone.tolist():
                oracle.pop(i, None)
    got = index.lookup(universe)
    assert len(index) == len(oracle) == int(got.found.sum())
    for i in range(5_000):
        if i in oracle:
            assert (
                int(got.segment[i]),
                int(got.row[i]),
                float(got.cmp[i]),
                bool(got.tomb[i]),
            ) == oracle[i]
        else:
            assert not got.found[i] and got.segment[i] == -1


def test_put_reuses_a_lookup_only_while_it_holds() -> None:
    """put(at=lookup) skips its search only for a lookup of the same keys on the index
    as it still is: after a merge moved the slots, the lookup is ignored."""
    keys = key_hashes(pa.table({"k": np.arange(100)}), ["k"])
    index = KeyIndex(np.int64, merge_threshold=1)
    index.put(keys[:50], 1, np.arange(50), np.zeros(50, np.int64))
    stale = index.lookup(keys[20:70])
    index.put(keys[80:], 2, np.arange(20), np.zeros(20, np.int64))  # merges: slots move
    index.put(keys[20:70], 3, np.arange(50), np.ones(50, np.int64), at=stale)
    fresh = index.lookup(keys[:10])
    index.put(keys[:10], 4, np.arange(10), np.ones(10, np.int64), at=fresh)
    got = index.lookup(keys)
    want = [4] * 10 + [1] * 10 + [3] * 50 + [-1] * 10 + [2] * 20
    assert got.segment.tolist() == want and len(index) == 90
    other = KeyIndex(np.int64, merge_threshold=1)  # another index: its slots differ
    other.put(keys[50:], 5, np.arange(50), np.zeros(50, np.int64))
    other.put(keys[:50], 6, np.arange(50), np.zeros(50, np.int64), at=index.lookup(keys[:50]))
    assert other.lookup(keys).segment.tolist() == [6] * 50 + [5] * 50 and len(other) == 100


def test_big_batches_and_the_directory() -> None:
    """Runs past the directory size, puts of 100k keys (the packed sort path)."""
    keys = key_hashes(pa.table({"k": np.arange(300_000)}), ["k"])
    index = KeyIndex(np.int64)
    index.put(keys[:200_000], 1, np.arange(200_000), np.arange(200_000))
    index.put(keys[100_000:], 2, np.arange(200_000), -np.arange(200_000))
    index.merge()
    got = index.lookup(keys)
    assert got.found.all() and len(index) == 300_000
    assert (got.segment[:100_000] == 1).all() and (got.segment[100_000:] == 2).all()
    assert np.array_equal(got.cmp[100_000:], -np.arange(200_000))
    assert index.segment_counts() == {1: 100_000, 2: 200_000}
    absent = key_hashes(pa.table({"k": np.arange(300_000, 310_000)}), ["k"])
    assert not index.lookup(absent).found.any()
    loaded = KeyIndex.from_arrow(index.to_arrow())
    loaded.prepare()  # the directory built ahead: the same answers through it
    assert loaded._base._dir is not None
    few = np.concatenate([keys[::97], absent[:50]])
    a, b = loaded.lookup(few), index.lookup(few)
    for name in ("found", "segment", "row", "cmp", "tomb"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name


def test_put_argument_checks() -> None:
    index = KeyIndex(np.int64)
    k = keys_of([(1, 2), (3, 4)])
    with pytest.raises(UpsertError, match="KEY_DTYPE"):
        index.put(np.array([1, 2]), 0, np.arange(2), np.arange(2))
    with pytest.raises(UpsertError, match="shape"):
        index.put(k, 0, np.arange(3), np.arange(2))
    with pytest.raises(UpsertError, match="range"):
        index.put(k, 2**31, np.arange(2), np.arange(2))
    with pytest.raises(UpsertError, match="range"):
        index.put(k, 0, np.array([-1, 0]), np.arange(2))
    with pytest.raises(UpsertError, match="integers"):
        index.put(k, 0, np.arange(2), np.array([1.5, 2.0]))
    with pytest.raises(UpsertError, match="NaN"):
        KeyIndex(np.float64).put(k, 0, np.arange(2), np.array([1.0, np.nan]))
    with pytest.raises(UpsertError, match="int64 or float64"):
        KeyIndex(np.int32)
    assert len(index) == 0


def test_relocate_beyond_row_map() -> None:
    index = KeyIndex(np.int64)
    index.put(keys_of([(1, 1), (2, 2)]), 5, np.array([0, 9]), np.zeros(2, np.int64))
    with pytest.raises(UpsertError, match="beyond row_map"):
        index.relocate(5, 6, np.arange(5))
    assert index.segment_counts() == {5: 2}
    assert index.relocate(5, 6, np.arange(10)[::-1].copy()) == 2
    got = index.lookup(keys_of([(1, 1), (2, 2)]))
    assert got.segment.tolist() == [6, 6] and got.row.tolist() == [9, 0]


def test_from_arrow_refuses_bad_tables() -> None:
    index = KeyIndex(np.int64)
    index.put(keys_of([(1, 1), (2, 2), (2, 3)]), 0, np.arange(3), np.arange(3))
    t = index.to_arrow()
    with pytest.raises(UpsertError, match="sorted"):
        KeyIndex.from_arrow(t.take([1, 0, 2]))
    with pytest.raises(UpsertError, match="sorted"):
        KeyIndex.from_arrow(t.take([0, 1, 1]))
    with pytest.raises(UpsertError, match="expected columns"):
        KeyIndex.from_arrow(t.drop_columns(["tomb"]))
    assert KeyIndex.from_arrow(t) == index


# --- persistence ------------------------------------------------------------------------


def _sample_index(n: int = 20_000, cmp: type = np.int64) -> KeyIndex:
    keys = key_hashes(pa.table({"k": np.arange(n)}), ["k"])
    index = KeyIndex(cmp)
    rng = np.random.default_rng(1)
    index.put(keys, rng.integers(0, 40, n), rng.integers(0, 10**6, n), rng.integers(0, 10**9, n))
    index.remove(keys[::10])
    index.put(keys[::7], 99, np.arange(len(keys[::7])), np.zeros(len(keys[::7]), np.int64), True)
    return index


@pytest.mark.parametrize("cmp", [np.int64, np.float64])
def test_write_read_round_trip(tmp_path: Path, cmp: type) -> None:
    index = _sample_index(cmp=cmp)
    path = tmp_path / "keys.arrow"
    size = write_index(index, path)
    assert size == path.stat().st_size
    back = read_index(path)
    assert back == index and back.cmp_dtype == np.dtype(cmp)
    assert back.segment_counts() == index.segment_counts()
    write_index(KeyIndex(cmp), path)  # replaces it, empty
    assert len(read_index(path)) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["keys.arrow"]  # no temporary left


def test_read_missing_or_foreign_file(tmp_path: Path) -> None:
    with pytest.raises(KeyIndexFileError, match="no key index"):
        read_index(tmp_path / "nope.arrow")
    other = tmp_path / "other.arrow"
    with (
        pa.OSFile(str(other), "wb") as sink,
        pa.ipc.new_file(sink, pa.schema([("x", pa.int64())])) as w,
    ):
        w.write_table(pa.table({"x": [1]}))
    with pytest.raises(KeyIndexFileError, match="format version"):
        read_index(other)
    parquet = tmp_path / "old.parquet"  # a snapshot lamina wrote before: rebuilt
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"x": [1]}), parquet)
    with pytest.raises(KeyIndexFileError, match="unreadable or damaged"):
        read_index(parquet)
    assert issubclass(KeyIndexFileError, LaminaError)


def test_a_file_of_another_snapshot_or_comparison_type_is_refused(tmp_path: Path) -> None:
    """The digests cover the values' bytes, not the columns' types or whose file it
    is: a flip turning ``cmp: int64`` into ``double`` passed them (every later upsert
    of a fresh process failed), a flip repeating a column name raised a bare KeyError,
    and an older snapshot's file under the newest one's name gave duplicate keys."""
    index = _sample_index(cmp=np.int64)
    path = tmp_path / "keys.arrow"
    write_index(index, path, stamp="table 1 seq 7")
    assert read_index(path, stamp="table 1 seq 7", cmp_dtype=np.dtype(np.int64)) == index
    with pytest.raises(KeyIndexFileError, match="holds snapshot 'table 1 seq 7', not"):
        read_index(path, stamp="table 1 seq 9")
    with pytest.raises(KeyIndexFileError, match="its columns are"):
        read_index(path, cmp_dtype=np.dtype(np.float64))
    table = pa.ipc.open_file(pa.memory_map(str(path))).read_all()
    for fields in (
        [f if f.name != "cmp" else pa.field("cmp", pa.float64(), False) for f in table.schema],
        [f if f.name != "row" else pa.field("tomb", f.type, False) for f in table.schema],
    ):
        odd = pa.Table.from_arrays(table.columns, schema=pa.schema(fields, table.schema.metadata))
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, odd.schema) as w:
            w.write_table(odd)
        with pytest.raises(KeyIndexFileError, match="damaged"):
            read_index(path, cmp_dtype=np.dtype(np.int64))


def test_damaged_files_never_give_a_different_index(tmp_path: Path) -> None:
    index = _sample_index(3_000)
    path = tmp_path / "keys.arrow"
    write_index(index, path)
    good = path.read_bytes()
    bad = tmp_path / "bad.arrow"
    for cut in (0, 4, 100, len(good) // 2, len(good) - 9, len(good) - 1):
        bad.write_bytes(good[:cut])
        with pytest.raises(KeyIndexFileError):
            read_index(bad)
    rng = np.random.default_rng(0)
    positions = sorted(set(rng.integers(0, len(good), 300).tolist()) | {len(good) - 20})
    refused = 0
    for pos in positions:
        damaged = bytearray(good)
        damaged[pos] ^= 0x5A
        bad.write_bytes(bytes(damaged))
        try:
            back = read_index(bad)
        except KeyIndexFileError:
            refused += 1
        else:
            assert back == index, f"flipped byte {pos} gave a different index"
    assert refused > len(positions) // 2


def test_snapshots_saved_with_crc32_digests_still_read(tmp_path: Path) -> None:
    """Files of earlier versions carry CRC-32s, not XXH3 digests: read, and checked."""
    from lamina.io import keyindex as io_keys

    index = _sample_index(2_000)
    table = index.to_arrow()
    path = tmp_path / "old.arrow"

    def save(crc: bytes) -> None:
        meta = dict(table.schema.metadata or {})
        meta[io_keys._ROWS] = str(table.num_rows).encode()
        meta[io_keys._CRC] = crc
        t = table.replace_schema_metadata(meta)
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, t.schema) as out:
            out.write_table(t)

    crc = io_keys._crc32(table).encode()
    save(crc)
    assert read_index(path) == index
    save(b"0" * len(crc))
    with pytest.raises(KeyIndexFileError, match="checksum mismatch"):
        read_index(path)
