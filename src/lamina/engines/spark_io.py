"""Spark for the command line and jobs: a quiet session, reading input files, and
Spark's failures as one-line :class:`InputFileError` messages."""

from __future__ import annotations

import contextlib
import csv
import functools
import logging
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, TextIO

import pyarrow as pa
from py4j.protocol import Py4JJavaError

from lamina.core.columns import EPOCH_UNIT
from lamina.engines.files import FileFormat, data_files, is_tsv
from lamina.engines.spark_casts import from_epoch
from lamina.engines.spark_schema import arrow_to_spark_schema, ref
from lamina.errors import InputFileError, LaminaError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

LOG_LEVEL_ENV = "LAMINA_SPARK_LOG_LEVEL"


@contextlib.contextmanager
def _jvm_stderr_hidden() -> Iterator[TextIO]:
    """While the JVM starts, point file descriptor 2 at /dev/null: the JVM keeps it, so
    its start-up banner and log4j lines go nowhere. Yields a stream on the real stderr
    (for a spinner meanwhile)."""
    try:
        real = sys.__stderr__.fileno() if sys.__stderr__ is not None else -1
    except (OSError, ValueError):
        real = -1
    if real != 2:
        yield sys.stderr
        return
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    stream = os.fdopen(os.dup(saved), "w", buffering=1)
    os.dup2(devnull, 2)
    try:
        yield stream if sys.stderr is sys.__stderr__ else sys.stderr
    finally:
        stream.flush()
        stream.close()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def quiet_spark(spark: SparkSession, verbose: bool = False) -> None:
    """Spark logs every failed task at length; callers report the cause themselves.
    ``verbose`` (or ``$LAMINA_SPARK_LOG_LEVEL``, e.g. WARN) brings the logs back."""
    from pyspark.logger import PySparkLogger  # loads pyspark

    from lamina.engines.spark import task_failure_logs  # loads pyarrow.parquet

    level = os.environ.get(LOG_LEVEL_ENV, "WARN" if verbose else "FATAL").upper()
    spark.sparkContext.setLogLevel(level)
    task_failure_logs(spark, "OFF" if level in ("FATAL", "OFF") else level)
    if level in ("FATAL", "OFF"):
        for name in ("DataFrameQueryContextLogger", "SQLQueryContextLogger"):
            PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)
        # a Python UDF without type hints: pyspark warns on every definition
        warnings.filterwarnings("ignore", message="Cannot infer the eval type")


def quiet_session(
    app_name: str = "lamina",
    verbose: bool = False,
    spinner: Callable[[TextIO], contextlib.AbstractContextManager[object]] | None = None,
) -> SparkSession:
    """The shared Spark session (:func:`lamina.engines.spark.get_spark`), started without
    the JVM's banner and log lines on stderr unless ``verbose``. ``spinner(stream)``, given
    the real stderr, is entered while the JVM starts.

    Raises :class:`InputFileError` if Spark cannot start.
    """
    from pyspark import SparkContext  # loads pyspark

    from lamina.engines.spark import get_spark  # loads pyarrow

    hide = not verbose and SparkContext._gateway is None and LOG_LEVEL_ENV not in os.environ
    jvm_err = _jvm_stderr_hidden() if hide else contextlib.nullcontext(sys.stderr)
    with jvm_err as stream:
        shown = spinner(stream) if spinner is not None else contextlib.nullcontext()
        with shown, spark_errors():
            spark = get_spark(app_name=app_name)
    quiet_spark(spark, verbose)
    return spark


