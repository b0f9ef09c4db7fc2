"""The one retry policy of writes: an attempt that lost to a concurrent commit in a way
that is safe to retry (``CommitConflictError.retryable``) is made again, up to a
number of attempts, optionally after a short random pause (longer each time, so that
the others go first). Every write path that retries goes through :func:`retrying`."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

from lamina.errors import CommitConflictError

T = TypeVar("T")

#: attempts of a write that must publish by itself once it started (a partial upsert
#: merging its keys' records, a transaction holding partial upserts)
MERGE_ATTEMPTS = 20


def retrying(
    attempt: Callable[[int], T],
    attempts: int,
    *,
    pause: bool = False,
    again: Callable[[int, CommitConflictError], None] | None = None,
) -> T:
    """``attempt(i)`` for i = 0, 1, ... while it raises a retryable CommitConflictError,
    ``attempts`` times at most. Before another attempt, ``again(i, exc)`` runs (it may
    clean up, or raise to stop) and, with ``pause``, a short random pause.
    Raises the last CommitConflictError, or what ``again`` raises."""
    for i in range(attempts):
        try:
            return attempt(i)
        except CommitConflictError as exc:
            if not exc.retryable or i == attempts - 1:
                raise
            if again is not None:
                again(i, exc)
            if pause:
                time.sleep(random.uniform(0, 0.005 * (i + 1)))
    raise AssertionError("unreachable: attempts >= 1")
