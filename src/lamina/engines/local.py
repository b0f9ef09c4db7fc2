"""The local engine's reading: CSV, JSON lines or Parquet files as a stream of Arrow
record batches (pyarrow datasets), and schemas inferred from sample files."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa

from lamina.core.columns import EPOCH_UNIT
from lamina.engines.files import FileFormat, data_files, format_of, is_tsv
from lamina.errors import InputFileError
from lamina.io.arrow import inferred_schema


def _normalize_inferred(schema: pa.Schema) -> pa.Schema:
    """Guessed types from CSV/JSON samples: timestamps as lamina infers them,
    ``timestamp[us, tz=UTC]`` (naive ones are UTC wall-clock times, as Spark reads them
    in lamina's UTC session), and text for a column the sample leaves empty (a null
    type could never hold a value; Spark guesses text)."""
    guessed = inferred_schema(schema)
    return pa.schema([f.with_type(pa.string()) if pa.types.is_null(f.type) else f for f in guessed])


def infer_schema(path: str, fmt: FileFormat | None = None) -> pa.Schema:
    """Arrow schema of a sample Parquet, CSV (first block) or JSON-lines file, its
    timestamps ``timestamp[us, tz=UTC]`` (lamina's one inferred timestamp type).

    Raises :class:`InputFileError` if the file cannot be read as that format.
    """
    import pyarrow.csv as pacsv  # loads pyarrow
    import pyarrow.dataset as pads  # loads numpy, pandas, pyarrow
    import pyarrow.json as pajson  # loads pyarrow
    import pyarrow.parquet as pq  # loads pyarrow

    fmt = fmt or format_of([path])
    try:
        if fmt is FileFormat.parquet:  # its timestamps too as lamina infers them
            if os.path.isdir(path):
                return inferred_schema(pads.dataset(path, format="parquet").schema)
            return inferred_schema(pq.read_schema(path))
        if fmt is FileFormat.csv:
            parse = pacsv.ParseOptions(delimiter="\t" if is_tsv(path) else ",")
            with pacsv.open_csv(path, parse_options=parse) as reader:
                return _normalize_inferred(reader.schema)
        if hasattr(pajson, "open_json"):  # pyarrow >= 19: only the first block
            with pajson.open_json(path) as reader:
                return _normalize_inferred(reader.schema)
        return _normalize_inferred(pajson.read_json(path).schema)
    except (pa.ArrowException, OSError) as exc:
        why = _reason(fmt, exc, path)
        raise InputFileError(f"cannot read a {fmt.value} schema from {path}: {why}") from None


# -- streaming reads (pyarrow.csv, pyarrow.json, pyarrow.parquet readers; not
# pyarrow.dataset, which imports pandas and would double the engine's start-up) --------


_NOISE = re.compile(r"Invalid: ")


def _first_line(exc: BaseException) -> str:
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return _NOISE.sub("", lines[0]) if lines else type(exc).__name__


def _reason(fmt: FileFormat, exc: BaseException, path: str) -> str:
    """Why ``path`` could not be read; for a JSON array, what lamina reads (Arrow's
    error names no array)."""
    why = _first_line(exc)
    if fmt is FileFormat.json and "JSON parse error" in why and _array(path):
        why += " (lamina reads JSON lines: one object per line, not a JSON array)"
    return why


def _array(path: str) -> bool:
    """True when the (local) file's text starts with ``[``, or it cannot be told."""
    try:
        with pa.input_stream(path, compression="detect") as f:
            return f.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"[")
    except (pa.ArrowException, OSError):
        return True


def _open(path: str, seekable: bool) -> Any:
    """A readable file of ``path``: random access (Parquet), else a stream decompressed
    as its extension says."""
    import pyarrow.fs as pafs  # loads pyarrow

    fs, where = pafs.FileSystem.from_uri(path) if "://" in path else (pafs.LocalFileSystem(), path)
    if seekable:
        return fs.open_input_file(where)
    return fs.open_input_stream(where, compression="detect")


def _as_read(t: pa.DataType) -> pa.DataType:
    return pa.string() if pa.types.is_timestamp(t) else t


