"""Upsert rules: which record of a primary key is its latest, and how partial upserts merge.

Pure and vectorized over pyarrow; the catalog/storage layer supplies the key index
lookups and applies the outcome (deletion vectors, key index updates). The rules are
Pinot's (``ConcurrentMapPartitionUpsertMetadataManager`` and the partial-upsert mergers):

* **Comparison.** For each key the record with the greatest comparison value (default:
  the time column) is its latest record. On a tie the later record wins: the later
  commit, then the later row of one input. An older record (out of order) is stored
  but never replaces a newer one, and is never valid.
* **Deletes.** A record whose ``delete_column`` is true is a tombstone: it competes like
  any record and becomes the key's latest (valid), but the key is not visible
  (not queryable). A later record with a greater-or-equal comparison value revives the
  key. An older delete is just out of order. A null delete flag means "not a delete".
* **Partial upserts.** A record that becomes its key's latest, is not a delete, and
  whose predecessor (the key's latest record just before it) exists and is not a
  tombstone, is merged column by column with that predecessor; otherwise it is taken
  whole (a revived key does not inherit what was deleted). Key and comparison columns
  are never merged. Per-column strategies (:class:`Strategy`), with Pinot's nulls:
  OVERWRITE keeps the previous value only when the new one is null; FORCE_OVERWRITE
  always takes the new value; for all the others a null previous value gives the new
  value and a null new value gives the previous value. Out-of-order records are
  stored as they came. Records are applied one by one in order, so several records of
  one key in one input fold left to right (each in-order record merges with the
  previous one's merged value), exactly as Pinot ingests a stream.

Deliberate deviations from Pinot: one comparison column (not Pinot's several); null or
NaN comparison values and null key values are refused (Pinot substitutes default null
values); no metadata TTL (lamina's key index is complete).

**Concurrency.** The result depends only on the records and the order in which their
commits are published, never on when the data files were written. A writer may run
:func:`resolve_batch` while writing (it looks at its own input only); the catalog runs
:func:`resolve_against` at publish, under the commit lock, against the key index as of
the previous published commit, in completion order. So two writers upserting
overlapping keys both succeed: whichever publishes second is "incoming" and wins ties.
Applying batch A then batch B gives exactly what applying A's rows followed by B's rows
as one input gives (the tests check this).

**Applying a** :class:`Resolution` (the catalog's part, in the commit of seq ``s``): store
``records`` as the new segment; its rows that are not ``queryable`` (out of order,
superseded in the same input, tombstones) go into its deletion vector from ``s``; each
``invalidated`` location goes into its segment's deletion vector from ``s``; the key
index maps the key of every ``valid`` row to (new segment, row, comparison value,
tombstone = valid and not queryable). Tombstones stay in the key index: they decide
later comparisons.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lamina.core.comparison import total_order
from lamina.core.partial import merge
from lamina.core.upsert_spec import (
    DEFAULT_KEY,
    Strategy,
    UpsertSpec,
    delete_flags,
    type_problem,
)
from lamina.errors import UpsertError

__all__ = [
    "DEFAULT_KEY",
    "DELETED",
    "ROW",
    "SEGMENT",
    "SEQ",
    "BatchResult",
    "UpsertBatch",
    "Resolution",
    "Strategy",
    "UpsertSpec",
    "resolve_against",
    "resolve_batch",
]

#: Columns of the ``current`` table given to :func:`resolve_against` besides the key,
#: comparison and (partial upserts) value columns.
DELETED = "$deleted"  #: bool: the key's latest record is a tombstone (optional; default false)
SEGMENT = "$segment"  #: opaque location of that record: its segment ...
ROW = "$row"  #: ... and row; returned as they are in :attr:`Resolution.invalidated`
SEQ = "$seq"  #: optional: the commit seq of that record, checked to be below ``seq``


@dataclass(frozen=True)
class BatchResult:
    """One input resolved on its own (:func:`resolve_batch`).

    ``group``: per row, the dense id (0..n_keys-1) of its key; ``winners``: per key id, the
    row of its latest record in the batch (greatest comparison value, ties to the later
    row); ``in_order``: per row, whether it is not older than any earlier row of its key
    in the batch; ``deleted``: per row, whether it is a tombstone; ``order``: the rows
    sorted by (key id, row).
    """

    batch: pa.Table
    group: np.ndarray
    winners: np.ndarray
    in_order: np.ndarray
    deleted: np.ndarray
    order: np.ndarray

    @property
    def num_keys(self) -> int:
        return len(self.winners)


@dataclass(frozen=True)
class Resolution:
    """The outcome of applying one input after the current state (:func:`resolve_against`).

    ``records``: the rows to store, one per input row in input order — the input itself
    for full upserts; for partial upserts in-order rows carry their merged values.
    ``valid``: per row, it is its key's latest record after this commit (Pinot's
    validDocIds); ``queryable``: valid and not a tombstone (queryableDocIds);
    ``out_of_order``: older than its key's latest record when it was applied (stored,
    never valid). ``invalidated``: the ``$segment``/``$row`` of the current records that
    stop being their key's latest (tombstones included).
    """

    records: pa.Table
    valid: np.ndarray
    queryable: np.ndarray
    out_of_order: np.ndarray
    invalidated: pa.Table


@dataclass(frozen=True)
class UpsertBatch:
    """An upsert's input as its writer wrote it: resolved on its own (``resolved``),
    each row's key hash (``keys``: see :func:`lamina.core.keyhash.key_hashes`), and per
    written file, in the commit's file order, the input rows it holds in file order
    (``file_rows``)."""

    spec: UpsertSpec
    resolved: BatchResult
    keys: np.ndarray
    file_rows: tuple[np.ndarray, ...]
    #: a partial upsert, merged before writing: where each winner key's record was
    #: (file location, row; None: no record) when it read them — publishing refuses
    #: if any changed meanwhile
    expect: tuple[tuple[str, int] | None, ...] | None = None
    #: records a compaction rewrote, each its key's latest when it read them (resolved
    #: by :func:`resolve_rewrite`, not compared)
    rewrite: bool = False

    def positions(self) -> tuple[np.ndarray, np.ndarray]:
        """Per input row: the index of its file and its position in that file."""
        n = self.resolved.batch.num_rows
        file_of = np.full(n, -1, np.int64)
        pos_of = np.full(n, -1, np.int64)
        for i, rows in enumerate(self.file_rows):
            file_of[rows] = i
            pos_of[rows] = np.arange(len(rows))
        return file_of, pos_of


def _require_columns(table: pa.Table, cols: Iterable[str], what: str) -> None:
    for col in cols:
        if col not in table.column_names:
            raise UpsertError(f"{what} has no column {col!r} (columns: {table.column_names})")


def _numpy(arr: pa.Array | pa.ChunkedArray, dtype: type) -> np.ndarray:
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=dtype)


def _group_ids(table: pa.Table, keys: tuple[str, ...]) -> tuple[np.ndarray, int]:
    """Dense ids of the rows' keys (hashing, no sort of the values) and how many."""
    ids: np.ndarray | None = None
    count = 1
    for col in keys:
        enc = pc.dictionary_encode(table.column(col).combine_chunks())
        codes = _numpy(enc.indices, np.int64)
        card = len(enc.dictionary)
        if ids is None:
            ids, count = codes, card
            continue
        if count > 2**62 // max(card, 1):  # re-densify first: the product could overflow
            uniq, ids = np.unique(ids, return_inverse=True)
            count = len(uniq)
        ids, count = ids * card + codes, count * card
    if ids is None:
        return np.zeros(0, np.int64), 0
    if len(keys) > 1:
        uniq, ids = np.unique(ids, return_inverse=True)
        count = len(uniq)
    return ids.astype(np.int64, copy=False), count


