"""Key index snapshots: one :class:`~lamina.core.keyindex.KeyIndex` as one Arrow IPC file.

The file holds :meth:`KeyIndex.to_arrow` (sorted by key hash), uncompressed (key hashes
do not compress; a restarted process reads the file once into memory it owns, and the
index adopts the columns there),
and in its schema metadata the entry count and an XXH3-64 digest of every column's values
(files saved by earlier lamina versions carry CRC-32s instead: still read).
Reading validates the file and checks all of them, so a truncated or damaged file
raises :class:`KeyIndexFileError` instead of giving a different index. Writing a local
file goes to a temporary name in the same directory, fsyncs it and renames it over
``path``: readers see the old file or the new one, never a part. On an object store
(``fs``: a pyarrow filesystem) the object is written in one upload, which becomes
visible whole or not at all; callers give each snapshot a name of its own.
"""

from __future__ import annotations

import contextlib
import os
import uuid
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from lamina.core.keyindex import INDEX_SCHEMA_VERSION, KeyIndex, index_schema
from lamina.errors import KeyIndexFileError, UpsertError

if TYPE_CHECKING:
    import pyarrow.fs as pafs

__all__ = ["KeyIndexFileError", "read_index", "write_index"]

_ROWS = b"lamina.keyindex.rows"
_XXH3 = b"lamina.keyindex.xxh3"
_CRC = b"lamina.keyindex.crc32"  # the digests of older files: slower to compute
_VERSION = b"lamina.keyindex"
_STAMP = b"lamina.keyindex.stamp"  # whose snapshot it is (a table's, at a seq)


def _digest(table: pa.Table) -> str:
    """XXH3-64 of each column's values (booleans as bytes), comma-separated."""
    out = []
    for name in table.column_names:
        h = xxhash.xxh3_64()
        for chunk in table.column(name).chunks:
            if pa.types.is_boolean(chunk.type):
                chunk = pc.cast(chunk, pa.uint8())
            width = chunk.type.bit_width // 8
            values = memoryview(chunk.buffers()[1])
            h.update(values[chunk.offset * width : (chunk.offset + len(chunk)) * width])
        out.append(h.hexdigest())
    return ",".join(out)


def _crc32(table: pa.Table) -> str:
    crcs = []
    for name in table.column_names:
        crc = 0
        for chunk in table.column(name).chunks:
            values = chunk.to_numpy(zero_copy_only=False)
            crc = zlib.crc32(np.ascontiguousarray(values).view(np.uint8).data, crc)
        crcs.append(f"{crc:08x}")
    return ",".join(crcs)


def write_index(
    index: KeyIndex | pa.Table,
    path: str | os.PathLike[str],
    fs: pafs.FileSystem | None = None,
    stamp: str | None = None,
) -> int:
    """Save ``index`` (or the table its ``to_arrow`` gave) to ``path`` atomically
    (replacing any file there), on the local disk or in ``fs``, with ``stamp`` (whose
    snapshot it is: :func:`read_index` checks it); returns the file's size in bytes.
    Raises KeyIndexFileError if the directory is not writable."""
    target = Path(path)
    table = index if isinstance(index, pa.Table) else index.to_arrow()
    meta = dict(table.schema.metadata or {})
    meta[_ROWS] = str(table.num_rows).encode()
    meta[_XXH3] = _digest(table).encode()
    if stamp is not None:
        meta[_STAMP] = stamp.encode()
    table = table.replace_schema_metadata(meta)
    if fs is not None:
        return _upload(table, str(path), fs)
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, table.schema) as out:
            out.write_table(table)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
        size = target.stat().st_size
        dfd = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise KeyIndexFileError(f"cannot write key index {target}: {e}") from e
    return size


def _upload(table: pa.Table, path: str, fs: pafs.FileSystem) -> int:
    """Write ``table`` as one object at ``path`` of ``fs``; its size."""
    try:
        with fs.open_output_stream(path) as sink, pa.ipc.new_file(sink, table.schema) as out:
            out.write_table(table)
        return int(fs.get_file_info(path).size or 0)
    except OSError as e:
        with contextlib.suppress(OSError):
            fs.delete_file(path)
        raise KeyIndexFileError(f"cannot write key index {path}: {e}") from e


def _download(path: str, fs: pafs.FileSystem) -> np.ndarray:
    """The whole object at ``path`` of ``fs``, read into writable memory."""
    with fs.open_input_file(path) as f:
        raw = np.empty(f.size(), np.uint8)
        view, done = memoryview(raw.data), 0
        while done < raw.nbytes:
            got = f.readinto(view[done:])
            if not got:
                raise KeyIndexFileError(f"key index file {path} ended early: short read")
            done += got
    return raw


