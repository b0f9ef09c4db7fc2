"""The local engine's reading: CSV, JSON lines or Parquet files as a stream of Arrow
record batches (pyarrow datasets), and schemas inferred from sample files."""

from __future__ import annotations

import csv
import io
import json
import os
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa

from lamina.core.columns import EPOCH_UNIT
from lamina.engines.files import FileFormat, data_files, format_of, is_tsv, parse_size
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
            return _normalize_inferred(_first_block_schema(fmt, path, False))
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
    """Why ``path`` could not be read: where (``line N, column 'c': ``, 1-based, found
    by reading the file again: Arrow's errors count rows per block, or not at all)
    and Arrow's reason; for a JSON array, what lamina reads."""
    why = _first_line(exc)
    if fmt is FileFormat.json and "JSON parse error" in why and _array(path):
        return why + " (lamina reads JSON lines: one object per line, not a JSON array)"
    if fmt is not FileFormat.parquet:
        try:
            where = _locate(fmt, path, why)
        except (OSError, ValueError, UnicodeDecodeError, pa.ArrowException):
            where = None
        if where:  # Arrow's own places go: a block's row, a column's number
            why = _ARROW_PLACE.sub("", why)
            if ", column " in where or not where.startswith("line"):
                why = _ARROW_COLUMN.sub("", why)
            return f"{where}: {why}"
    return why


# -- where a CSV or JSON error is: the file read again (only after an error) --------------

_ARROW_PLACE = re.compile(r" in row \d+$")
_ARROW_COLUMN = re.compile(r"^(In CSV column #\d+: |column '.+?': )")
_CSV_FIELDS = re.compile(r"Expected (\d+) columns, got \d+")
_CSV_VALUE = re.compile(r"In CSV column #(\d+): .*invalid value '(.*)'$")
_COLUMN_VALUE = re.compile(r"^column '(.+?)': Failed to parse string: '(.*?)'")
_JSON_KIND = re.compile(r"Column\((/[^)]*)\) changed from \w+ to (\w+)")
_JSON_VALUE = re.compile(r"Failed to convert JSON to .*?, couldn't parse:(.*)$")


def _records(fmt: FileFormat, path: str) -> Iterator[tuple[int, Any]]:
    """(1-based line, record) of a CSV (the header's line 1: records are dicts by
    column name) or JSON-lines file (``None`` for a line that is not JSON)."""
    with _open(path, False) as raw:
        text = io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline="")
        if fmt is FileFormat.csv:
            reader = csv.reader(text, delimiter="\t" if is_tsv(path) else ",")
            header = next(reader, [])
            start = reader.line_num + 1
            for fields in reader:
                yield start, (header, fields)
                start = reader.line_num + 1
            return
        for n, line in enumerate(text, 1):
            if not line.strip():
                continue
            try:
                yield n, json.loads(line)
            except ValueError:
                yield n, None


