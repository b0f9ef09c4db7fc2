"""Where the command line's catalog and warehouse come from: ``lamina init`` remembers
them in ``.lamina.toml`` (found in the working directory or a parent), the environment
and options win, ``lamina info`` says which is used and why, and commands that only
read never create a warehouse or catalog at a mistyped path."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

import lamina
from lamina.cli import app
from lamina.cli.config import CONFIG_NAME, config_text, read_config, resolve
from lamina.errors import ConfigError

runner = CliRunner(env={"COLUMNS": "250", "NO_COLOR": "1"})


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh working directory, no location in the environment."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LAMINA_WAREHOUSE", raising=False)
    monkeypatch.delenv("LAMINA_CATALOG", raising=False)
    return tmp_path


def lamina_cli(*args: str, env: dict[str, str] | None = None) -> Result:
    return runner.invoke(app, list(args), env=env)


def ok(*args: str, env: dict[str, str] | None = None) -> str:
    result = lamina_cli(*args, env=env)
    assert result.exit_code == 0, result.output
    return result.stdout


def info(*args: str, env: dict[str, str] | None = None) -> dict:
    return json.loads(ok(*args, "info", "--format", "json", env=env))


def test_init_is_remembered_in_this_folder_and_below(here: Path) -> None:
    out = ok("init", "--warehouse", "./wh")
    assert f"{here / CONFIG_NAME} (written)" in out
    assert tomllib.loads((here / CONFIG_NAME).read_text()) == {"warehouse": "wh"}  # relative
    ok("create-table", "events", "--schema", "ts:timestamp[us],k:int64", "-t", "ts")

    deeper = here / "a" / "b"
    deeper.mkdir(parents=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(deeper)
        assert "events" in ok("tables")
        got = info()
    assert got["warehouse"] == str(here / "wh") and got["exists"] and got["tables"] == 1
    assert got["warehouse_source"] == str(here / CONFIG_NAME)
    assert got["config"] == str(here / CONFIG_NAME)
    assert got["catalog"] == f"sqlite:///{here}/wh/lamina.db"
    assert got["catalog_source"].startswith("default")

    # init again: found, nothing rewritten; with other options: updated
    assert "(found)" in ok("init")
    ok("init", "--warehouse", "./wh2")
    assert tomllib.loads((here / CONFIG_NAME).read_text()) == {"warehouse": "wh2"}
    assert "(updated)" not in ok("init", "--warehouse", "./wh2")  # unchanged


def test_options_then_environment_then_file_then_default(here: Path) -> None:
    ok("init", "--warehouse", "from_file")
    assert info()["warehouse_source"] == str(here / CONFIG_NAME)

    env = {"LAMINA_WAREHOUSE": str(here / "from_env")}
    lamina.connect(warehouse=str(here / "from_env")).close()
    got = info(env=env)
    assert got["warehouse"] == str(here / "from_env") and got["warehouse_source"] == (
        "$LAMINA_WAREHOUSE"
    )
    lamina.connect(warehouse=str(here / "from_flag")).close()
    got = info("--warehouse", str(here / "from_flag"), env=env)
    assert got["warehouse_source"] == "--warehouse" and got["warehouse"].endswith("from_flag")
    # the command's own option, after the command name, too
    got = json.loads(ok("info", "-f", "json", "--warehouse", str(here / "from_flag"), env=env))
    assert got["warehouse_source"] == "--warehouse"

    (here / CONFIG_NAME).unlink()
    got = info()
    assert got["warehouse"] == "./warehouse" and got["warehouse_source"] == "default"
    assert got["config"] is None and not got["exists"] and got["tables"] is None


def test_init_records_the_catalog_it_was_given(here: Path) -> None:
    ok("init", "--warehouse", "wh", "--catalog", "sqlite:///cat.db")  # relative to here
    assert tomllib.loads((here / CONFIG_NAME).read_text()) == {
        "warehouse": "wh",
        "catalog": f"sqlite:///{here}/cat.db",  # made absolute: read from other folders
    }
    assert (here / "cat.db").exists()
    (here / "sub").mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(here / "sub")
        got = info()
    assert got["catalog"] == f"sqlite:///{here}/cat.db" and got["exists"]
    assert got["catalog_source"] == str(here / CONFIG_NAME)


@pytest.mark.parametrize(
    "args",
    [
        ["tables"],
        ["query", "SELECT 1"],
        ["describe", "events"],
        ["segments", "events"],
        ["history", "events"],
        ["timeline", "events"],
        ["retention"],
        ["orphans"],
        ["drop-table", "events", "--yes"],
        ["ingest", "events", "x.csv"],
    ],
)
def test_commands_that_create_nothing_refuse_a_mistyped_path(here: Path, args: list[str]) -> None:
    (here / "x.csv").write_text("ts,k\n2024-01-01,1\n")
    result = lamina_cli("--warehouse", "./wharehouse", *args)
    assert result.exit_code == 1, result.output
    message = result.stderr.strip()
    assert message.startswith("error: no warehouse at ./wharehouse"), message
    assert "came from --warehouse" in message
    assert "`lamina init --warehouse ./wharehouse`" in message
    assert not (here / "wharehouse").exists()


def test_a_mistyped_catalog_is_not_created(here: Path) -> None:
    ok("init", "--warehouse", "wh")
    result = lamina_cli("--catalog", f"sqlite:///{here}/typo.db", "tables")
    assert result.exit_code == 1
    assert "no lamina catalog at sqlite:///" in result.stderr
    assert "the catalog's from --catalog" in result.stderr
    assert not (here / "typo.db").exists()
    with pytest.raises(lamina.errors.CatalogNotFoundError, match="create=True"):
        lamina.connect(catalog=f"sqlite:///{here}/typo.db", warehouse="wh", create=False)
    assert not (here / "typo.db").exists()


def test_info_on_a_warehouse_not_created_says_what_to_run(here: Path) -> None:
    result = lamina_cli("info")
    assert result.exit_code == 0
    assert "./warehouse" in result.stdout and "(default)" in result.stdout
    assert "`lamina init --warehouse ./warehouse`" in result.stderr
    assert not (here / "warehouse").exists()


def test_bad_config_files_are_refused_by_name(here: Path) -> None:
    path = here / CONFIG_NAME
    path.write_text('warehuose = "wh"\n')
    result = lamina_cli("tables")
    assert result.exit_code == 1
    assert "sets 'warehuose', which lamina does not know" in result.stderr
    path.write_text("warehouse = wh\n")  # not TOML
    assert "cannot read" in lamina_cli("tables").stderr
    path.write_text("warehouse = 3\n")
    assert "must be a non-empty string" in lamina_cli("tables").stderr
    # options and the environment still win over a broken file for what they set
    with pytest.raises(ConfigError):
        resolve(None, None, cwd=here)
    assert resolve("sqlite:///x.db", "wh", cwd=here).config == path


@pytest.mark.parametrize("odd", ['a "quoted" \\ path', "tab\there", "ünïcödé", "del\x7f"])
def test_config_values_round_trip(tmp_path: Path, odd: str) -> None:
    path = tmp_path / CONFIG_NAME
    path.write_text(config_text("/data/" + odd, "postgresql://u@h/" + odd))
    assert read_config(path) == {
        "warehouse": "/data/" + odd,
        "catalog": "postgresql://u@h/" + odd,
    }


def test_version() -> None:
    result = lamina_cli("--version")
    assert result.exit_code == 0 and result.stdout == f"lamina {lamina.__version__}\n"
