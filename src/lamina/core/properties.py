"""Table properties of the push/retention features, and duration parsing."""

from __future__ import annotations

import decimal
import numbers
import re
from collections.abc import Iterable, Mapping
from typing import Any

from lamina.core.args import is_bool, is_unicode
from lamina.errors import PropertyError

#: the property an upsert table's primary key is stored in (it makes the table one)
UPSERT_KEY_PROPERTY = "upsert.primary_key"

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


#: properties lamina reads outside the ``compaction.`` and ``upsert.`` namespaces
KNOWN = (
    *DEFAULTS,
    "ingestion_type",
    "consistent_push",
    "target_rows_per_segment",
    "write.update.mode",
)
#: how an upsert stores the records it supersedes (Iceberg's ``write.update.mode``,
#: Hudi's table types): deletion vectors, or the files holding them rewritten
WRITE_MODE = "write.update.mode"
MERGE_ON_READ = "merge-on-read"
COPY_ON_WRITE = "copy-on-write"
WRITE_MODES = (MERGE_ON_READ, COPY_ON_WRITE)
#: the automatic compaction policy's properties: ``compaction.`` and one of these
COMPACTION_PREFIX = "compaction."
COMPACTION_KEYS = (
    "skip_offset_from_latest",
    "small_segment_rows",
    "max_segments_per_chunk",
    "target_rows_per_segment",
    "segment_granularity",
    "sort_by",
    "rollup",
    "nice",
    "max_superseded_percent",
    "max_vector_age",
    "inline",
)
#: the seq of a table's last schema change (``t.add_columns``; lamina's own, not
#: settable): files written before it may lack columns, which read as nulls
SCHEMA_CHANGED_SEQ = "schema.changed_seq"
#: the seq of a plain table's first row-level change (``t.delete``, ``t.update``,
#: ``t.merge``; lamina's own, not settable): snapshots from then on may hide rows of
#: their files by deletion vectors, and its change feed is read row by row
ROWS_CHANGED_SEQ = "rows.changed_seq"
#: settings of a catalog (``lamina.connect``), which a table property cannot change
CATALOG_SETTINGS = ("writer_wait_s", "heartbeat_s", "stale_after_s")


def as_text(props: Any) -> dict[str, str]:
    """Property values as the catalog stores them: text, a bool as ``true``/``false``.
    Raises PropertyError for what is not a mapping of non-empty names to a string, a
    number or a bool (None, a list: stored as ``'None'``, ``'[1]'`` they would read back
    as something else)."""
    if not isinstance(props, Mapping):
        raise PropertyError(f"properties must be a dict of name -> value, not {props!r}")

    out = {}
    for key, value in props.items():
        if not isinstance(key, str) or not key.strip():
            raise PropertyError(f"a property name must be a non-empty string, not {key!r}")
        for text in (key, value):
            if isinstance(text, str) and not is_unicode(text):
                raise PropertyError(
                    f"property {key!r}: {text!r} is not valid Unicode (a lone surrogate); "
                    "fix the text"
                )
        if is_bool(value):
            out[key] = str(bool(value)).lower()
        elif isinstance(value, numbers.Integral):
            out[key] = str(int(value))
        elif isinstance(value, str | numbers.Real | decimal.Decimal):
            out[key] = str(value)
        else:
            raise PropertyError(f"property {key!r} = {value!r}: give a string, a number or a bool")
    return out


