"""Every Python, SQL and shell snippet of README.md and docs/*.md runs, so none can rot.

Each document's fenced blocks run in order, in one namespace, in a fresh temporary
working directory (``lamina.connect()`` makes ``./warehouse`` there); a traceback names
the markdown file and line. Free names a snippet leaves to the reader (``batch``,
``fixed``, ...) come from the document's prelude below, with data of the snippet's
schema, and its epilogue checks what the snippets' comments claim. An HTML comment on
the line before a block changes how it runs:

* ``<!-- snippet: raises NAME -->``: the block must raise the lamina error NAME (the
  blocks after it run on);
* ``<!-- snippet: not run — REASON -->``: the block is not run, for the reason given
  (only where it cannot run here: ``NOT_RUN`` lists them all).

Plain fences (diagrams, lists of commands) are not snippets; README's CLI walkthrough
is tests/test_cli_walkthrough.py's, and the ``lamina ...`` command lines of docs/*.md's
prose are checked against the commands' ``--help``. Python blocks run Python, ``sql``
blocks Spark SQL, ``sh``/``bash``/``console`` blocks bash with this Python's bin first
on PATH. A stream a block starts processes what it has and stops after the block.

The documents whose snippets use Spark run in one Python process of their own, one
after another in one directory emptied between them (``test_spark_snippets_run``): its
JVM starts in that directory, as a user's would, so relative paths given to Spark
resolve there, and ``LAMINA_WAREHOUSE`` is its ``./warehouse`` (the data source's
default, docs/spark.md), where ``lamina.connect()`` and the data source meet.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PY_LANGS = {"python", "py"}
SHELL_LANGS = {"sh", "bash", "console", "shell"}
SQL_LANGS = {"sql"}

#: Every block that is not run: (document, first line of code) -> the reason's start.
NOT_RUN: dict[tuple[str, str], str] = {
    ("docs/deploy.md", "opts = {"): "a catalog host and a bucket of a cluster",
}

_FENCE = re.compile(r"^(`{3,})\s*([\w+-]*)\s*$")
_MARKER = re.compile(r"^<!--\s*snippet:\s*(.*?)\s*-->$")


@dataclass(frozen=True)
class Block:
    doc: str  # path relative to the repository
    line: int  # line number of the block's first line of code
    lang: str
    code: str
    marker: str | None  # the text of a `<!-- snippet: ... -->` just before the fence

    @property
    def not_run(self) -> str | None:
        """The reason of a `not run` marker ('' when it gives none), else None."""
        if self.marker is None or not self.marker.startswith("not run"):
            return None
        return self.marker.removeprefix("not run").strip(" —–-:")

    @property
    def raises(self) -> str | None:
        if self.marker is None or not self.marker.startswith("raises "):
            return None
        return self.marker.removeprefix("raises ").strip()

    def where(self) -> str:
        return f"{self.doc}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of a markdown file that carry a language."""
    doc = str(path.relative_to(ROOT))
    out: list[Block] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, lang = m.group(1), m.group(2).lower()
        j = i + 1
        while j < len(lines) and lines[j].strip() != fence:
            j += 1
        prev = i - 1
        while prev >= 0 and not lines[prev].strip():
            prev -= 1
        mm = _MARKER.match(lines[prev].strip()) if prev >= 0 else None
        if lang:
            code = "\n".join(lines[i + 1 : j]) + "\n"
            out.append(Block(doc, i + 2, lang, code, mm.group(1) if mm else None))
        elif mm:
            raise AssertionError(f"{doc}:{i + 1}: a snippet marker before a fence of no language")
        i = j + 1
    return out


def uses_spark(path: Path) -> bool:
    return any(
        b.not_run is None and (b.lang in SQL_LANGS or re.search(r"\bspark\b", b.code))
        for b in blocks(path)
        if b.lang in PY_LANGS | SQL_LANGS
    )


# -- what the documents leave to the reader -------------------------------------------
# A prelude defines the free names of a document's snippets, with data of their schema;
# an epilogue checks what the document's comments and prose claim the snippets did.

Namespace = dict[str, Any]
JAN = dt.datetime(2024, 1, 1)


def _day(day: int, users: list[str], schema: pa.Schema, **values: Any) -> pa.Table:
    """Rows of ``schema`` on January ``day`` of 2024, one per user, an hour apart."""
    n = len(users)
    cols: dict[str, Any] = {"ts": [JAN + dt.timedelta(days=day - 1, hours=h) for h in range(n)]}
    cols["user"] = users
    for f in schema:
        if f.name not in cols:
            cols[f.name] = [values.get(f.name, 1)] * n if f.name != "country" else [None] * n
    return pa.table({f.name: cols[f.name] for f in schema}, schema=schema)


