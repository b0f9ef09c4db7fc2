"""How lamina errors read over REST: an HTTP status each, and messages that point at
the API's endpoints and field names rather than the Python calls."""

from __future__ import annotations

from fastapi import Request, status

from lamina.errors import (
    CatalogUnavailableError,
    CommitConflictError,
    ConcurrentWriteError,
    LaminaError,
    LineageEntryNotFoundError,
    LineageError,
    LineageRequestError,
    LockRevokedError,
    LockTimeoutError,
    TableNotFoundError,
)


def status_of(exc: LaminaError) -> int:
    """The HTTP status of a lamina error."""
    if isinstance(exc, TableNotFoundError | LineageEntryNotFoundError):
        return status.HTTP_404_NOT_FOUND
    if isinstance(exc, LineageRequestError):  # wrong whatever the table's state
        return status.HTTP_400_BAD_REQUEST
    busy = CommitConflictError | LockTimeoutError | LockRevokedError
    if isinstance(exc, LineageError | ConcurrentWriteError | busy):
        return status.HTTP_409_CONFLICT
    if isinstance(exc, CatalogUnavailableError):
        return status.HTTP_503_SERVICE_UNAVAILABLE
    return status.HTTP_400_BAD_REQUEST


def message(request: Request, exc: LaminaError) -> str:
    """The error's message, pointing at the API rather than the Python calls."""
    table = request.path_params.get("table", "")
    if isinstance(exc, TableNotFoundError):
        return f"no table named {table!r}; GET /tables lists them"
    if isinstance(exc, LineageEntryNotFoundError):
        entry = request.query_params.get("segmentLineageEntryId", "")
        return (
            f"no lineage entry {entry!r} in table {table}; GET /tables/{table}/lineage lists them"
        )
    text = " ".join(str(exc).split())
    for python, rest in _REST_WORDS:
        text = text.replace(python, rest.format(table=table))
    return text


#: How the Python API's advice reads over REST (longest phrases first).
_REST_WORDS = (
    ("pass segments_to=[] and write under the entry, or choose", "choose"),
    ("pass force_cleanup=True", "call with ?forceCleanup=true"),
    ("pass force=True", "call with ?forceRevert=true"),
    ("t.segments(all=True)", "GET /tables/{table}/segments?all=true"),
    ("t.segments()", "GET /tables/{table}/segments"),
    ("t.lineage()", "GET /tables/{table}/lineage"),
    ("use mode='major'", 'use "mode": "major"'),
    ("segment_granularity", "segmentGranularity"),
    ("target_rows_per_segment", "targetRowsPerSegment"),
    ("sort_by", "sortBy"),
    ("segments_from", "segmentsFrom"),
    ("segments_to", "segmentsTo"),
)
