"""Drops that did not finish: the folders ``drop_table`` moved aside in a local warehouse.

A local drop renames the table's folder to ``.dropped-<name>-<tag>`` inside its catalog
transaction and deletes it after the commit. A process that dies in between leaves the
folder behind: after a commit, a folder of files no table owns (deleted here); before
it, the files of a table the catalog still lists (moved back here, beside any files the
table wrote since; a folder of an older drop whose name a new table took goes there
too, where its files are orphans of that table, which retention deletes). A folder is
settled only once it is older than the grace period of orphan files, and in any case
ten minutes old by the clock, so a drop still committing is never touched.

A remote warehouse (an object store) cannot move a folder atomically: a drop deletes
the table's files by name after its commit. A process that dies in between leaves them
under the name. Under a name a table took again they are that table's orphans (files no
row names), which retention deletes; under a name no table has, the files of its data,
key index and manifest folders are deleted here, each once it is older than the grace
period and ten minutes by the clock (a table created under the name meanwhile writes
only younger files).
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass

from lamina.context import CatalogContext
from lamina.core.properties import setting
from lamina.errors import TableNotFoundError, WarehouseError
from lamina.meta import tables

#: a folder younger than this (wall clock) may belong to a drop still committing
MIN_AGE_S = 600

DROPPED = re.compile(r"^\.dropped-(?P<name>.+)-[0-9a-f]{12}$")


@dataclass(frozen=True)
class SettledDrops:
    """What :func:`settle_drops` did: folders deleted and folders moved back."""

    deleted: int = 0
    restored: int = 0


def settle_drops(ctx: CatalogContext, names: Sequence[str] | None, at_us: int) -> SettledDrops:
    """Settle the folders of unfinished drops of the tables ``names`` (None: of every
    name, listed or not) older than their grace period at ``at_us``. Raises
    WarehouseError (a folder that cannot be moved or removed)."""
    wh = ctx.warehouse
    if not wh.local:
        return _settle_remote(ctx, names, at_us)
    if not os.path.isdir(wh.root):
        return SettledDrops()
    wanted = None if names is None else {n.lower() for n in names}
    deleted = restored = 0
    with os.scandir(wh.root) as entries:
        found = [
            (e.path, m["name"])
            for e in entries
            if (m := DROPPED.match(e.name)) and e.is_dir(follow_symlinks=False)
        ]
    for path, name in sorted(found):
        if wanted is not None and name.lower() not in wanted:
            continue
        try:
            rec = tables.get_table(ctx.db, name)
        except TableNotFoundError:
            rec = None
        props = rec.properties if rec is not None else {}
        made_ns = os.stat(path).st_ctime_ns
        if time.time_ns() - made_ns < MIN_AGE_S * 10**9:
            continue  # a drop may still be committing
        if at_us - made_ns // 1000 < setting(props, "orphan_grace_period"):
            continue
        if rec is not None:
            _move_back(path, wh.path(rec.name))
            restored += 1
        else:
            wh.delete_dir(path)
            deleted += 1
    return SettledDrops(deleted, restored)


#: the folders of a table that lamina writes (only these are deleted in a remote one)
TABLE_FOLDERS = ("data", "_keys", "_manifests")
_TABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


def _settle_remote(ctx: CatalogContext, names: Sequence[str] | None, at_us: int) -> SettledDrops:
    """Delete the old files of the folders of names no table has (``names`` given: all
    are tables, whose leftovers are orphans). A folder counts as deleted when files of
    it were."""
    if names is not None:
        return SettledDrops()
    wh = ctx.warehouse
    grace = setting({}, "orphan_grace_period")
    deleted = 0
    for name in wh.list_dirs(wh.root):
        if not _TABLE_NAME.fullmatch(name):
            continue
        try:
            if tables.get_table(ctx.db, name).name == name:
                continue  # a table's folder
        except TableNotFoundError:
            pass
        now_ns = time.time_ns()
        old = [
            info.path
            for sub in TABLE_FOLDERS
            for info in wh.list_files(wh.path(f"{name}/{sub}"))
            if now_ns - (info.mtime_ns or now_ns) >= MIN_AGE_S * 10**9
            and at_us - (info.mtime_ns or now_ns) // 1000 >= grace
        ]
        ctx.delete_files([p[len(wh.root) + 1 :] for p in old])
        deleted += bool(old)
    return SettledDrops(deleted=deleted)


def _move_back(src: str, dst: str) -> None:
    """Move ``src``'s files to the same places under ``dst`` (a file already there is
    kept), then remove ``src``."""
    try:
        if not os.path.exists(dst):
            os.rename(src, dst)
            return
        for folder, _, files in os.walk(src):
            target = os.path.join(dst, os.path.relpath(folder, src))
            os.makedirs(target, exist_ok=True)
            for f in files:
                if not os.path.exists(os.path.join(target, f)):
                    os.rename(os.path.join(folder, f), os.path.join(target, f))
        shutil.rmtree(src)
    except OSError as exc:
        raise WarehouseError(
            f"cannot move the files of an unfinished drop from {src} back to {dst}: {exc}; "
            "move them by hand, then run retention again"
        ) from None