def _check_comparison(values: pa.ChunkedArray, col: str, what: str) -> None:
    if values.null_count:
        raise UpsertError(
            f"{what}: comparison column {col!r} holds {values.null_count} null(s); every "
            "record needs a comparison value"
        )
    if pa.types.is_floating(values.type) and pc.any(pc.is_nan(values)).as_py():
        raise UpsertError(f"{what}: comparison column {col!r} holds NaN; NaN has no order")


def resolve_batch(batch: pa.Table, spec: UpsertSpec) -> BatchResult:
    """Resolve one input on its own: each key's latest record within it.

    Vectorized (hashing, one dense rank of the comparison values, one stable argsort).
    Raises UpsertError if a key, comparison or delete column is missing, a key column
    holds nulls, or the comparison column holds nulls or NaN.
    """
    cols = [*spec.primary_key, spec.comparison_column]
    if spec.delete_column is not None:
        cols.append(spec.delete_column)
    _require_columns(batch, cols, "the input")
    for col in spec.primary_key:
        nulls = batch.column(col).null_count
        if nulls:
            raise UpsertError(
                f"primary key column {col!r} holds {nulls} null(s) in the input; every "
                "record needs its key"
            )
    cmp_values = batch.column(spec.comparison_column)
    _check_comparison(cmp_values, spec.comparison_column, "the input")
    n = batch.num_rows
    if spec.delete_column is None:
        deleted = np.zeros(n, bool)
    else:
        deleted = delete_flags(batch.column(spec.delete_column))
    group, n_keys = _group_ids(batch, spec.primary_key)
    if n == 0:
        empty = np.zeros(0, np.int64)
        return BatchResult(batch, empty, empty, np.zeros(0, bool), deleted, empty)
    if n_keys == n:  # every key once (the usual batch): each row is its key's winner
        winners = np.empty(n, np.int64)
        winners[group] = np.arange(n)
        return BatchResult(batch, group, winners, np.ones(n, bool), deleted, winners)
    ranked = total_order(cmp_values)
    rank = _numpy(pc.rank(ranked, sort_keys="ascending", tiebreaker="dense"), np.int64)
    order = np.argsort(group, kind="stable")  # rows by (key, row)
    g_sorted = group[order]
    combined = g_sorted * (int(rank.max()) + 1) + rank[order]  # increases with the key id
    in_order_sorted = combined == np.maximum.accumulate(combined)  # running max per key
    in_order = np.empty(n, bool)
    in_order[order] = in_order_sorted
    # A key's winner is its last in-order row: the greatest value, the latest of ties.
    pos = np.flatnonzero(in_order_sorted)
    g_pos = g_sorted[pos]
    last = np.ones(len(pos), bool)
    last[:-1] = g_pos[1:] != g_pos[:-1]
    winners = order[pos[last]]
    assert len(winners) == n_keys
    return BatchResult(batch, group, winners, in_order, deleted, order)


