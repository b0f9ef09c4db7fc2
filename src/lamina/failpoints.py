"""Named failpoints: places in lamina's code where a test can make something happen
(a concurrent write, a failure, a pause) at an exact moment, by name, without
reaching into internals that move when the code does.

``failpoint("compaction.major.read", table=h)`` does nothing unless a test armed that
name::

    with failpoints.armed("compaction.major.read", lambda table: t2.append(rows)):
        t.compact(mode="major")

The action gets the failpoint's keyword values; what it raises propagates from the
failpoint. Disarmed, a failpoint costs one dictionary lookup.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

_armed: dict[str, Callable[..., Any]] = {}
_lock = threading.Lock()


def failpoint(name: str, **values: Any) -> None:
    """Run the action armed under ``name``, if any, with ``values``."""
    action = _armed.get(name)
    if action is not None:
        action(**values)


@contextlib.contextmanager
def armed(name: str, action: Callable[..., Any]) -> Iterator[None]:
    """Arm ``name`` with ``action`` for the block (for tests). Raises ValueError if
    the name is armed already."""
    with _lock:
        if name in _armed:
            raise ValueError(f"failpoint {name!r} is armed already")
        _armed[name] = action
    try:
        yield
    finally:
        with _lock:
            _armed.pop(name, None)
