"""A newcomer's walkthrough: the README's first CLI block (after its ``<!-- walkthrough``
marker), run verbatim, command by command, in a fresh empty folder with the ``lamina``
program on the PATH, and what each command prints checked. A change to the block fails
here until the expectations below follow it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import lamina

README = Path(__file__).resolve().parent.parent / "README.md"
MARKER = "<!-- walkthrough"

#: each command of the block, and what its stdout + stderr must hold
EXPECTED: list[tuple[str, list[str]]] = [
    ("printf ", []),
    (
        "lamina init --warehouse ./wh",
        ["root       {here}/wh", "config     {here}/.lamina.toml (written)"],
    ),
    (
        "lamina ingest events day.csv --create --time-column ts --txn nightly:20240102",
        [
            "created table events (time column ts, DAY chunks)",
            "timestamp[us, tz=UTC]",
            "✓ version 1 (append) on events: 3 rows, 2 segments added",
        ],
    ),
    (
        "lamina describe events",
        ["time column  ts", "granularity  DAY", "rows         3", "2 visible", "amount    double"],
    ),
    ("lamina query ", ["ana     19.75", "ben       3.0", "2 rows"]),
    (
        "lamina ingest events day.csv --txn nightly:20240102",
        ["✓ skipped: nightly already wrote version 20240102", "(table version 1); nothing written"],
    ),
    ("lamina query ", ["wrote 3 rows to events.parquet (parquet"]),
    ("lamina retention --dry-run", ["would delete 0 segment files and 0 orphan files"]),
    (
        "lamina info",
        ["warehouse  {here}/wh", "({here}/.lamina.toml)", "tables     1", lamina.__version__],
    ),
]


def walkthrough() -> list[str]:
    """The commands of the README's walkthrough block, as written there."""
    text = README.read_text()
    assert MARKER in text, "the README lost its walkthrough marker"
    after = text.split(MARKER, 1)[1]
    block = after.split("```\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def test_the_readme_walkthrough_runs_as_written(tmp_path: Path) -> None:
    commands = walkthrough()
    assert [c[: len(e)] for c, (e, _) in zip(commands, EXPECTED, strict=False)] == [
        e for e, _ in EXPECTED
    ] and len(commands) == len(EXPECTED), commands
    bin_dir = Path(sys.executable).parent
    if not (bin_dir / "lamina").exists():
        pytest.skip(f"no lamina program beside {sys.executable} (install the package)")
    src = str(Path(lamina.__file__).resolve().parent.parent)  # this checkout's lamina
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("LAMINA_") and k not in ("FORCE_COLOR", "TTY_COMPATIBLE")
    }
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        PYTHONPATH=src,
        NO_COLOR="1",
        COLUMNS="200",
    )
    here = tmp_path.resolve()
    for command, (_, wanted) in zip(commands, EXPECTED, strict=True):
        proc = subprocess.run(
            ["bash", "-c", command], cwd=here, env=env, capture_output=True, text=True,
            timeout=300, check=False,
        )  # fmt: skip
        said = proc.stdout + proc.stderr
        assert proc.returncode == 0, f"$ {command}\n{said}"
        assert "Traceback" not in said and "error:" not in said, f"$ {command}\n{said}"
        for piece in wanted:
            assert piece.format(here=here) in said, f"$ {command}\n{said}\nwanted: {piece}"
    assert (here / "events.parquet").exists() and (here / "wh" / "lamina.db").exists()