def _match_current(
    current: pa.Table, batch: pa.Table, winners: np.ndarray, keys: tuple[str, ...]
) -> np.ndarray:
    """Per key id of the batch, the row of ``current`` holding that key (-1: none)."""
    n_keys = len(winners)
    match = np.full(n_keys, -1, np.int64)
    if current.num_rows == 0 or n_keys == 0:
        return match
    if len(keys) == 1:
        wanted = batch.column(keys[0]).take(pa.array(winners))
        found = pc.index_in(current.column(keys[0]), value_set=wanted)
        cur_rows = np.flatnonzero(_numpy(found.is_valid(), bool))
        key_ids = _numpy(pc.drop_null(found), np.int64)
    else:
        left = batch.select(list(keys)).take(pa.array(winners))
        left = left.append_column("$k", pa.array(np.arange(n_keys)))
        right = current.select(list(keys)).append_column("$c", pa.array(np.arange(len(current))))
        joined = left.join(right, keys=list(keys), join_type="inner")
        key_ids = _numpy(joined.column("$k"), np.int64)
        cur_rows = _numpy(joined.column("$c"), np.int64)
    if len(key_ids) and np.bincount(key_ids, minlength=n_keys).max() > 1:
        raise UpsertError("the current records hold one key twice; the key index is corrupt")
    match[key_ids] = cur_rows
    return match


