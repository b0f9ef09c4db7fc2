"""Input files: their format (from extensions), existence and total size. Imports no
pyarrow up front (the command line's start-up stays fast)."""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

from lamina.errors import InputFileError


class FileFormat(enum.StrEnum):
    csv = "csv"
    json = "json"
    parquet = "parquet"


_EXTENSIONS = {
    ".csv": FileFormat.csv,
    ".tsv": FileFormat.csv,
    ".json": FileFormat.json,
    ".jsonl": FileFormat.json,
    ".ndjson": FileFormat.json,
    ".parquet": FileFormat.parquet,
    ".pq": FileFormat.parquet,
}
_COMPRESSION = (".gz", ".bz2", ".zst", ".lz4", ".snappy", ".deflate", ".xz")


def _uncompressed(name: str) -> str:
    """``name`` lower-cased, without a compression extension."""
    lower = name.lower()
    for ext in _COMPRESSION:
        if lower.endswith(ext):
            return lower[: -len(ext)]
    return lower


def _format_of_name(name: str) -> FileFormat | None:
    return _EXTENSIONS.get(os.path.splitext(_uncompressed(name))[1])


def is_tsv(path: str) -> bool:
    """True for a tab-separated file (``.tsv``, compressed or not)."""
    return _uncompressed(path).endswith(".tsv")


def data_files(paths: Sequence[str]) -> list[str]:
    """The data files of the inputs: files and URIs as they are; local folders listed
    recursively, hidden and ``_`` files (``_SUCCESS``) skipped, and — when a folder
    holds files named as data (``*.csv``, ``*.parquet``...) — only those (not a
    ``notes.txt`` or an ``a.csv.bak`` beside them)."""
    files: list[str] = []
    for p in paths:
        if "://" in p or not os.path.isdir(p):
            files.append(p)
            continue
        for root, names in _walk(p):
            found = [os.path.join(root, n) for n in names]
            named = [f for f in found if _format_of_name(f) is not None]
            files += named or found
    return files


def _walk(folder: str) -> Iterator[tuple[str, list[str]]]:
    """(folder, its file names), sorted, of ``folder`` and those below it; hidden and
    ``_`` folders and files (``_temporary/``, ``_SUCCESS``, ``.part.crc``) left out."""
    for root, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
        yield root, sorted(n for n in names if not n.startswith((".", "_")))


def format_of(paths: Sequence[str]) -> FileFormat:
    """The one format of the inputs, from their extensions (or of the files in a folder).

    Raises :class:`InputFileError` when an extension is unknown or the formats differ.
    """
    found: set[FileFormat] = set()
    for p in paths:
        fmt = _format_of_name(p)
        if fmt is None and "://" not in p and os.path.isdir(p):
            for _root, names in _walk(p):
                found.update(f for n in names if (f := _format_of_name(n)) is not None)
            continue
        if fmt is None:
            raise InputFileError(
                f"cannot tell the format of {p!r} from its extension; pass --format "
                "csv|json|parquet"
            )
        found.add(fmt)
    if not found:
        raise InputFileError(
            f"no data files in {', '.join(paths)} (in a folder, files named *.csv, *.tsv, "
            "*.json, *.jsonl, *.ndjson, *.parquet or *.pq, compressed or not); pass files or "
            "folders holding some"
        )
    if len(found) != 1:
        mixed = " and ".join(sorted(f.value for f in found))
        raise InputFileError(f"the input mixes {mixed} data files; pass --format csv|json|parquet")
    return found.pop()


def check_inputs(files: Sequence[str]) -> list[str]:
    """Absolute paths of local inputs (URIs unchanged); InputFileError if one is missing."""
    out = []
    for f in files:
        if "://" in f:
            out.append(f)
            continue
        path = Path(f).expanduser()
        if not path.exists():
            raise InputFileError(f"input {f} does not exist")
        out.append(str(path.resolve()))
    return out


def input_bytes(paths: Sequence[str]) -> int | None:
    """Total size of the inputs (files in folders included); None if it cannot be told."""
    import pyarrow as pa  # loads numpy, pyarrow
    import pyarrow.fs as pafs  # loads numpy, pyarrow

    total = 0
    for p in data_files(paths):  # a folder's files that are read, not its notes
        try:
            fs, path = pafs.FileSystem.from_uri(p) if "://" in p else (pafs.LocalFileSystem(), p)
            info = fs.get_file_info(path)
            if info.type == pafs.FileType.Directory:
                infos = fs.get_file_info(pafs.FileSelector(path, recursive=True))
            else:
                infos = [info]
        except (pa.ArrowException, OSError):
            return None
        total += sum(i.size or 0 for i in infos if i.type == pafs.FileType.File)
    return total


_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*", re.I)


def parse_size(text: str, source: str = "") -> int:
    """``2GB``, ``500M``, ``1.5g``, ``1024`` -> bytes (powers of 1000); ``source``: where
    the text came from (an option, a variable), for the message.

    Raises :class:`InputFileError` for anything else.
    """
    m = _SIZE.fullmatch(text)
    if not m:
        where = f"{source}: " if source else ""
        raise InputFileError(
            f"{where}cannot read {text!r} as a size; write e.g. 2GB, 500MB or 1000000"
        )
    scale = 1000 ** " kmgt".index((m.group(2) or " ").lower())
    return int(float(m.group(1)) * scale)
