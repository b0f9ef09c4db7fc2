"""Named failpoints: places in lamina's code where a test can make something happen
(a concurrent write, a failure, a pause) at an exact moment, by name, without
reaching into internals that move when the code does.

``failpoint("compaction.major.read", table=h)`` does nothing unless a test armed that
name::

    with failpoints.armed("compaction.major.read", lambda table: t2.append(rows)):
        t.compact(mode="major")

The action gets the failpoint's keyword values; what it raises propagates from the
failpoint. Disarmed, a failpoint costs two dictionary lookups.

Across processes (a Spark task's or planner's Python worker, a driver in a
subprocess), ``armed`` cannot reach: the environment variable ``LAMINA_FAILPOINTS``
arms failpoints in every process that inherits it, as entries separated by ``;``,
each ``NAME[@KEY=VALUE,...]:ACTION``. The ``@`` conditions compare the failpoint's
values as text (``datasource.write.flushed@partition=0,attempt=0:kill``). Actions:

- ``kill``: SIGKILL this process (a crash: nothing after the failpoint runs);
- ``kill=PID``: SIGKILL process ``PID`` (e.g. a driver), then this one;
- ``touch=PATH``: create the file ``PATH`` (the test sees the failpoint was reached);
- ``pause=PATH``: write this process's pid into the file ``PATH``, then wait until it
  is deleted (at most ten minutes): the test sees the moment and chooses when (or
  whether: it may kill the process) the process goes on.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

_armed: dict[str, Callable[..., Any]] = {}
_lock = threading.Lock()
#: The variable arming failpoints across processes (see the module's docstring).
ENV = "LAMINA_FAILPOINTS"
#: ``LAMINA_FAILPOINTS`` as last parsed: (its text, name -> [(conditions, action)]).
_from_env: tuple[str, dict[str, list[tuple[dict[str, str], str]]]] = ("", {})


def failpoint(name: str, **values: Any) -> None:
    """Run the action armed under ``name``, if any, with ``values``."""
    action = _armed.get(name)
    if action is not None:
        action(**values)
    text = os.environ.get(ENV)
    if text:
        _run_env(text, name, values)


def _run_env(text: str, name: str, values: dict[str, Any]) -> None:
    """Run the actions ``LAMINA_FAILPOINTS`` (``text``) arms under ``name``."""
    global _from_env
    if _from_env[0] != text:
        _from_env = (text, _parse(text))
    for conditions, action in _from_env[1].get(name, []):
        if all(str(values.get(k)) == v for k, v in conditions.items()):
            _act(action)


def _parse(text: str) -> dict[str, list[tuple[dict[str, str], str]]]:
    """``LAMINA_FAILPOINTS``'s entries by name. Raises ValueError (a malformed one)."""
    out: dict[str, list[tuple[dict[str, str], str]]] = {}
    for entry in filter(None, (e.strip() for e in text.split(";"))):
        point, sep, action = entry.partition(":")
        if not sep or not action:
            raise ValueError(f"{ENV} entry {entry!r}: write NAME[@KEY=VALUE,...]:ACTION")
        name, _, cond = point.partition("@")
        conditions = dict(c.split("=", 1) for c in cond.split(",") if c)
        out.setdefault(name, []).append((conditions, action))
    return out


def _act(action: str) -> None:
    """Do one action of ``LAMINA_FAILPOINTS``. Raises ValueError (an unknown one)."""
    verb, _, arg = action.partition("=")
    if verb == "kill":
        if arg:
            os.kill(int(arg), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)
    elif verb == "touch":
        Path(arg).touch()
    elif verb == "pause":
        marker = Path(arg)
        written = marker.with_name(marker.name + ".tmp")
        written.write_text(str(os.getpid()))
        written.replace(marker)  # whole: the test reads the pid as soon as it sees it
        deadline = time.monotonic() + 600
        while marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    else:
        raise ValueError(
            f"{ENV}: unknown action {action!r} (kill, kill=PID, touch=PATH, pause=PATH)"
        )


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
