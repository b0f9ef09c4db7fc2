"""Primary-key hashing for upsert tables: 128-bit hashes of the key columns.

Pure (numpy and pyarrow, no I/O); :mod:`lamina.core.keyindex` keeps them.

**Keys** are 128-bit hashes of the key columns (:func:`key_hashes`), held as
:data:`KEY_DTYPE` arrays. As Pinot does with its ``hashFunction`` option (MD5 or
MURMUR3, 128 bits, to keep the index small: ``HashUtils.hashPrimaryKey``), the key
index never keeps the key values themselves. The hash is MurmurHash3_x64_128 (Austin
Appleby's, as in SMHasher) of a canonical byte encoding of the typed key tuple,
seeded by the key's type signature; it is computed vectorized in numpy and is the same
in every process, Python and numpy version and platform.

*Collisions.* For n distinct keys and a hash behaving as a random function the chance
that any two share a hash is about n²/2¹²⁹: 1.5e-25 for 10 million keys, 1.5e-21 for a
billion. Murmur3 is not cryptographic: someone who chooses keys on purpose can make two
collide (published seed-independent multicollisions), and then the index takes them for
one key (the later record invalidates the other). Pinot's MD5 option has the same limit.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from lamina.errors import UpsertError

__all__ = ["INDEX_SCHEMA_VERSION", "KEY_DTYPE", "key_hashes", "key_signature"]

#: A key hash: MurmurHash3_x64_128's two 64-bit halves (h1, h2).
KEY_DTYPE = np.dtype([("hi", np.uint64), ("lo", np.uint64)])
#: Version of the key encoding and of :meth:`lamina.core.keyindex.KeyIndex.to_arrow`'s
#: layout.
INDEX_SCHEMA_VERSION = 1

_C1 = np.uint64(0x87C37B91114253D5)
_C2 = np.uint64(0x4CF5AD432745937F)
_F1 = np.uint64(0xFF51AFD7ED558CCD)
_F2 = np.uint64(0xC4CEB9FE1A85EC53)
_FIVE = np.uint64(5)
_N1 = np.uint64(0x52DCE729)
_N2 = np.uint64(0x38495AB5)
_CHUNK = 1 << 16  # rows hashed at a time (bounds the temporary buffers)
_UNITS = ("s", "ms", "us", "ns")


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


def _fmix(k: np.ndarray) -> np.ndarray:
    k ^= k >> np.uint64(33)
    k *= _F1
    k ^= k >> np.uint64(33)
    k *= _F2
    k ^= k >> np.uint64(33)
    return k


def _mix_k1(k1: np.ndarray) -> np.ndarray:
    return _rotl(k1 * _C1, 31) * _C2


def _mix_k2(k2: np.ndarray) -> np.ndarray:
    return _rotl(k2 * _C2, 33) * _C1


def _murmur_rows(
    words: np.ndarray, starts: np.ndarray, nbytes: np.ndarray, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """MurmurHash3_x64_128 of each row's encoding: row r occupies ``nbytes[r]`` bytes (a
    multiple of 8) at word ``starts[r]`` of the little-endian uint64 ``words``, zero
    padded to a whole 16-byte block."""
    n = len(starts)
    h1 = np.full(n, seed, np.uint64)
    h2 = h1.copy()
    nblocks = nbytes // 16
    idx = np.arange(n)
    b = 0
    while len(idx):
        idx = idx[nblocks[idx] > b]
        if not len(idx):
            break
        at = starts[idx] + 2 * b
        k1 = words[at]
        k2 = words[at + 1]
        a1 = h1[idx] ^ _mix_k1(k1)
        a2 = h2[idx]
        a1 = _rotl(a1, 27) + a2
        a1 = a1 * _FIVE + _N1
        a2 ^= _mix_k2(k2)
        a2 = _rotl(a2, 31) + a1
        a2 = a2 * _FIVE + _N2
        h1[idx] = a1
        h2[idx] = a2
        b += 1
    # the tail: 0 or 8 bytes (lengths are whole words), zero padded
    tail = (nbytes % 16) != 0
    if tail.any():
        t = np.nonzero(tail)[0]
        h1[t] ^= _mix_k1(words[starts[t] + 2 * nblocks[t]])
    length = nbytes.astype(np.uint64)
    h1 ^= length
    h2 ^= length
    h1 += h2
    h2 += h1
    h1 = _fmix(h1)
    h2 = _fmix(h2)
    h1 += h2
    h2 += h1
    return h1, h2


@dataclass(frozen=True)
class _Column:
    """One key column of n rows, encoded: ``fixed`` (n, k) little-endian words per row,
    or (``fixed`` None) variable-length bytes ``data[offsets[r]:offsets[r + 1]]``."""

    n: int
    fixed: np.ndarray | None
    offsets: np.ndarray  # (n + 1,) int64; empty for fixed columns
    data: np.ndarray  # uint8; empty for fixed columns


def _family(t: pa.DataType) -> str | None:
    """The type signature entry of a key column's type (None: not supported). Types of
    one family hash equal values alike (int8 ... int64 and uint8 ... uint32; string and
    large_string; binary, large_binary and fixed_size_binary)."""
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_uint64(t):
        return "uint64"
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_floating(t):
        return "float"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "str"
    if (
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_fixed_size_binary(t)
        or pa.types.is_binary_view(t)
    ):
        return "bin"
    if pa.types.is_date32(t):
        return "date32"
    if pa.types.is_date64(t):
        return "date64"
    if pa.types.is_timestamp(t):
        return f"timestamp[{t.unit}]"
    if pa.types.is_time(t):
        return f"time[{t.unit}]"
    if pa.types.is_duration(t):
        return f"duration[{t.unit}]"
    if pa.types.is_decimal(t) and t.bit_width <= 128:
        return f"decimal128[{t.scale}]"
    if pa.types.is_decimal256(t):
        return f"decimal256[{t.scale}]"
    return None


def key_signature(types: Sequence[pa.DataType]) -> str:
    """The type signature of a key (seeds the hash); raises UpsertError naming the first
    unsupported type."""
    parts = []
    for t in types:
        fam = _family(t)
        if fam is None:
            raise UpsertError(
                f"a primary key column of type {t} cannot be hashed: use an integer, "
                "floating-point, string, binary, date, time, timestamp, duration, decimal "
                "or boolean column"
            )
        parts.append(fam)
    return f"lamina-key-v{INDEX_SCHEMA_VERSION}:" + ",".join(parts)


def _seed(signature: str) -> int:
    return zlib.crc32(signature.encode())


_NONE = np.zeros(0, np.int64)
_BYTES = np.zeros(0, np.uint8)


def _encode(arr: pa.Array, name: str) -> _Column:
    t = arr.type
    n = len(arr)
    if pa.types.is_boolean(t):
        v = np.asarray(arr.to_numpy(zero_copy_only=False), np.uint64)
        return _Column(n, v.reshape(n, 1), _NONE, _BYTES)
    if pa.types.is_integer(t):
        if pa.types.is_uint64(t):
            v = np.asarray(arr.to_numpy(zero_copy_only=False), np.uint64)
        else:
            v = np.asarray(arr.to_numpy(zero_copy_only=False)).astype(np.int64).view(np.uint64)
        return _Column(n, v.astype("<u8").reshape(n, 1), _NONE, _BYTES)
    if pa.types.is_floating(t):
        f = np.asarray(arr.to_numpy(zero_copy_only=False)).astype(np.float64)
        if np.isnan(f).any():
            raise UpsertError(
                f"primary key column {name!r} holds NaN: NaN is never equal to itself, so "
                "it cannot identify a record; replace it"
            )
        return _Column(n, f.astype("<f8").view("<u8").reshape(n, 1), _NONE, _BYTES)
    if pa.types.is_date32(t) or (pa.types.is_time(t) and t.bit_width == 32):
        v = np.asarray(arr.view(pa.int32()).to_numpy(zero_copy_only=False), np.int64)
        return _Column(n, v.view(np.uint64).astype("<u8").reshape(n, 1), _NONE, _BYTES)
    if pa.types.is_temporal(t):  # date64, timestamp, time64, duration: 64-bit
        v = np.asarray(arr.view(pa.int64()).to_numpy(zero_copy_only=False), np.int64)
        return _Column(n, v.view(np.uint64).astype("<u8").reshape(n, 1), _NONE, _BYTES)
    if pa.types.is_decimal(t):
        width = 32 if pa.types.is_decimal256(t) else 16
        if t.bit_width < 128:
            arr = arr.cast(pa.decimal128(t.precision, t.scale))
        buf = arr.buffers()[1]
        raw = np.frombuffer(buf, np.uint8)[arr.offset * width : (arr.offset + n) * width]
        return _Column(n, raw.view("<u8").reshape(n, width // 8), _NONE, _BYTES)
    if pa.types.is_fixed_size_binary(t):
        arr = arr.cast(pa.large_binary())
    elif pa.types.is_string_view(t):
        arr = arr.cast(pa.large_string())
    elif pa.types.is_binary_view(t):
        arr = arr.cast(pa.large_binary())
    bufs = arr.buffers()
    wide = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    offsets = np.frombuffer(bufs[1], np.int64 if wide else np.int32)
    offsets = offsets[arr.offset : arr.offset + n + 1].astype(np.int64)
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    return _Column(n, None, offsets, data)


def _hash_chunk(cols: list[_Column], seed: int) -> tuple[np.ndarray, np.ndarray]:
    n = cols[0].n
    fixed = [c.fixed for c in cols if c.fixed is not None]
    if len(fixed) == len(cols):
        words = np.concatenate(fixed, axis=1)
        w = words.shape[1]
        if w % 2:
            words = np.concatenate([words, np.zeros((n, 1), "<u8")], axis=1)
        stride = words.shape[1]
        flat = np.ascontiguousarray(words).reshape(-1)
        starts = np.arange(n, dtype=np.int64) * stride
        return _murmur_rows(flat, starts, np.full(n, 8 * w, np.int64), seed)
    # piece sizes (in words) per column and row
    sizes = []
    for c in cols:
        if c.fixed is not None:
            sizes.append(np.full(n, c.fixed.shape[1], np.int64))
        else:
            lens = np.diff(c.offsets)
            sizes.append(1 + (lens + 7) // 8)
    row_words = np.sum(sizes, axis=0)
    stride = row_words + (row_words % 2)  # whole 16-byte blocks
    starts = np.zeros(n, np.int64)
    np.cumsum(stride[:-1], out=starts[1:])
    words = np.zeros(int(starts[-1] + stride[-1]) if n else 0, "<u8")
    as_bytes = words.view(np.uint8)
    at = starts.copy()
    for c, size in zip(cols, sizes, strict=True):
        if c.fixed is not None:
            for j in range(c.fixed.shape[1]):
                words[at + j] = c.fixed[:, j]
        else:
            off = c.offsets
            lens = np.diff(off)
            words[at] = lens.astype("<u8")
            total = int(lens.sum())
            if total:
                first = int(off[0])
                shift = (at + 1) * 8 - off[:-1]
                dst = np.arange(first, first + total, dtype=np.int64) + np.repeat(shift, lens)
                as_bytes[dst] = c.data[first : first + total]
        at += size
    return _murmur_rows(words, starts, row_words * 8, seed)


def key_hashes(table: pa.Table, columns: Sequence[str]) -> np.ndarray:
    """The 128-bit hash of every row's key (``columns``, in that order), as a
    :data:`KEY_DTYPE` array.

    The hash is MurmurHash3_x64_128, seeded with the CRC-32 of :func:`key_signature`,
    of the concatenation of the columns' encodings, each a whole number of 8-byte
    little-endian words: integers (uint64 apart), booleans, dates, times, timestamps and
    durations as one int64 in the type's own unit; floats as the float64 bits (-0.0 and
    0.0 differ, as in Arrow's hashing); decimals as their 16 or 32 two's-complement
    bytes; strings and binaries as their byte length then their bytes, zero-padded to a
    whole word. The encoding is unambiguous, so distinct keys differ before hashing.

    Raises UpsertError if ``columns`` is empty or names a missing column, a column has
    an unsupported type (list, struct, map, dictionary, null ...), or holds nulls or NaN.
    """
    if not columns:
        raise UpsertError("key_hashes needs at least one key column")
    arrays = []
    for name in columns:
        if name not in table.column_names:
            raise UpsertError(
                f"key column {name!r} is not in the data (columns: {', '.join(table.column_names)})"
            )
        col = table.column(name)
        if col.null_count:
            raise UpsertError(
                f"primary key column {name!r} holds {col.null_count} null(s); every record "
                "needs its key"
            )
        arrays.append(col.combine_chunks() if col.num_chunks != 1 else col.chunk(0))
    seed = _seed(key_signature([a.type for a in arrays]))
    n = table.num_rows
    out = np.empty(n, KEY_DTYPE)
    for lo in range(0, n, _CHUNK):
        hi = min(n, lo + _CHUNK)
        cols = [
            _encode(a.slice(lo, hi - lo), name) for a, name in zip(arrays, columns, strict=True)
        ]
        h1, h2 = _hash_chunk(cols, seed)
        out["hi"][lo:hi] = h1
        out["lo"][lo:hi] = h2
    return out
