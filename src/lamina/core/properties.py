"""Table properties of the push/retention features, and duration parsing."""

from __future__ import annotations

import re

from lamina.errors import PropertyError

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd])\s*$")

DEFAULTS = {
    "replaced_segments_retention": "24h",
    "lineage_cleanup_retention": "24h",
    "orphan_grace_period": "1h",
}


def duration_us(text: str, name: str = "duration") -> int:
    """``"90s"``, ``"30m"``, ``"24h"``, ``"7d"`` → microseconds."""
    m = _DURATION.match(str(text))
    if not m:
        raise PropertyError(
            f"{name} = {text!r} is not a duration; write a number and a unit s, m, h or d "
            "(e.g. 0s, 30m, 24h, 7d)"
        )
    us = int(float(m.group(1)) * _UNITS[m.group(2)] * 1_000_000)
    if us > _LONGEST_US:
        raise PropertyError(f"{name} = {text!r} is too long; at most 36500d (100 years)")
    return us


#: the longest duration a property takes: times in µs stay far inside 64-bit integers
_LONGEST_US = 36_500 * 86_400 * 1_000_000


def check_properties(props: dict[str, str]) -> dict[str, str]:
    """Validate the properties lamina interprets; return them normalized."""
    out = dict(props)
    for key in DEFAULTS:
        if key in out:
            duration_us(out[key], key)
    if "ingestion_type" in out:
        value = out["ingestion_type"].upper()
        if value not in ("APPEND", "REFRESH"):
            raise PropertyError(
                f"ingestion_type = {out['ingestion_type']!r}; use APPEND or REFRESH"
            )
        out["ingestion_type"] = value
    if "consistent_push" in out:
        value = out["consistent_push"].lower()
        if value not in ("true", "false"):
            raise PropertyError(f"consistent_push = {out['consistent_push']!r}; use true or false")
        out["consistent_push"] = value
    if "target_rows_per_segment" in out:
        try:
            ok = int(out["target_rows_per_segment"]) > 0
        except ValueError:
            ok = False
        if not ok:
            raise PropertyError("target_rows_per_segment must be a positive whole number")
    if any(k.startswith("compaction.") for k in out):
        from lamina.core.autocompact import policy_of  # its own rules

        policy_of(out, 1)
    return out


def setting(props: dict[str, str], key: str) -> int:
    """A duration property of a table, in µs (its default when unset)."""
    return duration_us(props.get(key, DEFAULTS[key]), key)