def _reader(
    fmt: FileFormat, file: Any, tsv: bool, target: pa.Schema | None, batch_rows: int
) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    """The schema and record batches of an open file; CSV/JSON columns the ``target``
    has are parsed to its types (timestamps as text: :func:`_typed` parses them)."""
    import pyarrow.csv as pacsv  # loads pyarrow
    import pyarrow.json as pajson  # loads pyarrow
    import pyarrow.parquet as pq  # loads pyarrow

    if fmt is FileFormat.parquet:
        pf = pq.ParquetFile(file)
        return pf.schema_arrow, pf.iter_batches(batch_size=batch_rows)
    types = {} if target is None else {f.name: _as_read(f.type) for f in target}
    reader: Any
    if fmt is FileFormat.csv:
        reader = pacsv.open_csv(
            file,
            read_options=pacsv.ReadOptions(block_size=1 << 22),
            parse_options=pacsv.ParseOptions(delimiter="\t" if tsv else ","),
            # an empty field, quoted or not, is null in every column, as Spark reads it
            # (--engine auto picks either by the input's size); only an empty one:
            # "NA", "null" stay text and "NaN" a float NaN, as Spark reads them
            convert_options=pacsv.ConvertOptions(
                column_types=types,
                strings_can_be_null=True,
                null_values=[""],
                quoted_strings_can_be_null=True,
            ),
        )
    else:
        reader = pajson.open_json(
            file,
            read_options=pajson.ReadOptions(block_size=1 << 22),
            parse_options=pajson.ParseOptions(
                explicit_schema=pa.schema(list(types.items())) if types else None,
                unexpected_field_behavior="infer",
            ),
        )
    return reader.schema, iter(reader)


#: a time of day with a zone (a date alone ends in digits a zone's offset would match)
_ZONED = r"[Tt ]\d\d(:?\d\d){0,2}([.,]\d+)? ?([Zz]|[+-]\d\d(:?\d\d)?)$"


def _parse_times(column: pa.Array, target: pa.DataType, epoch: bytes | None = None) -> pa.Array:
    """ISO-8601 text -> ``target`` timestamps: values with a zone are instants, values
    without one are read as UTC (as Spark does with lamina's UTC session); ``epoch``:
    the unit of a time column of epoch numbers, whose text may be those numbers.

    Raises ``pa.ArrowInvalid`` for text that is not a time."""
    aware, naive = pa.timestamp("us", tz="UTC"), pa.timestamp("us")
    for as_type in (aware, naive):
        try:
            return column.cast(as_type).cast(target)
        except pa.ArrowInvalid:
            continue
    if epoch is not None:  # numbers (of the unit), and maybe times beside them
        import pyarrow.compute as pc  # only for a time column of epoch numbers

        number = pc.fill_null(pc.match_substring_regex(column, r"^\s*-?\d+\s*$"), False)
        none = pa.scalar(None, pa.string())
        counts = pc.if_else(number, column, none).cast(pa.int64())
        stamps = counts.cast(pa.timestamp(epoch.decode(), tz="UTC")).cast(target)
        if pc.all(number).as_py() is not False:
            return stamps
        times = _parse_times(pc.if_else(number, none, column), target)
        return pc.if_else(number, stamps, times)
    import pyarrow.compute as pc  # only for a mix of zoned and naive values

    zoned = pc.fill_null(pc.match_substring_regex(column, _ZONED), False)  # some of each
    none = pa.scalar(None, pa.string())
    with_zone = pc.if_else(zoned, column, none).cast(aware)
    without = pc.if_else(zoned, none, column).cast(naive).cast(aware)
    return pc.if_else(zoned, with_zone, without).cast(target)


def _typed_schema(schema: pa.Schema, target: pa.Schema | None) -> pa.Schema:
    """``schema`` with the timestamp types of ``target`` for its text columns (what
    :func:`_typed` makes; a Parquet timestamp stays as it is, for the table's safe
    cast to judge)."""
    if target is None:
        return schema
    fields = []
    for f in schema:
        into = target.field(f.name) if f.name in target.names else None
        text = pa.types.is_string(f.type) or pa.types.is_large_string(f.type)
        if into is not None and text and pa.types.is_timestamp(into.type):
            f = f.with_type(into.type).with_metadata(into.metadata)
        fields.append(f)
    return pa.schema(fields)


def _typed(batch: pa.RecordBatch, target: pa.Schema | None) -> pa.RecordBatch:
    """Text timestamps of the columns ``target`` has parsed to its types."""
    schema = _typed_schema(batch.schema, target)
    if schema == batch.schema:
        return batch
    cols = [
        _parse_times(col.cast(pa.string()), f.type, (f.metadata or {}).get(EPOCH_UNIT))
        if f.type != col.type
        else col
        for f, col in zip(schema, batch.columns, strict=True)
    ]
    return pa.RecordBatch.from_arrays(cols, schema=schema)


