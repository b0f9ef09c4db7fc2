"""A brute-force oracle for the segments of one chunk (one interval, one version).

Straight from the definitions, with no incremental state: group the segments by
(root range, minor version); a group is *full* when all its atomic_update_group_size
segments are present; A *overshadows* B when A's root range contains B's and A's
minor version is higher. Then

* settled  = full groups no full group overshadows;
* a group that is not full and that no full group overshadows is a *candidate* unless
  the settled groups it overshadows cover each of its root partitions exactly once;
* visible  = candidates no candidate overshadows + settled groups no visible
  candidate overshadows;
* every other group: overshadowed if a visible group overshadows it, else standby;
* the chunk is complete when every visible group is full and the visible root ranges
  cover partitions 0..core-1 (core = max num_core_partitions), or, for core 0, when
  anything is visible.

Druid's shape of the same rules: a partial group of the highest minor version stays
on standby while what it replaces is all there, and shows (making the chunk
incomplete) when that is not so either.
"""

from __future__ import annotations

from dataclasses import dataclass

from lamina.core.segment import Segment

Key = tuple[int, int, int]  # root start, root end, minor version


@dataclass
class ChunkView:
    states: dict[int, str]  # partition id -> visible | standby | overshadowed
    visible: list[Segment]  # by partition id
    complete: bool


def _over(a: Key, b: Key) -> bool:
    return a[0] <= b[0] and b[1] <= a[1] and a[2] > b[2]


def chunk_view(segs: list[Segment]) -> ChunkView:
    groups: dict[Key, list[Segment]] = {}
    for s in segs:
        groups.setdefault((*s.root_range, s.minor_version), []).append(s)
    full = {
        k for k, members in groups.items() if len(members) == members[0].atomic_update_group_size
    }
    settled = [k for k in full if not any(_over(f, k) for f in full)]

    def covered_once(k: Key) -> bool:
        inner = [b for b in settled if _over(k, b)]
        return all(sum(1 for b in inner if b[0] <= r < b[1]) == 1 for r in range(k[0], k[1]))

    candidates = [
        k
        for k in groups
        if k not in full and not any(_over(f, k) for f in full) and not covered_once(k)
    ]
    top = [c for c in candidates if not any(_over(d, c) for d in candidates)]
    visible = top + [b for b in settled if not any(_over(t, b) for t in top)]
    states = {}
    for k, members in groups.items():
        if k in visible:
            state = "visible"
        elif any(_over(v, k) for v in visible):
            state = "overshadowed"
        else:
            state = "standby"
        for s in members:
            states[s.partition_id] = state
    core = max((s.num_core_partitions for s in segs), default=0)
    if not visible or any(k not in full for k in visible):
        complete = False
    elif core == 0:
        complete = True
    else:
        complete = all(any(v[0] <= r < v[1] for v in visible) for r in range(core))
    shown = sorted((s for k in visible for s in groups[k]), key=lambda s: s.partition_id)
    return ChunkView(states, shown, complete)