def resolve_against(
    current: pa.Table | None,
    incoming: BatchResult,
    spec: UpsertSpec,
    seq: int | None = None,
    match: np.ndarray | None = None,
) -> Resolution:
    """Apply a resolved input after the current state; the input commits later (``seq``).

    ``current`` holds the latest record of (at least) the input's keys, one row per key:
    the key and comparison columns, ``$segment`` and ``$row`` (opaque location),
    optionally ``$deleted`` (tombstone flag) and ``$seq``; for partial upserts also every
    other column of the input (the stored, merged values). Rows for other keys are
    ignored. A key's incoming winner replaces the current record when its comparison
    value is greater or equal (a tie goes to the later commit: the incoming one).

    Raises UpsertError when ``current`` lacks a column, holds a key twice, has a column
    whose type the input's cannot take, null/NaN comparison values, or a ``$seq`` not
    below ``seq``; or when a partial-upsert strategy cannot merge an input column.

    ``match``: per key id of the input, the row of ``current`` holding that key (-1:
    none), when the caller knows it (a key index lookup); else keys are matched by value.
    """
    batch = incoming.batch
    n = batch.num_rows
    keys, cmp_col = spec.primary_key, spec.comparison_column
    value_cols = [c for c in batch.column_names if spec.strategy(c) is not None]
    if current is None:
        current = pa.table(
            {
                **{c: pa.array([], batch.schema.field(c).type) for c in (*keys, cmp_col)},
                **{c: pa.array([], batch.schema.field(c).type) for c in value_cols},
                SEGMENT: pa.array([], pa.string()),
                ROW: pa.array([], pa.int64()),
            }
        )
    _require_columns(current, [*keys, cmp_col, SEGMENT, ROW, *value_cols], "current")
    if seq is not None and SEQ in current.column_names and len(current):
        top = pc.max(current.column(SEQ)).as_py()
        if top is not None and top >= seq:
            raise UpsertError(
                f"current holds a record of commit {top}, not before the incoming commit {seq}"
            )
    try:
        current = current.select([*keys, cmp_col, *value_cols, *_extra(current)]).cast(
            pa.schema(
                [batch.schema.field(c) for c in (*keys, cmp_col, *value_cols)]
                + [current.schema.field(c) for c in _extra(current)]
            )
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as e:
        raise UpsertError(f"current's columns do not match the input's types: {e}") from e
    _check_comparison(current.column(cmp_col), cmp_col, "current")

    if match is None:
        match = _match_current(current, batch, incoming.winners, keys)
    elif match.shape != (incoming.num_keys,) or match.max(initial=-1) >= len(current):
        raise UpsertError(
            f"match must give one row of current (< {len(current)}) or -1 per key of the "
            f"input ({incoming.num_keys}), got shape {match.shape}"
        )
    has_cur = match >= 0
    # Per row, the current comparison value of its key (null: no current record).
    cur_idx = pa.array(match[incoming.group], mask=~has_cur[incoming.group])
    cur_cmp_per_row = current.column(cmp_col).take(cur_idx)
    newer = pc.greater_equal(total_order(batch.column(cmp_col)), total_order(cur_cmp_per_row))
    not_older = pc.fill_null(newer, True)
    applied = incoming.in_order & _numpy(not_older, bool)
    out_of_order = ~applied

    new_wins = applied[incoming.winners]
    valid = np.zeros(n, bool)
    valid[incoming.winners[new_wins]] = True
    queryable = valid & ~incoming.deleted
    replaced = match[new_wins & has_cur]
    invalidated = current.select([SEGMENT, ROW]).take(pa.array(replaced, pa.int64()))

    records = batch
    if spec.is_partial and value_cols:
        cur_deleted = (
            _numpy(pc.fill_null(current.column(DELETED), False), bool)
            if DELETED in current.column_names
            else np.zeros(len(current), bool)
        )
        records = _merge_partial(batch, incoming, spec, current, match, cur_deleted, applied)
    return Resolution(records, valid, queryable, out_of_order, invalidated)


def resolve_rewrite(incoming: BatchResult, still_latest: np.ndarray) -> Resolution:
    """A compaction's rewrite of records that were their keys' latest when it read them
    (one per key): a record stays its key's latest exactly when the key's latest record
    is still the one it copies (``still_latest``, per key id). Otherwise a newer record
    superseded it meanwhile, and the copy never shows, even if that newer record is
    gone by now (a key whose latest record was removed has none; its older records stay
    superseded). The records it copies go with the files the compaction removes: none
    is invalidated. Raises UpsertError if ``still_latest`` is not one flag per key."""
    if still_latest.shape != (incoming.num_keys,):
        raise UpsertError(
            f"still_latest must give one flag per key ({incoming.num_keys}), got shape "
            f"{still_latest.shape}"
        )
    valid = np.zeros(incoming.batch.num_rows, bool)
    valid[incoming.winners[still_latest]] = True
    none = pa.table({SEGMENT: pa.array([], pa.int32()), ROW: pa.array([], pa.int64())})
    return Resolution(incoming.batch, valid, valid & ~incoming.deleted, ~valid, none)


def _extra(current: pa.Table) -> list[str]:
    return [c for c in (DELETED, SEGMENT, ROW, SEQ) if c in current.column_names]


def _merge_partial(
    batch: pa.Table,
    incoming: BatchResult,
    spec: UpsertSpec,
    current: pa.Table,
    match: np.ndarray,
    cur_deleted: np.ndarray,
    applied: np.ndarray,
) -> pa.Table:
    """The rows to store for a partial upsert: each applied row merged with its key's
    previous latest record, folded left to right in rounds (round j merges the j-th
    applied row of every key, all keys at once)."""
    value_cols = [c for c in batch.column_names if spec.strategy(c) is not None]
    # Applied rows in (key, row) order, and each one's rank among its key's applied rows.
    rows = incoming.order[applied[incoming.order]]
    grp = incoming.group[rows]
    m = len(rows)
    first = np.ones(m, bool)
    first[1:] = grp[1:] != grp[:-1]
    run_start = np.maximum.accumulate(np.where(first, np.arange(m), 0))
    step = np.arange(m) - run_start

    values = batch.select(value_cols)
    prev_state = current.select(value_cols)
    # Round 0: the previous record is the current one, unless none or a tombstone.
    prev_pos = match.copy()
    has = match >= 0
    prev_pos[has] = np.where(cur_deleted[match[has]], -1, match[has])
    prev_groups = np.arange(len(match))  # key ids the previous state is indexed by
    pieces_rows: list[np.ndarray] = []
    pieces: list[pa.Table] = []
    prev_rows_deleted = np.zeros(len(match), bool)
    for j in range(int(step.max()) + 1 if m else 0):
        sel = step == j
        r, g = rows[sel], grp[sel]
        at = np.searchsorted(prev_groups, g)
        pos = prev_pos[at]
        none = (pos < 0) | prev_rows_deleted[at] | incoming.deleted[r]
        prev = prev_state.take(pa.array(pos, mask=none))
        new = values.take(pa.array(r))
        merged = pa.table(
            {c: _merge_column(spec, c, prev.column(c), new.column(c)) for c in value_cols}
        )
        pieces_rows.append(r)
        pieces.append(merged)
        prev_state, prev_groups = merged, g
        prev_pos = np.arange(len(g))
        prev_rows_deleted = incoming.deleted[r]
    if not pieces:
        return batch
    merged_rows = np.concatenate(pieces_rows)
    merged_all = pa.concat_tables(pieces)
    where = np.arange(batch.num_rows)
    where[merged_rows] = batch.num_rows + np.arange(len(merged_rows))
    take = pa.array(where)
    out = batch
    for c in value_cols:
        col = pa.concat_arrays(
            [batch.column(c).combine_chunks(), merged_all.column(c).combine_chunks()]
        )
        out = out.set_column(out.schema.get_field_index(c), batch.schema.field(c), col.take(take))
    return out


def _merge_column(
    spec: UpsertSpec, col: str, prev: pa.ChunkedArray, new: pa.ChunkedArray
) -> pa.Array:
    """Merge one column of aligned previous and new values (null previous = none)."""
    strategy = spec.strategy(col)
    assert strategy is not None
    p, q = prev.combine_chunks(), new.combine_chunks()
    problem = type_problem(strategy, q.type)
    if problem:
        raise UpsertError(
            f"partial upsert strategy {strategy.value} cannot merge column {col!r} of type "
            f"{q.type}: {problem}"
        )
    return merge(strategy, p, q)