def _like(batch: pa.RecordBatch, schema: pa.Schema, path: str, first: str) -> pa.RecordBatch:
    """A batch of a later file in the first file's layout (InputFileError if it differs)."""
    if batch.schema == schema:
        return batch
    if sorted(batch.schema.names) != sorted(schema.names):
        raise InputFileError(
            f"{path} has columns {batch.schema.names}, {first} has {schema.names}; "
            "give files of one layout"
        )
    return batch.select(schema.names).cast(schema)


def _first_schema(
    fmt: FileFormat, path: str, tsv: bool, schema: pa.Schema | None
) -> tuple[pa.Schema | None, pa.Schema]:
    """The types to parse CSV/JSON as (the table's ``schema``, else the first file's,
    inferred from its first block: timestamps µs, naive ones UTC as Spark reads them),
    and the schema of the batches the first file gives."""
    target = schema
    if target is None and fmt is not FileFormat.parquet:
        with _open(path, False) as file:
            target = _normalize_inferred(_reader(fmt, file, tsv, None, 1)[0])
        _named_once(target, path)
    with _open(path, fmt is FileFormat.parquet) as file:
        read = _reader(fmt, file, tsv, target, 1)[0]
    if schema is not None and fmt is not FileFormat.parquet:
        # the table's columns as the file spells them (names match ignoring case)
        other = {n.lower(): n for n in read.names if n not in schema.names}
        spelled = pa.schema([f.with_name(other.get(f.name.lower(), f.name)) for f in schema])
        if spelled.names != schema.names:
            target = spelled
            with _open(path, False) as file:
                read = _reader(fmt, file, tsv, target, 1)[0]
    return target, _typed_schema(read, target)


def _named_once(schema: pa.Schema, path: str) -> None:
    """Refuse a header naming a column twice or leaving a name blank."""
    names = schema.names
    if any(not n.strip() for n in names):
        raise InputFileError(f"{path} has a column with a blank name: name every column")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InputFileError(f"{path} names column {twice[0]!r} more than once: keep one")


ProgressFn = Callable[[int, int], None]


def read_batches(
    fmt: FileFormat,
    paths: Sequence[str],
    schema: pa.Schema | None = None,
    on_progress: ProgressFn | None = None,
    batch_rows: int = 64_000,
) -> pa.RecordBatchReader:
    """A stream of the inputs' rows, file by file, in batches (pyarrow's streaming CSV,
    JSON-lines and Parquet readers: one block in memory per file at a time).

    With a table ``schema``, CSV/JSON values of its columns are parsed to its types;
    without one, types are inferred from the first file. ``on_progress(rows, bytes)`` is
    called after each batch (bytes: of the input files read through).

    Raises :class:`InputFileError` (now, or while the stream is read) when a file cannot
    be read or a value cannot be parsed, naming the file.
    """
    files = data_files(paths)
    if not files:
        raise InputFileError(f"no data files in {', '.join(paths)}")
    try:
        target, out_schema = _first_schema(fmt, files[0], is_tsv(files[0]), schema)
    except (pa.ArrowException, OSError) as exc:
        raise InputFileError(
            f"cannot read {files[0]} as {fmt.value}: {_reason(fmt, exc, files[0])}"
        ) from None

    def stream() -> Iterator[pa.RecordBatch]:
        rows = done_bytes = 0
        for path in files:
            try:
                with _open(path, fmt is FileFormat.parquet) as file:
                    for batch in _reader(fmt, file, is_tsv(path), target, batch_rows)[1]:
                        batch = _like(_typed(batch, target), out_schema, path, files[0])
                        rows += batch.num_rows
                        if on_progress is not None:
                            on_progress(rows, done_bytes)
                        yield batch
            except (pa.ArrowException, OSError) as exc:
                raise InputFileError(
                    f"cannot read {path} as {fmt.value}: {_reason(fmt, exc, path)}"
                ) from None
            done_bytes += _size(path)
            if on_progress is not None:
                on_progress(rows, done_bytes)

    return pa.RecordBatchReader.from_batches(out_schema, stream())


def _size(path: str) -> int:
    import pyarrow.fs as pafs  # loads pyarrow

    fs, where = pafs.FileSystem.from_uri(path) if "://" in path else (pafs.LocalFileSystem(), path)
    return int(fs.get_file_info(where).size or 0)
