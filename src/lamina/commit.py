"""Commits: the unit of change of a table."""

from __future__ import annotations

import datetime as dt
import enum
from dataclasses import dataclass, field
from typing import Any

from lamina.interval import from_us


class CommitState(enum.StrEnum):
    """REQUESTED -> INFLIGHT -> COMPLETED, or ABORTED from either open state."""

    REQUESTED = "REQUESTED"
    INFLIGHT = "INFLIGHT"
    COMPLETED = "COMPLETED"
    ABORTED = "ABORTED"


OPEN_STATES = (CommitState.REQUESTED.value, CommitState.INFLIGHT.value)


@dataclass(frozen=True)
class Commit:
    """One recorded write. ``id`` grows strictly; readers can go back to any completed one."""

    id: int
    action: str
    state: str
    started_at: dt.datetime
    completed_at: dt.datetime | None
    table: str = ""
    added: tuple[str, ...] = field(default=(), repr=False)
    removed: tuple[str, ...] = field(default=(), repr=False)
    metadata: dict[str, Any] = field(default_factory=dict, repr=False)

    @staticmethod
    def time(us: int | None) -> dt.datetime | None:
        return None if us is None else from_us(us)