def _spark() -> Any:
    from lamina.engines.spark import get_spark

    return get_spark()


#: Spark's schemas of README's files (given: inferring them would cost a Spark job each)
EVENTS_DDL = "ts timestamp_ntz, user string, amount double, qty bigint, country string"
RAW_DDL = "ts timestamp, user string, amount double"


def _readme(ns: Namespace) -> None:
    spark = _spark()
    # the events table's columns by the time the concurrency block writes to it
    events = pa.schema(
        [("ts", pa.timestamp("us")), ("user", pa.string()), ("amount", pa.float64()),
         ("qty", pa.int64()), ("country", pa.string())]
    )  # fmt: skip
    base = pa.schema([f for f in events if f.name != "country"]).set(3, pa.field("qty", pa.int32()))
    os.makedirs("incoming")
    pq.write_table(_day(5, ["cy", "dee"], events), "incoming/part-0.parquet")
    os.makedirs("raw/2024-01")
    raw = pa.schema(
        [("ts", pa.timestamp("us", tz="UTC")), ("user", pa.string()), ("amount", pa.float64())]
    )
    pq.write_table(_day(7, ["ann", "bob", "cy"], raw), "raw/2024-01/part-0.parquet")
    ns.update(
        spark=spark,
        batch=_day(4, ["ann", "bob"], events),  # other days than the overwrite's
        fixed=_day(2, ["bob"], events, amount=31.0),  # 2024-01-02 corrected
        df=spark.readStream.schema(EVENTS_DDL).parquet("incoming"),
        nightly_rows=_day(1, ["ann", "bob", "cy"], base),
        batch1=_day(2, ["ann"], base),
        batch2=_day(3, ["bob"], base),
        stream=spark.readStream.schema(RAW_DDL).parquet("raw/2024-01"),
    )


def _readme_claims(ns: Namespace) -> None:
    from pyspark.errors import StreamingQueryException

    cat = ns["cat"]
    events = cat.load_table("events")
    assert "n" in events.to_arrow().column_names  # "no column n? this compaction's commit adds it"
    again = events.append(ns["batch"], txn=("orders-loader", 42))
    assert again.already_applied, "a second txn=('orders-loader', 42) is skipped"
    assert ns["u"].to_arrow().select(["plane", "alt"]).to_pylist() == [
        {"plane": "F-GKXA", "alt": 11000.0}
    ]
    assert ns["snap"].count() == 0, "the replacement by hand deleted every segment"
    raw_rows = ns["df"].count()
    # df.write, the stream (once), t.append(df)
    assert cat.load_table("clicks").count() == 3 * raw_rows
    assert ns["changes"].columns[-3:] == ["_change", "_commit_id", "_commit_seq"]
    # one app id per checkpoint: a new checkpoint under it raises StreamCheckpointError
    incoming = ns["spark"].readStream.schema(EVENTS_DDL).parquet("incoming")
    q = incoming.writeStream.foreachBatch(events.foreach_batch("orders-stream")).start()
    try:
        q.processAllAvailable()
    except StreamingQueryException as exc:
        assert "StreamCheckpointError" in str(exc), exc
    else:
        raise AssertionError("a new checkpoint under 'orders-stream' was taken")
    finally:
        q.stop()


BALANCES = pa.schema(
    [pa.field("account", pa.string(), nullable=False), ("ts", pa.timestamp("us")),
     ("updated_at", pa.timestamp("us")), ("closed", pa.bool_()), ("balance", pa.float64())]
)  # fmt: skip


def _upserts(ns: Namespace) -> None:
    import lamina

    t0 = JAN
    ns.update(
        cat=lamina.connect(),
        spark=_spark(),
        schema=BALANCES,
        batch=pa.table(  # seed 002's example: (abc-12, 100) and (abc-13, 102)
            {
                "account": ["abc-12", "abc-13"],
                "ts": [t0, t0],
                "updated_at": [t0, t0],
                "closed": [False, False],
                "balance": [100.0, 102.0],
            },
            schema=BALANCES,
        ),  # fmt: skip
    )


def _upserts_claims(ns: Namespace) -> None:
    avg = ns["cat"].sql("SELECT avg(balance) AS a FROM balances").column("a").to_pylist()
    assert avg == [101.0], avg  # "(abc-12, 100) and (abc-13, 102) average 101"
    t = ns["cat"].load_table("ledger")
    assert t.properties["write.update.mode"] == "merge-on-read"


