"""A remote warehouse's files as an fsspec filesystem, for engines that read through
one (DuckDB's ``register_filesystem``): the warehouse's own pyarrow filesystem (its
endpoint, its credentials) under a protocol no real filesystem has."""

from __future__ import annotations

import io
import threading
from collections import OrderedDict
from typing import Any

import pyarrow.fs as pafs
from fsspec.implementations.arrow import ArrowFSWrapper
from fsspec.spec import AbstractFileSystem

#: file metadata remembered at most (then forgotten and asked again)
_KEPT = 100_000
#: open files kept at most (the least recently opened is closed)
_OPEN_KEPT = 256


class WarehouseFiles(ArrowFSWrapper):
    """Files named ``PROTOCOL://bucket/key``. What it learns of a file (its size and
    time) is remembered: segment files never change, and DuckDB asks for each one
    several times a query (``glob``, ``exists``, ``info``, ``modified``: a HEAD request
    each), and opens each twice (footer, then data: a HEAD request each in pyarrow's
    S3 filesystem), so the last files opened stay open, each opening reading at
    positions of its own. A file deleted since (by retention) fails when it is opened
    or read, with a FileNotFoundError (DuckDB's error message names it: the query is
    planned again), and is forgotten."""

    protocol = "laminawh"  # a subclass per warehouse: see :func:`warehouse_files`
    # "PROTOCOL://bucket/key" -> "bucket/key" (ArrowFSWrapper's own parsing takes the
    # bucket for a host and drops it)
    _strip_protocol: Any = classmethod(AbstractFileSystem._strip_protocol.__func__)

    def __init__(self, fs: pafs.FileSystem, **kwargs: Any) -> None:
        super().__init__(fs, **kwargs)
        self._known: dict[str, pafs.FileInfo] = {}
        self._opened: OrderedDict[str, Any] = OrderedDict()  # path -> pyarrow NativeFile
        self._known_lock = threading.Lock()

    def _file_info(self, path: str) -> pafs.FileInfo:
        path = self._strip_protocol(path)
        with self._known_lock:
            found = self._known.get(path)
        if found is None:
            found = self.fs.get_file_info(path)
            if found.type == pafs.FileType.File:
                with self._known_lock:
                    if len(self._known) >= _KEPT:
                        self._known.clear()
                    self._known[path] = found
        return found

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        found = self._file_info(path)
        if found.type == pafs.FileType.NotFound:
            raise FileNotFoundError(path)
        kind = "directory" if found.type == pafs.FileType.Directory else "file"
        return {"name": found.path, "size": found.size, "type": kind, "mtime": found.mtime}

    def modified(self, path: str) -> Any:
        return self.info(path)["mtime"]

    def _open(self, path: str, mode: str = "rb", *args: Any, **kwargs: Any) -> Any:
        if mode != "rb":
            return super()._open(path, mode, *args, **kwargs)
        path = self._strip_protocol(path)
        with self._known_lock:
            handle = self._opened.get(path)
            if handle is not None:
                self._opened.move_to_end(path)
        if handle is None:
            try:
                handle = self.fs.open_input_file(path)
            except OSError as exc:
                raise self.failed(path, exc) from None
            with self._known_lock:
                self._opened[path] = handle
                while len(self._opened) > _OPEN_KEPT:
                    self._opened.popitem(last=False)[1].close()
        return _Reader(self, path, handle)

    def failed(self, path: str, exc: OSError) -> OSError:
        """What to raise for ``exc``, met reading ``path``: a FileNotFoundError if the
        file is gone. Whatever was remembered of it is forgotten."""
        with self._known_lock:
            self._known.pop(path, None)
            self._opened.pop(path, None)
        try:
            gone = self.fs.get_file_info(path).type == pafs.FileType.NotFound
        except OSError:
            gone = False
        return FileNotFoundError(f"{path} is gone: {exc}") if gone else exc


class _Reader(io.RawIOBase):
    """A file read at positions of its own through a shared pyarrow file (whose
    ``read_at`` is safe from threads)."""

    def __init__(self, files: WarehouseFiles, path: str, handle: Any) -> None:
        super().__init__()
        self._files = files
        self._path = path
        self._handle = handle
        self._size: int = handle.size()
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def size(self) -> int:
        return self._size

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = base + offset
        return self._pos

    def read(self, size: int | None = -1) -> bytes:
        n = self._size - self._pos if size is None or size < 0 else size
        n = max(0, min(n, self._size - self._pos))
        try:
            data: bytes = bytes(self._handle.read_at(n, self._pos)) if n else b""
        except OSError as exc:
            raise self._files.failed(self._path, exc) from None
        self._pos += len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(memoryview(buffer)))
        memoryview(buffer)[: len(data)] = data
        return len(data)


def warehouse_files(fs: pafs.FileSystem, protocol: str) -> AbstractFileSystem:
    """``fs`` as an fsspec filesystem answering for ``protocol`` (``protocol://`` +
    a path of ``fs``)."""
    # one class per protocol: fsspec strips paths and caches instances by class
    cls = type("WarehouseFiles", (WarehouseFiles,), {"protocol": protocol})
    files: AbstractFileSystem = cls(fs, skip_instance_cache=True)
    return files