def _kind(value: Any) -> str:
    """A JSON value's kind as Arrow's JSON reader names it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "object" if isinstance(value, dict) else "array" if isinstance(value, list) else "?"


def _at(record: Any, pointer: str) -> tuple[bool, Any]:
    """The value at a JSON pointer (``/a/b``) of a record: (found, value)."""
    value = record
    for part in pointer.strip("/").split("/"):
        if not isinstance(value, dict) or part not in value:
            return False, None
        value = value[part]
    return True, value


def _locate(fmt: FileFormat, path: str, why: str) -> str | None:
    """``line N, column 'c'`` of the record an Arrow error ``why`` is about (None:
    not found)."""
    if fmt is FileFormat.csv:
        if m := _CSV_FIELDS.search(why):
            want = int(m.group(1))
            for line, (_, fields) in _records(fmt, path):
                if fields and len(fields) != want:
                    return f"line {line}"
            return None
        if m := _CSV_VALUE.search(why):
            i, value = int(m.group(1)), m.group(2)
            for line, (header, fields) in _records(fmt, path):
                if i < len(fields) and fields[i] == value:
                    return f"line {line}, column {header[i]!r}"
            return None
        if m := _COLUMN_VALUE.search(why):
            name, value = m.groups()
            for line, (header, fields) in _records(fmt, path):
                row = dict(zip(header, fields, strict=False))
                if row.get(name) == value:
                    return f"line {line}, column {name!r}"
        return None
    for line, record in _records(fmt, path):
        if record is None or not isinstance(record, dict):
            if "JSON parse error" in why and not _JSON_KIND.search(why):
                return f"line {line}"
            continue
        if m := _JSON_KIND.search(why):
            found, value = _at(record, m.group(1))
            if found and _kind(value) == m.group(2):
                return f"line {line}, column {m.group(1).strip('/').replace('/', '.')!r}"
        elif m := _JSON_VALUE.search(why):
            for key, value in record.items():
                if not isinstance(value, dict | list) and str(value) == m.group(1).strip():
                    return f"line {line}, column {key!r}"
        elif (m := _COLUMN_VALUE.search(why)) and record.get(m.group(1)) == m.group(2):
            return f"line {line}, column {m.group(1)!r}"
        elif "too big" in why:
            for key, value in record.items():
                if isinstance(value, float) and abs(value) == float("inf"):
                    return f"line {line}, column {key!r}"
    return None


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


#: the block the CSV and JSON readers parse at once; a JSON record must fit in one:
#: a larger one is read again with blocks 4 times larger, up to $LAMINA_JSON_MAX_BLOCK
BLOCK = 1 << 22
MAX_BLOCK_ENV = "LAMINA_JSON_MAX_BLOCK"
DEFAULT_MAX_BLOCK = "256MB"


def _max_block() -> int:
    """The largest block a JSON record may need. Raises InputFileError (bad variable)."""
    return parse_size(os.environ.get(MAX_BLOCK_ENV) or DEFAULT_MAX_BLOCK, f"${MAX_BLOCK_ENV}")


def _straddles(exc: BaseException) -> bool:
    return "straddl" in str(exc)


def _blocks(path: str) -> Iterator[int]:
    """The block sizes to read a JSON file with: 4 MiB, then 4 times larger up to the
    limit; past it InputFileError saying how to raise it."""
    limit = max(_max_block(), BLOCK)
    block = BLOCK
    while True:
        yield block
        if block >= limit:
            raise InputFileError(
                f"cannot read {path} as json: a record does not fit in a block of "
                f"{limit:,} bytes, the most the local engine reads at once; raise "
                f"${MAX_BLOCK_ENV} (e.g. {MAX_BLOCK_ENV}=1GB; each block is held in "
                "memory) or use --engine spark"
            )
        block = min(block * 4, limit)


def _reader(
    fmt: FileFormat,
    file: Any,
    tsv: bool,
    target: pa.Schema | None,
    batch_rows: int,
    block: int = BLOCK,
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
            read_options=pacsv.ReadOptions(block_size=BLOCK),
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
            read_options=pajson.ReadOptions(block_size=block),
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
    """Text timestamps of the columns ``target`` has parsed to its types.
    Raises ``pa.ArrowInvalid`` naming the column."""
    schema = _typed_schema(batch.schema, target)
    if schema == batch.schema:
        return batch
    cols = []
    for f, col in zip(schema, batch.columns, strict=True):
        if f.type == col.type:
            cols.append(col)
            continue
        try:
            unit = (f.metadata or {}).get(EPOCH_UNIT)
            cols.append(_parse_times(col.cast(pa.string()), f.type, unit))
        except pa.ArrowInvalid as exc:
            raise pa.ArrowInvalid(f"column {f.name!r}: {_first_line(exc)}") from None
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
            target = _normalize_inferred(_first_block_schema(fmt, path, tsv))
        _named_once(target, path)
    if fmt is FileFormat.parquet:
        with _open(path, True) as file:
            return target, _typed_schema(_reader(fmt, file, tsv, target, 1)[0], target)
    read = _first_block_schema(fmt, path, tsv, target)
    if schema is not None:
        # the table's columns as the file spells them (names match ignoring case)
        other = {n.lower(): n for n in read.names if n not in schema.names}
        spelled = pa.schema([f.with_name(other.get(f.name.lower(), f.name)) for f in schema])
        if spelled.names != schema.names:
            target = spelled
            read = _first_block_schema(fmt, path, tsv, target)
    return target, _typed_schema(read, target)


def _first_block_schema(
    fmt: FileFormat, path: str, tsv: bool, target: pa.Schema | None = None
) -> pa.Schema:
    """The schema of a CSV or JSON file's first block (a JSON record larger than a
    block: read again with larger ones)."""
    for block in _blocks(path) if fmt is FileFormat.json else iter([BLOCK]):
        try:
            with _open(path, False) as file:
                return _reader(fmt, file, tsv, target, 1, block)[0]
        except pa.ArrowInvalid as exc:
            if not _straddles(exc):
                raise
    raise AssertionError("unreachable")


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
    if fmt is not FileFormat.parquet:  # an empty text file holds no rows (not even a header)
        files = [f for f in files if _size(f) > 0]
        if not files:
            return pa.RecordBatchReader.from_batches(schema or pa.schema([]), iter(()))
    try:
        target, out_schema = _first_schema(fmt, files[0], is_tsv(files[0]), schema)
    except (pa.ArrowException, OSError) as exc:
        raise InputFileError(
            f"cannot read {files[0]} as {fmt.value}: {_reason(fmt, exc, files[0])}"
        ) from None

    def batches(path: str) -> Iterator[pa.RecordBatch]:
        """A file's batches; a JSON record larger than the block: the file read again
        with larger blocks, from the row after the last one given."""
        given = 0
        for block in _blocks(path) if fmt is FileFormat.json else iter([BLOCK]):
            skip = given
            try:
                with _open(path, fmt is FileFormat.parquet) as file:
                    for batch in _reader(fmt, file, is_tsv(path), target, batch_rows, block)[1]:
                        if skip:
                            batch, skip = batch.slice(skip), max(0, skip - batch.num_rows)
                            if not batch.num_rows:
                                continue
                        given += batch.num_rows
                        yield batch
                return
            except pa.ArrowInvalid as exc:
                if not _straddles(exc):
                    raise

    def stream() -> Iterator[pa.RecordBatch]:
        rows = done_bytes = 0
        for path in files:
            try:
                for batch in batches(path):
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