def spark_error_message(exc: BaseException) -> str | None:
    """A one-line message for an error raised by Spark; None if it is not Spark's."""
    from pyspark.errors import PySparkException  # loads pyspark

    if isinstance(exc, Py4JJavaError):
        top = java = exc.java_exception
        while java.getCause() is not None:  # a job failure wraps the task's error
            java = java.getCause()
        first = str(top.toString()).splitlines()[0]
        if java is top:
            return first
        cause = " ".join(line.strip() for line in str(java.toString()).splitlines()[:6])
        return f"{first} — {cause}"
    if not isinstance(exc, PySparkException):
        return None
    root: BaseException = exc
    while getattr(root, "_cause", None) is not None:  # a job failure wraps the task's error
        root = root._cause  # type: ignore[attr-defined]
    desc = getattr(root, "_desc", None) or str(root)
    lines = [line for line in str(desc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


@contextlib.contextmanager
def spark_errors() -> Iterator[None]:
    """Report Spark's failures (missing files, malformed values...) as InputFileErrors."""
    try:
        yield
    except LaminaError:
        raise
    except Exception as exc:
        message = spark_error_message(exc)
        if message is None:
            raise
        raise InputFileError(f"Spark failed: {message}") from None


def _cast_to(df: DataFrame, schema: pa.Schema) -> DataFrame:
    """Cast the (string) columns of ``df`` that the table has to the table's types."""
    from pyspark.sql import functions as F  # loads pyspark

    target = {f.name.lower(): f.dataType for f in arrow_to_spark_schema(schema).fields}
    epoch = {f.name.lower(): f for f in schema if EPOCH_UNIT in (f.metadata or {})}
    cols = []
    for c in df.columns:  # names match ignoring case, as the write's conform matches them
        col = F.col(ref(c))
        kind = target.get(c.lower())
        if c.lower() in epoch:  # a time column of epoch numbers: numbers, or times
            numbers = from_epoch(col.cast("long"), epoch[c.lower()])
            times = col.cast("timestamp")
            col = F.when(col.rlike(r"^\s*-?[0-9]+\s*$"), numbers).otherwise(times)
            cols.append(col.alias(c))
            continue
        cols.append(col.cast(kind).alias(c) if kind is not None else col)
    return df.select(*cols)


def read_spark_files(
    spark: SparkSession, fmt: FileFormat, paths: Sequence[str], schema: pa.Schema | None
) -> DataFrame:
    """Read the inputs. With a table ``schema``, CSV/JSON values are read as text and
    cast by column name to the table's types; without one, Spark infers the types."""

    reader = spark.read
    if len(paths) == 1 and "://" not in paths[0] and os.path.isdir(paths[0]):
        # its files are listed below: partition folders (day=1/) still give columns
        reader = reader.option("basePath", paths[0])
    paths = data_files(paths)  # local folders: their data files only
    if not paths:
        raise InputFileError("no data files in the inputs; pass files or folders holding some")
    if fmt is FileFormat.parquet:
        return reader.parquet(*paths)
    if fmt is FileFormat.csv:
        # Spark names a CSV's columns by the first file's header and reads the others'
        # by position: one read per header (and separator), joined by name
        # (enforceSchema=False refuses a header that differs within one read: a URI);
        # an empty file holds no rows (Spark skips it)
        groups: dict[tuple[str, tuple[str, ...] | None], list[str]] = {}
        for path, head in zip(paths, csv_headers(paths), strict=True):
            if head != ():
                groups.setdefault(("\t" if is_tsv(path) else ",", head), []).append(path)
        if not groups:
            raise InputFileError(f"the inputs hold no CSV header: {paths[0]} is empty")
        _same_columns(groups)
        parts = [
            reader.options(
                header=True, enforceSchema=False, inferSchema=schema is None, sep=sep
            ).csv(group)
            for (sep, _), group in groups.items()
        ]
        df = functools.reduce(lambda a, b: a.unionByName(b), parts)
    elif schema is None:
        df = reader.options(inferTimestamp=True).json(list(paths))
    else:
        df = reader.options(primitivesAsString=True).json(list(paths))
    return df if schema is None else _cast_to(df, schema)


def csv_headers(paths: Sequence[str]) -> list[tuple[str, ...] | None]:
    """Each local CSV file's header (decompressed as its extension says); None for a
    URI (Spark checks those: ``enforceSchema=False``)."""

    out: list[tuple[str, ...] | None] = []
    for path in paths:
        if "://" in path or not os.path.isfile(path):
            out.append(None)
            continue
        try:
            line = _first_line(path)
        except (pa.ArrowException, OSError) as exc:
            raise InputFileError(f"cannot read the header of {path}: {exc}") from None
        row = next(csv.reader([line], delimiter="\t" if is_tsv(path) else ","), [])
        out.append(tuple(row))
    return out


def _same_columns(groups: dict[tuple[str, tuple[str, ...] | None], list[str]]) -> None:
    """Refuse CSV files whose headers name different columns (not only another order)."""
    known = [(head, paths[0]) for (_, head), paths in groups.items() if head is not None]
    for head, path in known[1:]:
        first, where = known[0]
        if sorted(head) != sorted(first):
            raise InputFileError(
                f"{path} has columns {list(head)}, {where} has {list(first)}; give files "
                "of one layout"
            )


def _first_line(path: str) -> str:
    """The first line of a file that is not blank (as Spark skips blank lines), as
    Spark decodes it (UTF-8, a byte-order mark dropped, bad bytes replaced); '' for a
    file of blank lines only."""
    text = b""
    with pa.input_stream(path, compression="detect") as f:
        while block := f.read(1 << 16):
            text += block
            lines = text.split(b"\n")
            done = [ln for ln in lines[:-1] if ln.strip(b"\r \t\xef\xbb\xbf")]
            if done:
                return done[0].rstrip(b"\r").decode("utf-8-sig", errors="replace")
    return text.rstrip(b"\r").decode("utf-8-sig", errors="replace") if text.strip() else ""
