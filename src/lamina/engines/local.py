"""The local engine's reading: CSV, JSON lines or Parquet files as a stream of Arrow
record batches (pyarrow datasets), and schemas inferred from sample files."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa

from lamina.engines.files import FileFormat, format_of
from lamina.errors import InputFileError


def _tsv(paths: Sequence[str]) -> bool:
    return all(p.lower().endswith((".tsv", ".tsv.gz")) for p in paths)


def _normalize_inferred(schema: pa.Schema, tz: str | None = None) -> pa.Schema:
    """Guessed types from CSV/JSON samples: timestamps at lamina's µs resolution (naive
    ones given the zone ``tz``, when one is asked for)."""
    fields = [
        f.with_type(pa.timestamp("us", tz=f.type.tz or tz)) if pa.types.is_timestamp(f.type) else f
        for f in schema
    ]
    return pa.schema(fields)


def infer_schema(path: str, fmt: FileFormat | None = None) -> pa.Schema:
    """Arrow schema of a sample Parquet, CSV (first block) or JSON-lines file.

    Raises :class:`InputFileError` if the file cannot be read as that format.
    """
    import pyarrow.csv as pacsv
    import pyarrow.dataset as pads
    import pyarrow.json as pajson
    import pyarrow.parquet as pq

    fmt = fmt or format_of([path])
    try:
        if fmt is FileFormat.parquet:
            if os.path.isdir(path):
                return pads.dataset(path, format="parquet").schema
            return pq.read_schema(path)
        if fmt is FileFormat.csv:
            parse = pacsv.ParseOptions(delimiter="\t" if _tsv([path]) else ",")
            with pacsv.open_csv(path, parse_options=parse) as reader:
                return _normalize_inferred(reader.schema)
        if hasattr(pajson, "open_json"):  # pyarrow >= 19: only the first block
            with pajson.open_json(path) as reader:
                return _normalize_inferred(reader.schema)
        return _normalize_inferred(pajson.read_json(path).schema)
    except (pa.ArrowException, OSError) as exc:
        raise InputFileError(f"cannot read a {fmt.value} schema from {path}: {exc}") from None


# -- streaming reads -------------------------------------------------------------------------


_DATASET_NOISE = re.compile(
    r"Error creating dataset\. Could not read schema from .*?\?: |Invalid: "
)


def _first_line(exc: BaseException) -> str:
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return _DATASET_NOISE.sub("", lines[0]) if lines else type(exc).__name__


def _file_format(fmt: FileFormat, paths: Sequence[str], target: pa.Schema | None) -> object:
    """A pyarrow dataset format; with ``target``, its columns parsed to those types
    (timestamps as text: :func:`_parse_times` reads them with or without a zone)."""
    import pyarrow.csv as pacsv
    import pyarrow.dataset as pads
    import pyarrow.json as pajson

    if fmt is FileFormat.parquet:
        return pads.ParquetFileFormat()
    text = {} if target is None else {f.name: _as_read(f.type) for f in target}
    if fmt is FileFormat.csv:
        return pads.CsvFileFormat(
            parse_options=pacsv.ParseOptions(delimiter="\t" if _tsv(paths) else ","),
            convert_options=pacsv.ConvertOptions(column_types=text),
        )
    explicit = pa.schema(list(text.items())) if text else None
    return pads.JsonFileFormat(
        parse_options=pajson.ParseOptions(
            explicit_schema=explicit, unexpected_field_behavior="infer"
        )
    )


def _as_read(t: pa.DataType) -> pa.DataType:
    return pa.string() if pa.types.is_timestamp(t) else t


def _parse_times(column: pa.Array, target: pa.DataType) -> pa.Array:
    """ISO-8601 text -> ``target`` timestamps: values with a zone are instants, values
    without one are read as UTC (as Spark does with lamina's UTC session)."""
    try:
        return column.cast(pa.timestamp("us", tz="UTC")).cast(target)
    except pa.ArrowInvalid:
        return column.cast(pa.timestamp("us")).cast(target)


def _out_schema(read: pa.Schema, target: pa.Schema | None) -> pa.Schema:
    """The schema of the batches :func:`_typed` makes of batches read as ``read``."""
    if target is None:
        return read
    return pa.schema(
        f.with_type(target.field(f.name).type)
        if f.name in target.names and pa.types.is_timestamp(target.field(f.name).type)
        else f
        for f in read
    )


def _typed(batch: pa.RecordBatch, target: pa.Schema | None) -> pa.RecordBatch:
    if target is None:
        return batch
    cols = []
    for name, col in zip(batch.schema.names, batch.columns, strict=True):
        idx = target.get_field_index(name)
        t = target.field(idx).type if idx >= 0 else None
        if t is not None and pa.types.is_timestamp(t) and not pa.types.is_timestamp(col.type):
            col = _parse_times(col.cast(pa.string()), t)
        cols.append(col)
    return pa.RecordBatch.from_arrays(cols, schema=_out_schema(batch.schema, target))


def _target_schema(fmt: FileFormat, paths: Sequence[str], schema: pa.Schema | None) -> Any:
    """The types to read CSV/JSON values as: the table's, else inferred from the first
    file (timestamps µs; naive ones UTC, as Spark reads them). None for Parquet."""
    import pyarrow.dataset as pads

    if fmt is FileFormat.parquet:
        return None
    if schema is not None:
        return schema
    guess = pads.dataset(list(paths), format=_file_format(fmt, paths, None))
    return _normalize_inferred(guess.schema, tz="UTC")


ProgressFn = Callable[[int, int], None]


def read_batches(
    fmt: FileFormat,
    paths: Sequence[str],
    schema: pa.Schema | None = None,
    on_progress: ProgressFn | None = None,
    batch_rows: int = 64_000,
) -> pa.RecordBatchReader:
    """A stream of the inputs' rows, file by file, in batches of at most ``batch_rows``.

    With a table ``schema``, CSV/JSON values are parsed to the table's types by column
    name; without one, types are inferred from the first file. ``on_progress(rows,
    bytes)`` is called after each batch (bytes: of whole files read so far).

    Raises :class:`InputFileError` (now, or while the stream is read) when a file cannot
    be read or a value cannot be parsed, naming the file.
    """
    import pyarrow.dataset as pads

    try:
        target = _target_schema(fmt, paths, schema)
        dataset = pads.dataset(list(paths), format=_file_format(fmt, paths, target))
        fragments = list(dataset.get_fragments())
        out_schema = _out_schema(dataset.schema, target)
    except (pa.ArrowException, OSError) as exc:
        raise InputFileError(f"cannot read the {fmt.value} input: {_first_line(exc)}") from None

    def batches() -> Iterator[pa.RecordBatch]:
        rows = done_bytes = 0
        for frag in fragments:
            path = getattr(frag, "path", "?")
            try:
                for batch in frag.to_batches(schema=dataset.schema, batch_size=batch_rows):
                    typed = _typed(batch, target)
                    rows += typed.num_rows
                    if on_progress is not None:
                        on_progress(rows, done_bytes)
                    yield typed
            except (pa.ArrowException, OSError) as exc:
                raise InputFileError(
                    f"cannot read {path} as {fmt.value}: {_first_line(exc)}"
                ) from None
            done_bytes += _size(frag)
            if on_progress is not None:
                on_progress(rows, done_bytes)

    return pa.RecordBatchReader.from_batches(out_schema, batches())


def _size(fragment: object) -> int:
    fs, path = getattr(fragment, "filesystem", None), getattr(fragment, "path", None)
    if fs is None or path is None:
        return 0
    size = fs.get_file_info(path).size
    return int(size or 0)
