"""Background work at a lower CPU scheduling priority, so that it yields to ingestion."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

#: Linux sets nice values per thread; elsewhere PRIO_PROCESS would lower the whole process.
PER_THREAD = sys.platform.startswith("linux")


def run_niced(fn: Callable[[], T], nice: int) -> T:
    """``fn()`` in a fresh thread whose nice value is ``nice`` above the caller's (at
    most 19), then gone: no thread is ever re-prioritized back (raising a nice value
    takes no privilege, lowering it does). Returns ``fn``'s result or raises its
    exception. With ``nice`` 0, or off Linux, ``fn`` runs in the calling thread.

    ``fn`` must not grow a long-lived thread pool (pyarrow's CPU and I/O pools: read
    with ``use_threads=False, pre_buffer=False``): a thread inherits its creator's
    nice value and would keep it for all later work of the process."""
    if nice <= 0 or not PER_THREAD:
        return fn()
    out: list[T] = []
    err: list[BaseException] = []

    def body() -> None:
        tid = threading.get_native_id()
        with contextlib.suppress(OSError):  # not permitted (a sandbox): run at normal priority
            level = min(19, os.getpriority(os.PRIO_PROCESS, tid) + nice)
            os.setpriority(os.PRIO_PROCESS, tid, level)
            if level == 19 and hasattr(os, "SCHED_IDLE"):  # below every nice value
                os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
        try:
            out.append(fn())
        except BaseException as exc:  # noqa: BLE001 - raised in the caller
            err.append(exc)

    worker = threading.Thread(target=body, name="lamina-background")
    worker.start()
    try:
        worker.join()
    except BaseException:  # e.g. Ctrl-C: let the work finish before its commit is cleaned up
        worker.join()
        raise
    if err:
        raise err[0]
    return out[0]
