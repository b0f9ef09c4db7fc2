"""The warehouse: where segment files live (a local path or a filesystem URI)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import uuid
from typing import TYPE_CHECKING

from lamina.errors import WarehouseError

if TYPE_CHECKING:
    import pyarrow.fs as pafs
    from fsspec import AbstractFileSystem


class Warehouse:
    """Files under one root. Segment files are written once and never modified.

    A local warehouse opens its pyarrow filesystem on first use (``fs``), so opening a
    catalog to read its rows needs no pyarrow.
    """

    def __init__(self, location: str) -> None:
        self._fs: pafs.FileSystem | None = None
        self._fsspec: AbstractFileSystem | None = None
        if "://" in location:
            import pyarrow.fs as pafs  # loads numpy, pyarrow

            try:
                self._fs, path = pafs.FileSystem.from_uri(location)
            except (ValueError, OSError) as exc:  # ArrowInvalid is a ValueError
                raise WarehouseError(f"cannot open warehouse {location!r}: {exc}") from None
            self.local = isinstance(self._fs, pafs.LocalFileSystem)
            self.root = path.rstrip("/")
        else:
            self.local = True
            self.root = os.path.abspath(location)
        self.location = location

    @property
    def fs(self) -> pafs.FileSystem:
        if self._fs is None:
            import pyarrow.fs as pafs  # loads numpy, pyarrow

            self._fs = pafs.LocalFileSystem()
        return self._fs

    def fsspec(self) -> AbstractFileSystem | None:
        """The warehouse's own pyarrow filesystem (same endpoint, same credentials) as
        an fsspec filesystem for engines that read files through one (DuckDB's
        ``register_filesystem``); None for a local warehouse, which engines read
        directly. Its protocol is this warehouse's own (``laminawh<hash>``, no real
        one's): the engine names a file ``PROTOCOL://`` + its path."""
        if self.local:
            return None
        if self._fsspec is None:
            from lamina.io.remote_files import warehouse_files  # loads fsspec, pyarrow

            digest = hashlib.sha256(self.location.encode()).hexdigest()[:16]
            self._fsspec = warehouse_files(self.fs, f"laminawh{digest}")
        return self._fsspec

    def ensure_writable(self) -> None:
        """Create the root if needed and prove a file can be written there."""
        probe = f"{self.root}/.lamina-probe-{uuid.uuid4().hex}"
        try:
            if self._fs is None:  # local: no need to load pyarrow for this
                os.makedirs(self.root, exist_ok=True)
                with open(probe, "wb") as f:
                    f.write(b"ok")
                os.remove(probe)
                return
            self.fs.create_dir(self.root, recursive=True)
            with self.fs.open_output_stream(probe) as out:
                out.write(b"ok")
            self.fs.delete_file(probe)
        except OSError as exc:
            raise WarehouseError(
                f"warehouse {self.location!r} is not writable ({exc}); point "
                "LAMINA_WAREHOUSE / warehouse= at a directory you can write"
            ) from None

    #: the file recording which catalog writes the warehouse (no table takes its name)
    MARKER = "_lamina_catalog.json"

    def claim(self, catalog_id: str, label: str) -> None:
        """Record that the catalog ``catalog_id`` (``label``: its URL, for messages)
        writes this warehouse, or check that it is that catalog's. Two catalogs on one
        warehouse take each other's files for their own (both number commit folders
        from 1; each deletes as orphans the files the other's rows name).
        Raises WarehouseError."""

        marker = self.path(self.MARKER)
        try:
            found = self._read_marker(marker)
            if found is None:
                tmp = f"{marker}.{uuid.uuid4().hex}"
                mine = json.dumps({"catalog": catalog_id, "url": label}).encode()
                if self._fs is None:  # local: plain files (no pyarrow at a CLI's start)
                    with open(tmp, "wb") as f:
                        f.write(mine)
                    with contextlib.suppress(FileExistsError):  # made once: a catalog
                        os.link(tmp, marker)  # connecting at the same time loses
                    os.remove(tmp)
                else:
                    with self.fs.open_output_stream(tmp) as out:
                        out.write(mine)
                    self.fs.move(tmp, marker)
                found = self._read_marker(marker)
        except (OSError, ValueError) as exc:
            raise WarehouseError(f"cannot read or write {marker}: {exc}") from None
        if found is None or found.get("catalog") != catalog_id:
            raise self._taken(found)

    def owner(self) -> dict[str, str] | None:
        """The marker of the catalog that writes this warehouse (None: none yet).
        Raises WarehouseError (unreadable)."""
        marker = self.path(self.MARKER)
        try:
            return self._read_marker(marker)
        except (OSError, ValueError) as exc:
            raise WarehouseError(f"cannot read {marker}: {exc}") from None

    def refuse(self, found: dict[str, str] | None) -> None:
        """Raise the WarehouseError of a catalog that is not ``found``'s."""
        raise self._taken(found)

    def _taken(self, found: dict[str, str] | None) -> WarehouseError:
        return WarehouseError(
            f"warehouse {self.location!r} holds the tables of another catalog "
            f"({(found or {}).get('url')}); give this catalog a warehouse of its own "
            f"(two catalogs on one warehouse delete each other's files), or remove "
            f"{self.path(self.MARKER)} if that catalog is gone for good"
        )

    def _read_marker(self, marker: str) -> dict[str, str] | None:

        try:
            if self._fs is None:
                with open(marker, "rb") as f:
                    raw = f.read()
            else:
                with self.fs.open_input_stream(marker) as s:
                    raw = s.read()
        except FileNotFoundError:
            return None
        found = json.loads(raw.decode())
        return found if isinstance(found, dict) else {}

    def path(self, rel: str) -> str:
        return f"{self.root}/{rel}"

    def uri(self, path: str) -> str:
        """A URI for engines (Spark) that want one."""
        if self.local:
            return "file://" + path
        scheme = self.location.split("://", 1)[0]
        return f"{scheme}://{path}"

    def size(self, path: str) -> int:
        info = self.fs.get_file_info(path)
        return int(info.size or 0)

    def exists(self, path: str) -> bool:
        import pyarrow.fs as pafs  # loads numpy, pyarrow

        return self.fs.get_file_info(path).type != pafs.FileType.NotFound

    def delete_dir(self, path: str) -> None:
        """Remove a directory and everything below it; a missing one is fine."""
        try:
            self.fs.delete_dir(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            if self.exists(path):
                raise WarehouseError(f"cannot remove {path}: {exc}") from None

    def list_dirs(self, path: str) -> list[str]:
        """The names of the folders directly under ``path`` (none if it is missing)."""
        import pyarrow.fs as pafs  # loads numpy, pyarrow

        try:
            infos = self.fs.get_file_info(pafs.FileSelector(path, recursive=False))
        except FileNotFoundError:
            return []
        return sorted(i.base_name for i in infos if i.type == pafs.FileType.Directory)

    def list_files(self, path: str) -> list[pafs.FileInfo]:
        import pyarrow.fs as pafs  # loads numpy, pyarrow

        try:
            infos = self.fs.get_file_info(pafs.FileSelector(path, recursive=True))
        except FileNotFoundError:
            return []
        return [i for i in infos if i.type == pafs.FileType.File]


def commit_dir(table: str, commit_id: int) -> str:
    """Relative directory holding every file a commit writes."""
    return f"{table}/data/c{commit_id:010d}"