def check_names(keys: list[str]) -> None:
    """Refuse a property that looks like one of lamina's but is not: another case or a
    near spelling of a known name, or a catalog setting. Other names are the user's own
    metadata, stored as given (as Delta and Iceberg store them). Raises PropertyError."""
    for key in keys:
        if key in KNOWN or key.startswith(("compaction.", "upsert.")):
            continue
        if key.lower() in CATALOG_SETTINGS:
            raise PropertyError(
                f"{key} is a setting of the catalog, not of a table: pass it to "
                f"lamina.connect({key.lower()}=...)"
            )
        folded = key.lower().replace("-", "_")
        head, dot, tail = folded.partition(".")
        if dot:  # a misspelt prefix (compactoin.nice)
            bare = [k for k in COMPACTION_KEYS if _one_edit(head, "compaction") and tail == k]
        else:  # a policy's name without its prefix (a short one exactly: 'online' is
            # a name of its own, not 'inline' misspelt)
            bare = [
                k for k in COMPACTION_KEYS if _one_edit(folded, k) and (len(k) > 6 or folded == k)
            ]
        if bare:  # kept as the user's own metadata, the policy would never apply
            raise PropertyError(
                f"unknown table property {key!r}: the compaction policy's is "
                f"'{COMPACTION_PREFIX}{bare[0]}' (without the prefix, lamina would keep it "
                "as your own metadata and never apply it)"
            )
        near = [k for k in KNOWN if _one_edit(folded, k)]
        if near:
            raise PropertyError(
                f"unknown table property {key!r}: did you mean {near[0]!r}? "
                f"lamina's properties are {', '.join(KNOWN)} and compaction.*; give your "
                "own metadata a name of its own"
            )


def _one_edit(a: str, b: str) -> bool:
    """Whether ``a`` is ``b``, or ``b`` with one character added, dropped, changed, or
    two neighbours swapped (a typo; ``ingestion_time`` is not ``ingestion_type``)."""
    if a == b:
        return True
    if abs(len(a) - len(b)) > 1:
        return False
    i = 0
    while i < min(len(a), len(b)) and a[i] == b[i]:
        i += 1
    return (
        a[i + 1 :] == b[i + 1 :]  # changed
        or a[i + 1 :] == b[i:]  # added
        or a[i:] == b[i + 1 :]  # dropped
        or (a[i : i + 2] == b[i : i + 2][::-1] and a[i + 2 :] == b[i + 2 :])  # swapped
    )


def check_reserved(names: Iterable[str], creating: bool) -> None:
    """Refuse property names that are not the user's to give: ``schema.*`` (lamina's
    record of the table's schema changes) and ``upsert.*`` (the upsert definition,
    set by ``create_table``'s arguments and fixed from then on). ``creating``: given to
    ``create_table`` (else set or removed on a table). Raises PropertyError."""
    names = list(names)
    own = sorted(k for k in names if k.startswith("schema."))
    if own and creating:
        raise PropertyError(
            f"{own[0]}: schema.* properties are lamina's record of a table's schema "
            "changes (t.add_columns); drop it"
        )
    if own:
        raise PropertyError(
            f"{own[0]} is lamina's record of the table's schema changes "
            "(t.add_columns, t.widen_column): it cannot be set or removed"
        )
    rows = sorted(k for k in names if k.startswith("rows."))
    if rows:
        raise PropertyError(
            f"{rows[0]}: rows.* properties are lamina's record of a table's row-level "
            "changes (t.delete, t.update, t.merge); they cannot be given, set or removed"
        )
    fixed = sorted(k for k in names if k.startswith("upsert."))
    if fixed and creating:
        raise PropertyError(
            f"{fixed[0]} is set from create_table's primary_key, comparison_column, "
            "delete_column and partial_upsert arguments (lamina create-table's "
            "--primary-key, --comparison-column, --delete-column): pass those instead"
        )
    if fixed:
        raise PropertyError(
            f"{fixed[0]} is part of the table's upsert definition, fixed when it was "
            "created; create a new table to change it"
        )


def setting(props: dict[str, str], key: str) -> int:
    """A duration property of a table, in µs (its default when unset)."""
    return duration_us(props.get(key, DEFAULTS[key]), key)


def write_mode(props: Mapping[str, str]) -> str:
    """``write.update.mode``: ``merge-on-read`` (the default) or ``copy-on-write``.
    Raises PropertyError."""
    value = props.get(WRITE_MODE, MERGE_ON_READ).strip().lower()
    if value not in WRITE_MODES:
        raise PropertyError(
            f"{WRITE_MODE} = {props[WRITE_MODE]!r}; use {MERGE_ON_READ} (deletion vectors, "
            f"the default) or {COPY_ON_WRITE} (an upsert rewrites the files it supersedes "
            "records in)"
        )
    return value