def read_index(
    path: str | os.PathLike[str],
    merge_threshold: int = 65_536,
    fs: pafs.FileSystem | None = None,
    stamp: str | None = None,
    cmp_dtype: np.dtype | None = None,
) -> KeyIndex:
    """Load the index :func:`write_index` saved at ``path`` (on the local disk, or in
    ``fs``); when given, its ``stamp`` (a file without one passes) and comparison
    dtype must be these. Raises KeyIndexFileError if the file is missing, unreadable,
    truncated, damaged (checksums, counts, order, schema), of another format version,
    or another snapshot's."""
    target = Path(path)
    try:
        # One read into memory this process owns: the index adopts the columns where
        # they lie (no copy), and nothing pages in from a mapping (a page fault per 4 KiB
        # of a mapped file cost ~10x the read here).
        raw = np.fromfile(target, dtype=np.uint8) if fs is None else _download(str(path), fs)
        table = pa.ipc.open_file(pa.BufferReader(pa.py_buffer(raw))).read_all()
        table.validate(full=True)
        return _checked(table, target, merge_threshold, _adopter(raw), stamp, cmp_dtype)
    except FileNotFoundError as e:
        raise KeyIndexFileError(f"no key index file at {target}") from e
    except (OSError, ValueError, pa.ArrowException) as e:
        raise KeyIndexFileError(f"key index file {target} is unreadable or damaged: {e}") from e


def _check_whose(
    table: pa.Table, target: Path, stamp: str | None, cmp_dtype: np.dtype | None
) -> None:
    """Refuse a file saved for another snapshot, or whose columns' types are not the
    index's (the digests cover the values' bytes, not their types)."""
    got = (table.schema.metadata or {}).get(_STAMP)
    if stamp is not None and got is not None and got != stamp.encode():
        raise KeyIndexFileError(
            f"key index file {target} holds snapshot {got.decode(errors='replace')!r}, "
            f"not {stamp!r}"
        )
    want = index_schema(np.float64 if cmp_dtype is None else cmp_dtype)
    valid = [want] if cmp_dtype is not None else [want, index_schema(np.int64)]
    if not any(table.schema.remove_metadata().equals(w.remove_metadata()) for w in valid):
        raise KeyIndexFileError(
            f"key index file {target} is damaged: its columns are {table.schema.remove_metadata()}"
        )


def _adopter(raw: np.ndarray) -> Callable[[pa.Array, np.dtype], np.ndarray | None]:
    """``adopt`` for :meth:`KeyIndex.from_arrow`: a writable view of ``raw`` where an
    array's values lie in it (fixed-width, no offset, aligned), else None (copied)."""
    base = raw.ctypes.data

    def adopt(array: pa.Array, dtype: np.dtype) -> np.ndarray | None:
        if array.type.bit_width != 8 * dtype.itemsize or array.offset or array.null_count:
            return None
        values = array.buffers()[1]
        start, size = values.address - base, len(array) * dtype.itemsize
        if start < 0 or start % dtype.itemsize or start + size > raw.nbytes:
            return None
        return raw[start : start + size].view(dtype)

    return adopt


def _checked(
    table: pa.Table,
    target: Path,
    merge_threshold: int,
    adopt: Callable[[pa.Array, np.dtype], np.ndarray | None],
    stamp: str | None = None,
    cmp_dtype: np.dtype | None = None,
) -> KeyIndex:
    meta = table.schema.metadata or {}
    if meta.get(_VERSION) != str(INDEX_SCHEMA_VERSION).encode():
        raise KeyIndexFileError(
            f"key index file {target} has format version {meta.get(_VERSION)!r}, this lamina "
            f"reads {INDEX_SCHEMA_VERSION}: rebuild the index from the table's segments"
        )
    _check_whose(table, target, stamp, cmp_dtype)
    if meta.get(_ROWS) != str(table.num_rows).encode():
        raise KeyIndexFileError(
            f"key index file {target} is damaged: {table.num_rows} entries, its footer "
            f"says {meta.get(_ROWS)!r}"
        )
    if _XXH3 in meta:
        intact = meta[_XXH3] == _digest(table).encode()
    else:
        intact = _CRC in meta and meta[_CRC] == _crc32(table).encode()
    if not intact:
        raise KeyIndexFileError(f"key index file {target} is damaged: checksum mismatch")
    try:
        return KeyIndex.from_arrow(table, merge_threshold, adopt)
    except (UpsertError, KeyError, TypeError, IndexError) as e:
        raise KeyIndexFileError(f"key index file {target} is damaged: {e}") from e
