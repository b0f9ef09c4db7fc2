"""Where the command line's catalog and warehouse come from.

Each setting is taken from the first of: the command's option (``lamina tables
--warehouse W``), the global option (``lamina --warehouse W tables``), the environment
(``$LAMINA_WAREHOUSE``, ``$LAMINA_CATALOG``), the ``.lamina.toml`` file that ``lamina
init`` wrote, found in the working directory or the nearest of its parents (as git
finds its repository), and last the default (``./warehouse``; the catalog: the SQLite
file ``lamina.db`` in the warehouse). Each setting on its own: a warehouse given by an
option still takes the file's catalog.

Standard library only (``tomllib``): every command reads it at start-up.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from lamina.errors import ConfigError

CONFIG_NAME = ".lamina.toml"
KEYS = ("warehouse", "catalog")
ENV = {"warehouse": "LAMINA_WAREHOUSE", "catalog": "LAMINA_CATALOG"}
DEFAULT_WAREHOUSE = "./warehouse"


@dataclass(frozen=True)
class Setting:
    """One setting's value (None: the default) and where it came from: ``--warehouse``,
    ``$LAMINA_WAREHOUSE``, a config file's path, or ``default``."""

    value: str | None
    source: str


@dataclass(frozen=True)
class Locations:
    """The catalog and warehouse a command uses, and the config file found (if any)."""

    catalog: Setting
    warehouse: Setting
    config: Path | None


def find_config(start: Path) -> Path | None:
    """The ``.lamina.toml`` in ``start`` or the nearest of its parents (None: none)."""
    for folder in (start, *start.parents):
        candidate = folder / CONFIG_NAME
        if candidate.is_file():
            return candidate
    return None


def _is_uri(value: str) -> bool:
    return "://" in value


def read_config(path: Path) -> dict[str, str]:
    """The settings of a config file, relative warehouse paths made absolute (relative
    to the file's folder). Raises ConfigError (unreadable, not TOML, an unknown key, a
    value that is not text)."""
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(
            f"cannot read {path}: {exc}; fix it, or write it again with `lamina init`"
        ) from None
    unknown = sorted(set(data) - set(KEYS))
    if unknown:
        raise ConfigError(
            f"{path} sets {unknown[0]!r}, which lamina does not know; the settings are "
            f"{', '.join(KEYS)}"
        )
    out = {}
    for key, value in data.items():
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(f"{path}: {key} must be a non-empty string, not {value!r}")
        if key == "warehouse" and not _is_uri(value):
            value = os.path.normpath(path.parent / value)
        out[key] = value
    return out


def resolve(
    catalog: str | None,
    warehouse: str | None,
    flag_catalog: str = "--catalog",
    flag_warehouse: str = "--warehouse",
    cwd: Path | None = None,
) -> Locations:
    """Each setting from the option given (``catalog``, ``warehouse``; None: not
    given), else the environment, else the config file, else the default.
    Raises ConfigError (a config file that cannot be read)."""
    given = {"catalog": (catalog, flag_catalog), "warehouse": (warehouse, flag_warehouse)}
    found: Path | None = None
    from_file: dict[str, str] = {}
    settings: dict[str, Setting] = {}
    for key in KEYS:
        value, flag = given[key]
        env = os.environ.get(ENV[key])
        if value:
            settings[key] = Setting(value, flag)
        elif env:
            settings[key] = Setting(env, f"${ENV[key]}")
        else:
            if found is None:
                found = find_config(cwd or Path.cwd())
                from_file = read_config(found) if found is not None else {}
            if key in from_file:
                settings[key] = Setting(from_file[key], str(found))
            else:
                settings[key] = Setting(None, "default")
    if found is None:
        found = find_config(cwd or Path.cwd())
    return Locations(settings["catalog"], settings["warehouse"], found)


def _quoted(value: str) -> str:
    """``value`` as a TOML basic string."""
    out = []
    for ch in value:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def recorded_warehouse(warehouse: str, folder: Path) -> str:
    """How a config file in ``folder`` records ``warehouse``: a URI as it is, a path
    inside ``folder`` relative to it (the folder can move), others absolute."""
    if _is_uri(warehouse):
        return warehouse
    full = Path(os.path.abspath(warehouse))
    try:
        return full.relative_to(folder.resolve()).as_posix() or "."
    except ValueError:
        return str(full)


def config_text(warehouse: str, catalog: str | None) -> str:
    """The text of a config file recording ``warehouse`` and ``catalog`` (None: the
    SQLite file in the warehouse, not written)."""
    lines = [
        "# lamina's settings for this folder and those below it (written by `lamina init`).",
        "# --warehouse/--catalog and $LAMINA_WAREHOUSE/$LAMINA_CATALOG take precedence.",
        f"warehouse = {_quoted(warehouse)}",
    ]
    if catalog is not None:
        lines.append(f"catalog = {_quoted(catalog)}")
    return "\n".join(lines) + "\n"


def write_config(path: Path, text: str) -> str:
    """Write ``text`` to ``path``: ``written``, ``updated`` or ``unchanged``.
    Raises ConfigError (cannot write)."""
    try:
        old = path.read_text() if path.is_file() else None
        if old == text:
            return "unchanged"
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc}") from None
    return "written" if old is None else "updated"


def absolute_sqlite(url: str) -> str:
    """A ``sqlite:///relative.db`` URL with its path made absolute (a config file is
    read from other folders too); any other URL as it is."""
    prefix = "sqlite:///"
    if url.startswith(prefix) and not url.startswith(prefix + "/"):
        rest = url[len(prefix) :]
        path, sep, query = rest.partition("?")
        if path and path != ":memory:":
            return prefix + os.path.abspath(path) + sep + query
    return url