EVENTS = pa.schema([("ts", pa.timestamp("us")), ("user", pa.string()), ("amount", pa.float64())])


def _concurrency(ns: Namespace) -> None:
    import lamina

    cat = lamina.connect()
    t = cat.create_table("events", EVENTS, time_column="ts", segment_granularity="DAY")
    for day in (1, 2, 3):
        t.append(_day(day, ["ann", "bob"], EVENTS))
    bad = [s for s in t.segments() if str(s.interval).startswith("2024-01-03")]
    ns.update(
        cat=cat,
        t=t,
        batch=_day(4, ["ann", "bob"], EVENTS),  # other days than the overwrite's
        fixed=_day(2, ["bob"], EVENTS, amount=31.0),  # 2024-01-02 corrected
        bad_id=bad[0].id,
        january=pa.concat_tables(_day(d, ["ann"], EVENTS) for d in range(1, 32)),
    )


def _concurrency_claims(ns: Namespace) -> None:
    t = ns["t"]
    actions = [c.action for c in t.history()]
    assert len(actions) == 5, actions  # 3 appends, the transaction, the locked overwrite
    assert t.to_arrow().num_rows == 31  # january replaced every day it touches


SPARK_EVENTS = pa.schema(
    [("ts", pa.timestamp("us", tz="UTC")), ("user", pa.string()), ("amount", pa.float64())]
)


def _spark_doc(ns: Namespace) -> None:
    import lamina

    spark = _spark()
    cat = lamina.connect()
    t = cat.create_table("events", SPARK_EVENTS, time_column="ts", segment_granularity="DAY")
    for day in range(1, 18):  # seqs 1 to 17 (asOf seq:17)
        t.append(_day(day, ["ann", "bob"], SPARK_EVENTS))
    df = spark.createDataFrame(_day(20, ["cy", "dee"], SPARK_EVENTS))
    os.makedirs("incoming")
    pq.write_table(_day(21, ["eve"], SPARK_EVENTS), "incoming/part-0.parquet")
    df.createOrReplaceTempView("staged")
    spark.createDataFrame(_day(22, ["fay"], SPARK_EVENTS)).createOrReplaceTempView("staged_day")
    ns.update(
        spark=spark,
        cat=cat,
        df=df,
        stream=spark.readStream.schema(df.schema).parquet("incoming"),
    )


def _spark_doc_claims(ns: Namespace) -> None:
    old, events, day, feed = (ns[name] for name in ("old", "events", "day", "feed"))
    assert old.count() == 34, old.count()  # seq 17: the prelude's 17 days of 2 rows
    # planned on its first action, now: the overwrite of January left df's 2 rows (the
    # 20th), the stream added 1 (the 21st), INSERT INTO 2 and INSERT OVERWRITE 1 (the 22nd)
    days = sorted(r["ts"].day for r in ns["cat"].load_table("events").to_arrow().to_pylist())
    assert days == [20, 20, 20, 20, 21, 22], days
    assert events.count() == 6, events.count()
    assert day.columns == ["user", "amount"] and day.count() == 0, day.columns
    assert feed.columns == ["ts", "user", "amount", "_change", "_commit_id", "_commit_seq"], (
        feed.columns
    )
    assert list(Path("spark-daemons").glob("*connect*.pid")), "no Connect server started"


PRELUDES: dict[str, Callable[[Namespace], None]] = {
    "README.md": _readme,
    "docs/concurrency.md": _concurrency,
    "docs/spark.md": _spark_doc,
    "docs/upserts.md": _upserts,
}
EPILOGUES: dict[str, Callable[[Namespace], None]] = {
    "README.md": _readme_claims,
    "docs/concurrency.md": _concurrency_claims,
    "docs/spark.md": _spark_doc_claims,
    "docs/upserts.md": _upserts_claims,
}

# -- running ---------------------------------------------------------------------------


