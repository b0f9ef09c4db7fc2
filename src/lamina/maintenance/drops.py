"""Drops that did not finish: the folders ``drop_table`` moved aside in a local warehouse.

A local drop renames the table's folder to ``.dropped-<name>-<tag>`` inside its catalog
transaction and deletes it after the commit. A process that dies in between leaves the
folder behind: after a commit, a folder of files no table owns (deleted here); before
it, the files of a table the catalog still lists (moved back here, beside any files the
table wrote since; a folder of an older drop whose name a new table took goes there
too, where its files are orphans of that table, which retention deletes). A folder is
settled only once it is older than the grace period of orphan files, and in any case
ten minutes old by the clock, so a drop still committing is never touched.
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
    if not wh.local or not os.path.isdir(wh.root):
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