def _shell_env() -> dict[str, str]:
    """The environment of a shell snippet: this Python's bin (the venv's) first on PATH,
    the lamina this test imports, and the pid and log files of Spark daemons in the
    current (temporary) directory."""
    import lamina

    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    src = str(Path(lamina.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    env["SPARK_PID_DIR"] = env["SPARK_LOG_DIR"] = os.path.abspath("spark-daemons")
    return env


def _stop_spark_daemons() -> None:
    """Stop a Connect server a shell snippet started (pyspark's own script)."""
    import pyspark

    script = Path(pyspark.__file__).parent / "sbin" / "stop-connect-server.sh"
    subprocess.run([str(script)], env=_shell_env(), capture_output=True, timeout=120, check=False)


def _exec(code: str, block: Block, ns: dict[str, Any]) -> None:
    """Run a Python block so that a traceback names the markdown line it came from."""
    exec(compile("\n" * (block.line - 1) + code, block.doc, "exec"), ns)  # noqa: S102


def _finish_streams(ns: dict[str, Any]) -> None:
    """Let every stream a block started process what it has, then stop it (raises what
    the stream raised)."""
    spark = ns.get("spark")
    if spark is None or not hasattr(spark, "streams"):
        return
    for query in spark.streams.active:
        try:
            query.processAllAvailable()
        finally:
            query.stop()


def _run_block(block: Block, ns: dict[str, Any], cleanups: list[Callable[[], None]]) -> None:
    if block.lang in PY_LANGS:
        _exec(block.code, block, ns)
        _finish_streams(ns)
    elif block.lang in SQL_LANGS:
        for statement in filter(str.strip, block.code.split(";")):
            ns["spark"].sql(statement).collect()
    elif block.lang in SHELL_LANGS:
        if "start-connect-server.sh" in block.code:
            cleanups.append(_stop_spark_daemons)
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block.code],
            env=_shell_env(), capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 0 and "failed to launch" not in done.stdout, (
            f"{block.where()}: exit status {done.returncode}\n{done.stdout}\n{done.stderr}"
        )
    else:
        raise AssertionError(
            f"{block.where()}: a ```{block.lang} block: teach tests/test_docs_snippets.py to "
            "run it, or mark it `<!-- snippet: not run — why -->`"
        )


def run_document(path: Path, seconds: dict[str, float] | None = None) -> dict[str, int]:
    """Run every block of a document in the current directory; counts of what ran (and
    into ``seconds``, how long the prelude, each block by its line and the epilogue took)."""
    doc = str(path.relative_to(ROOT))
    ns: dict[str, Any] = {"__name__": "__snippets__"}
    counts = {"run": 0, "raised": 0, "not_run": 0, "elsewhere": 0}
    cleanups: list[Callable[[], None]] = []
    took = {} if seconds is None else seconds
    try:
        started = time.monotonic()
        if doc in PRELUDES:
            PRELUDES[doc](ns)
        took["prelude"] = time.monotonic() - started
        for block in blocks(path):
            started = time.monotonic()
            if block.not_run is not None:
                assert block.not_run, f"{block.where()}: a `not run` marker must say why"
                counts["not_run"] += 1
                continue
            if doc == "README.md" and block.lang in SHELL_LANGS:
                counts["elsewhere"] += 1  # README's CLI walkthrough: test_cli_walkthrough.py
                continue
            if block.raises is None:
                _run_block(block, ns, cleanups)
                counts["run"] += 1
            else:
                _run_raising(block, ns, cleanups)
                counts["raised"] += 1
            took[f"line {block.line}"] = time.monotonic() - started
        started = time.monotonic()
        if doc in EPILOGUES:
            EPILOGUES[doc](ns)
        took["epilogue"] = time.monotonic() - started
    finally:
        for cleanup in cleanups:
            cleanup()
        if hasattr(ns.get("cat"), "close"):
            ns["cat"].close()
    return counts


def _run_raising(block: Block, ns: dict[str, Any], cleanups: list[Callable[[], None]]) -> None:
    """Run a block marked ``raises NAME``: it must raise the lamina error NAME."""
    from lamina import errors

    expected = getattr(errors, block.raises or "", None)
    assert isinstance(expected, type) and issubclass(expected, errors.LaminaError), (
        f"{block.where()}: no lamina error {block.raises}"
    )
    try:
        _run_block(block, ns, cleanups)
    except expected:
        return
    raise AssertionError(f"{block.where()}: raised no {block.raises}")


# -- the tests -------------------------------------------------------------------------

PLAIN = [p for p in DOCS if not uses_spark(p)]
WITH_SPARK = [p for p in DOCS if uses_spark(p)]


@pytest.mark.parametrize("path", PLAIN, ids=[p.name for p in PLAIN])
def test_snippets_run(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LAMINA_WAREHOUSE", raising=False)
    monkeypatch.delenv("LAMINA_CATALOG", raising=False)
    counts = run_document(path)
    assert counts["not_run"] == _not_run_in(path)


@pytest.fixture(scope="module")
def spark_documents(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """What running the documents that use Spark gave, by document: one Python process
    (one JVM) runs them one after another in one directory, emptied between them."""
    here = tmp_path_factory.mktemp("spark-docs")
    env = _shell_env()
    env["PYTHONPATH"] = os.pathsep.join((str(ROOT), env["PYTHONPATH"]))
    env["LAMINA_WAREHOUSE"] = str(here / "warehouse")
    # a user's machine: get_spark()'s local[*] (the cluster make test starts is for the
    # Spark tests' own sessions), no catalog URL
    for name in ("LAMINA_CATALOG", "SPARK_MASTER", "PYSPARK_SUBMIT_ARGS"):
        env.pop(name, None)
    done = subprocess.run(
        [sys.executable, "-m", "tests.test_docs_snippets", *map(str, WITH_SPARK)],
        cwd=here, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    found = [json.loads(line) for line in done.stdout.splitlines() if line.startswith('{"doc"')]
    assert done.returncode == 0 and found, done.stderr[-6000:]
    return {r["doc"]: r for r in found}


@pytest.mark.spark
@pytest.mark.parametrize("path", WITH_SPARK, ids=[p.name for p in WITH_SPARK])
def test_spark_snippets_run(path: Path, spark_documents: dict[str, dict[str, Any]]) -> None:
    result = spark_documents[str(path.relative_to(ROOT))]
    print(f"{path.name} ran in {result['seconds']} s: {result['parts']}")
    assert result["error"] is None, result["error"]
    assert result["counts"]["not_run"] == _not_run_in(path)


def _not_run_in(path: Path) -> int:
    doc = str(path.relative_to(ROOT))
    return sum(1 for d, _ in NOT_RUN if d == doc)


def test_snippets_not_run_are_few_and_say_why() -> None:
    found = {
        (b.doc, b.code.splitlines()[0]): b.not_run
        for p in DOCS
        for b in blocks(p)
        if b.not_run is not None
    }
    assert set(found) == set(NOT_RUN)
    for key, reason in found.items():
        assert reason and reason.startswith(NOT_RUN[key]), key


def test_every_document_is_covered() -> None:
    assert sorted(PLAIN + WITH_SPARK) == sorted(DOCS)
    assert {"README.md", "spark.md"} <= {p.name for p in WITH_SPARK}


_CLI_SPAN = re.compile(r"`(lamina [^`]+)`")


def cli_lines(path: Path) -> list[str]:
    """The command lines a document's prose gives in code spans (`lamina compact --auto`)."""
    return [" ".join(m.group(1).split()) for m in _CLI_SPAN.finditer(path.read_text())]


@pytest.mark.parametrize("path", DOCS[1:], ids=[p.name for p in DOCS[1:]])
def test_cli_lines_in_docs_name_real_commands(path: Path) -> None:
    """Each `lamina COMMAND --option` of docs/*.md names a command and options it takes
    (their arguments are the reader's: TABLE). README's CLI section runs in
    tests/test_cli_walkthrough.py."""
    from typer.testing import CliRunner

    from lamina.cli import app

    runner = CliRunner(env={"COLUMNS": "250", "NO_COLOR": "1"})
    for line in cli_lines(path):
        command, *args = line.split()[1:]
        shown = runner.invoke(app, [command, "--help"])
        assert shown.exit_code == 0, f"{path.name}: `{line}`: {shown.output}"
        for option in (a for a in args if a.startswith("-")):
            assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", shown.output), (
                f"{path.name}: `{line}`: `lamina {command}` takes no {option}"
            )


def _empty_directory() -> None:
    """Remove all here, the warehouse and its catalog too: the next document starts
    afresh (its tables' seqs from 1). The data source connects per use, and Python
    objects of the last document that hold a connection are collected first."""
    import gc
    import shutil

    gc.collect()
    for entry in Path().iterdir():
        shutil.rmtree(entry) if entry.is_dir() else entry.unlink()


def main(argv: list[str]) -> int:
    """Run documents (paths) one after another here, in a directory emptied between
    them; print a line of JSON for each: its counts, or the error it raised."""
    for arg in argv:
        path = Path(arg).resolve()
        result: dict[str, Any] = {"doc": str(path.relative_to(ROOT)), "error": None}
        started = time.monotonic()
        seconds: dict[str, float] = {}
        try:
            result["counts"] = run_document(path, seconds)
        except BaseException:  # noqa: BLE001
            result["error"] = traceback.format_exc()
        result["seconds"] = round(time.monotonic() - started, 1)
        result["parts"] = {k: round(v, 1) for k, v in seconds.items()}
        print(json.dumps(result), flush=True)
        _empty_directory()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
