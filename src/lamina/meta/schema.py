"""Catalog tables and their migrations.

The schema is versioned: ``lamina_schema.version`` says which migrations ran. Each
migration is a function of a connection; :func:`migrate` applies the missing ones in
one write transaction that holds the catalog's write lock, so two processes opening a
fresh catalog at once cannot both migrate. Later features append migrations here;
existing catalogs upgrade in place on their next connect.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable

from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Engine,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    func,
    insert,
    inspect,
    select,
    text,
    update,
)
from sqlalchemy.exc import IntegrityError

from lamina.errors import CatalogUnavailableError
from lamina.meta.db import is_sqlite, run

metadata = MetaData()

# SQLite only auto-increments an INTEGER PRIMARY KEY; PostgreSQL wants BIGINT identity.
Id = BigInteger().with_variant(Integer(), "sqlite")

schema_version = Table(
    "lamina_schema",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("version", Integer, nullable=False),
)

tables = Table(
    "lamina_tables",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("name", String(128), nullable=False, unique=True),
    Column("schema_ipc", LargeBinary, nullable=False),
    Column("time_column", String(256)),
    Column("granularity", String(16), nullable=False),
    Column("properties", Text, nullable=False, default="{}"),
    Column("created_at", BigInteger, nullable=False),
    Column("next_version", BigInteger, nullable=False, default=1),
    Column("last_seq", BigInteger, nullable=False, default=0),
    Column("purged_seq", BigInteger, nullable=False, default=0),  # since v2
    # the longest segment interval ever published: bounds interval scans (since v3)
    Column("max_span_us", BigInteger, nullable=False, default=0),
)

commits = Table(
    "lamina_commits",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("table_id", BigInteger, ForeignKey("lamina_tables.id"), nullable=False),
    Column("action", String(32), nullable=False),
    Column("state", String(16), nullable=False),
    Column("seq", BigInteger),
    Column("started_at", BigInteger, nullable=False),
    Column("completed_at", BigInteger),
    Column("heartbeat_at", BigInteger, nullable=False),
    Column("owner", String(256), nullable=False),
    Column("files_cleaned", Integer, nullable=False, default=0),
    Column("metadata", Text, nullable=False, default="{}"),
    # the snapshot a write started from (its optimistic-concurrency base), since v6
    Column("base_seq", BigInteger),
    # what a completed commit did, for the conflict checks of later ones (JSON), since v6
    Column("footprint", Text),
    # when it went REQUESTED -> INFLIGHT (started_at: REQUESTED), since v9
    Column("inflight_at", BigInteger),
    # why an ABORTED commit ended (the error its writer raised: a conflict, a revoked
    # lock; or its writer gone), since v13
    Column("reason", Text),
    Index("ix_commits_table_state", "table_id", "state"),
    Index("ix_commits_table_seq", "table_id", "seq"),
)

segments = Table(
    "lamina_segments",
    metadata,
    Column("pk", Id, primary_key=True, autoincrement=True),
    Column("table_id", BigInteger, ForeignKey("lamina_tables.id"), nullable=False),
    Column("segment_id", String(512), nullable=False),
    Column("start_us", BigInteger, nullable=False),
    Column("end_us", BigInteger, nullable=False),
    Column("version", BigInteger, nullable=False),
    Column("partition_id", Integer, nullable=False),
    Column("num_core_partitions", Integer, nullable=False),
    Column("location", Text),
    Column("row_count", BigInteger, nullable=False),
    Column("size_bytes", BigInteger, nullable=False),
    Column("min_time", BigInteger),
    Column("max_time", BigInteger),
    Column("commit_id", BigInteger, ForeignKey("lamina_commits.id"), nullable=False),
    Column("added_seq", BigInteger, nullable=False),
    Column("removed_seq", BigInteger),
    Column("removed_commit", BigInteger),
    Column("suffix", String(64), default=""),  # since v2
    # Druid's overwrite shard fields (since v9): minor version, root partition range
    # [root_start, root_end) and the size of the segment's atomic update group
    Column("minor_version", Integer, nullable=False, default=0),
    Column("root_start", Integer),
    Column("root_end", Integer),
    Column("aug_size", Integer, nullable=False, default=1),
    UniqueConstraint("table_id", "segment_id", name="uq_segments_id"),
    UniqueConstraint(
        "table_id", "start_us", "end_us", "version", "partition_id", name="uq_segments_identity"
    ),
    Index("ix_segments_live", "table_id", "removed_seq", "start_us"),
    Index("ix_segments_added", "table_id", "added_seq"),
    Index("ix_segments_commit", "commit_id"),
    Index("ix_segments_start", "table_id", "start_us"),  # since v3
    # a data file's segments (deletion vectors name files), since v13
    Index("ix_segments_location", "table_id", "location"),
)


lineage = Table(
    "lamina_lineage",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("table_id", BigInteger, ForeignKey("lamina_tables.id"), nullable=False),
    Column("state", String(16), nullable=False),
    Column("timestamp", BigInteger, nullable=False),  # µs of the last transition
    Column("started_seq", BigInteger, nullable=False),
    Column("completed_seq", BigInteger),
    Column("reverted_seq", BigInteger),
    Column("successors", Text, nullable=False, default="[]"),  # entries that replaced its to
    Column("to_count", BigInteger, nullable=False, default=0),  # segments written under it
    Column("own_versions", Text, nullable=False, default="[]"),  # versions only it uses
    Index("ix_lineage_table", "table_id"),
)

# The id lists live apart from the entry row: a state change then rewrites a few
# bytes, not lists of thousands of segment ids.
lineage_ids = Table(
    "lamina_lineage_ids",
    metadata,
    Column("entry_id", String(64), primary_key=True),
    Column("role", String(8), primary_key=True),  # from | to | expected | decore
    Column("ids", Text, nullable=False),  # JSON list of segment ids
)

# Segment manifests (since v5): the live segment rows of one snapshot, in one file. A
# reader plans a big table from the newest manifest plus the rows that changed since
# (see lamina.read); the rows stay the truth, a manifest is only a cache of them.
manifests = Table(
    "lamina_manifests",
    metadata,
    Column("table_id", BigInteger, ForeignKey("lamina_tables.id"), primary_key=True),
    Column("seq", BigInteger, primary_key=True),
    Column("location", Text, nullable=False),  # relative to the warehouse root
    Column("segments", BigInteger, nullable=False),
    Column("created_at", BigInteger, nullable=False),
)

# Exactly-once writes: the latest version each application recorded on a table, set
# in the transaction of the commit that carried it (Delta's txnAppId/txnVersion).
app_txns = Table(
    "lamina_app_txns",
    metadata,
    Column("table_id", BigInteger, ForeignKey("lamina_tables.id"), primary_key=True),
    Column("app_id", String(256), primary_key=True),
    Column("version", BigInteger, nullable=False),
    Column("commit_id", BigInteger, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
)

# Task locks on intervals (Druid's TaskLockbox, rules in lamina.core.locks): held by
# an open commit, alive while its writer is; WAITING requests queue by id.
locks = Table(
    "lamina_locks",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("table_id", BigInteger, ForeignKey("lamina_tables.id"), nullable=False),
    Column("commit_id", BigInteger, nullable=False),
    Column("type", String(16), nullable=False),
    Column("start_us", BigInteger, nullable=False),
    Column("end_us", BigInteger, nullable=False),
    Column("priority", Integer, nullable=False),
    Column("state", String(16), nullable=False),
    Column("created_at", BigInteger, nullable=False),
    # a SEGMENT lock's segment ids (JSON list), since v9
    Column("segment_ids", Text),
    Index("ix_locks_table", "table_id"),
)


deletes = Table(
    # Deletion vectors of upsert tables, by data file (a carried copy of a segment
    # shares its file, hence its vector): the rows of the file readers stop seeing from
    # commit seq ``seq`` on, and among them the tombstones that are their key's latest
    # record (hidden, yet deciding later comparisons). Roaring bitmaps, serialized.
    "lamina_deletes",
    metadata,
    Column("table_id", BigInteger, ForeignKey("lamina_tables.id"), primary_key=True),
    Column("location", String(1024), primary_key=True),
    Column("seq", BigInteger, primary_key=True),
    Column("commit_id", BigInteger, nullable=False),
    Column("rows", LargeBinary, nullable=False),
    Column("tombstones", LargeBinary),
    Column("cardinality", BigInteger, nullable=False),
    Index("ix_deletes_seq", "table_id", "seq"),
)


key_snapshots = Table(
    # Snapshots of upsert tables' key indexes (files under the table's _keys/), so a new
    # process starts from one instead of reading every data file.
    "lamina_key_snapshots",
    metadata,
    Column("table_id", BigInteger, ForeignKey("lamina_tables.id"), primary_key=True),
    Column("seq", BigInteger, primary_key=True),
    Column("location", Text, nullable=False),  # relative to the warehouse root
    Column("files", Text, nullable=False),  # JSON: data file of each segment code
    Column("key_count", BigInteger, nullable=False),
    Column("created_at", BigInteger, nullable=False),
)

# The last seq of each dropped table, by lower-cased name: a table created again under
# the name continues after it, so a change feed's checkpoint of the old table never
# skips the new table's first commits (Hudi's instants are times, always later). And
# its id, which SQLite would give the next table (caches are keyed by table id).
dropped = Table(
    "lamina_dropped",
    metadata,
    Column("name", String(128), primary_key=True),
    Column("last_seq", BigInteger, nullable=False),
    Column("table_id", BigInteger, nullable=False),  # SQLite: never given out again
)

# The highest partition ids of deleted segment rows, per chunk version that keeps live
# rows: ids are never given out again (a segment id names one file in the history,
# lineage lists and change feeds). ``first``: first-generation ids, root ranges
# included; ``later``: later-generation ids (-1: none).
retired = Table(
    "lamina_retired_pids",
    metadata,
    Column("table_id", BigInteger, ForeignKey("lamina_tables.id"), primary_key=True),
    Column("start_us", BigInteger, primary_key=True),
    Column("end_us", BigInteger, primary_key=True),
    Column("version", BigInteger, primary_key=True),
    Column("first", BigInteger, nullable=False),
    Column("later", BigInteger, nullable=False),
)

# Earlier schemas of tables changed since (``t.add_columns``, ``t.widen_column``): a snapshot
# of seq < ``before_seq`` reads with the earliest such schema (the row with the least
# ``before_seq`` above it), later ones with ``lamina_tables.schema_ipc``.
schemas = Table(
    "lamina_schemas",
    metadata,
    Column("table_id", BigInteger, ForeignKey("lamina_tables.id"), primary_key=True),
    Column("before_seq", BigInteger, primary_key=True),
    Column("schema_ipc", LargeBinary, nullable=False),
)

# The catalog's identity, which the warehouse it writes records (two catalogs writing
# one warehouse would take each other's files for their own: commit folders, orphans).
identity = Table(
    "lamina_identity",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("uuid", String(36), nullable=False),
)


def _v1_initial(conn: Connection) -> None:
    for t in (tables, commits, segments):
        t.create(conn, checkfirst=True)  # current shape; later steps skip what exists


def _add_column(conn: Connection, table: str, column: str, ddl: str) -> None:
    """ALTER TABLE ... ADD COLUMN unless a fresh catalog already created it."""
    if column not in {c["name"] for c in inspect(conn).get_columns(table)}:
        conn.execute(text(f"ALTER TABLE {table} ADD COLUMN {column} {ddl}"))


def _v2_lineage(conn: Connection) -> None:
    """Segment lineage; segment name suffixes; the oldest snapshot still readable."""
    lineage.create(conn, checkfirst=True)
    lineage_ids.create(conn, checkfirst=True)
    _add_column(conn, "lamina_segments", "suffix", "VARCHAR(64) DEFAULT ''")
    _add_column(conn, "lamina_tables", "purged_seq", "BIGINT NOT NULL DEFAULT 0")


#: Spans recorded up to this; one as long (e.g. a table's single ALL chunk) means
#: "unbounded" and interval scans go without a lower bound on start times.
MAX_SPAN_US = 2**61


def _v3_span(conn: Connection) -> None:
    """Interval scans bounded by the longest segment span: an index on start times."""
    _add_column(conn, "lamina_tables", "max_span_us", "BIGINT NOT NULL DEFAULT 0")
    half = (segments.c.end_us / 2) - (segments.c.start_us / 2)  # no int64 overflow
    spans = conn.execute(
        select(segments.c.table_id, func.max(half)).group_by(segments.c.table_id)
    ).all()
    for table_id, longest_half in spans:
        span = min(2 * int(longest_half) + 2, MAX_SPAN_US)
        conn.execute(update(tables).where(tables.c.id == table_id).values(max_span_us=span))
    conn.execute(
        text("CREATE INDEX IF NOT EXISTS ix_segments_start ON lamina_segments (table_id, start_us)")
    )


def _v4_one_open_commit(conn: Connection) -> None:
    """At most one open (REQUESTED or INFLIGHT) commit per table, kept by an index
    (the writer slot of one writer at a time; v6 drops it for optimistic concurrency)."""
    conn.execute(
        text(
            "CREATE UNIQUE INDEX IF NOT EXISTS ux_commits_one_open ON lamina_commits "
            "(table_id) WHERE state IN ('REQUESTED', 'INFLIGHT')"
        )
    )


def _v5_manifests(conn: Connection) -> None:
    """Segment manifests of big snapshots."""
    manifests.create(conn, checkfirst=True)


def _v6_optimistic(conn: Connection) -> None:
    """Many writers per table: no more one-open-commit index; a commit's base seq and
    footprint for the conflict checks."""
    conn.execute(text("DROP INDEX IF EXISTS ux_commits_one_open"))
    _add_column(conn, "lamina_commits", "base_seq", "BIGINT")
    _add_column(conn, "lamina_commits", "footprint", "TEXT")


def _v7_app_txns(conn: Connection) -> None:
    """Exactly-once writes: the latest version per application id."""
    app_txns.create(conn, checkfirst=True)


def _v8_locks(conn: Connection) -> None:
    """Task locks."""
    locks.create(conn, checkfirst=True)


def _v9_minor_versions(conn: Connection) -> None:
    """Segments carry minor versions, root partition ranges and atomic update group
    sizes; every existing segment is first-generation: roots (pid, pid + 1). SEGMENT
    locks name their segments; commits record when they went INFLIGHT."""
    _add_column(conn, "lamina_segments", "minor_version", "INTEGER NOT NULL DEFAULT 0")
    _add_column(conn, "lamina_segments", "root_start", "INTEGER")
    _add_column(conn, "lamina_segments", "root_end", "INTEGER")
    _add_column(conn, "lamina_segments", "aug_size", "INTEGER NOT NULL DEFAULT 1")
    conn.execute(
        update(segments)
        .where(segments.c.root_start.is_(None))
        .values(root_start=segments.c.partition_id, root_end=segments.c.partition_id + 1)
    )
    _add_column(conn, "lamina_locks", "segment_ids", "TEXT")
    _add_column(conn, "lamina_commits", "inflight_at", "BIGINT")


def _v10_deletes(conn: Connection) -> None:
    """Upsert tables: deletion vectors, key index snapshots."""
    deletes.create(conn, checkfirst=True)
    key_snapshots.create(conn, checkfirst=True)


def _v11_dropped(conn: Connection) -> None:
    """Seqs of dropped tables, which a table created again under the name continues;
    partition ids of deleted segments, never given out again."""
    dropped.create(conn, checkfirst=True)
    retired.create(conn, checkfirst=True)
    identity.create(conn, checkfirst=True)


def _v12_schemas(conn: Connection) -> None:
    """Schema evolution: the earlier schemas of tables, for reads of older snapshots."""
    schemas.create(conn, checkfirst=True)


def _v13_abort_reasons(conn: Connection) -> None:
    """Commits record why they were aborted; a data file's segments are found by
    index."""
    _add_column(conn, "lamina_commits", "reason", "TEXT")
    conn.execute(
        text(
            "CREATE INDEX IF NOT EXISTS ix_segments_location ON lamina_segments "
            "(table_id, location)"
        )
    )


#: Ordered migrations; append only. Version N = the first N applied.
MIGRATIONS: list[Callable[[Connection], None]] = [
    _v1_initial,
    _v2_lineage,
    _v3_span,
    _v4_one_open_commit,
    _v5_manifests,
    _v6_optimistic,
    _v7_app_txns,
    _v8_locks,
    _v9_minor_versions,
    _v10_deletes,
    _v11_dropped,
    _v12_schemas,
    _v13_abort_reasons,
]
SCHEMA_VERSION = len(MIGRATIONS)


def _current(conn: Connection) -> int:
    if not inspect(conn).has_table(schema_version.name):
        return 0
    row = conn.execute(select(schema_version.c.version)).first()
    return int(row[0]) if row else 0


def migrate(engine: Engine) -> int:
    """Bring the catalog schema to :data:`SCHEMA_VERSION`; returns the version found."""

    def probe(conn: Connection) -> int:
        return _current(conn)

    if run(engine, probe, write=False) == SCHEMA_VERSION:
        return SCHEMA_VERSION

    def apply(conn: Connection) -> int:
        if not is_sqlite(engine):
            conn.execute(text("SELECT pg_advisory_xact_lock(7420931)"))
        found = _current(conn)
        if found > SCHEMA_VERSION:
            raise CatalogUnavailableError(
                f"catalog schema version {found} is newer than this lamina "
                f"({SCHEMA_VERSION}); upgrade lamina"
            )
        if found == 0:
            schema_version.create(conn, checkfirst=True)
        for step in MIGRATIONS[found:]:
            step(conn)
        if found == 0:
            conn.execute(insert(schema_version).values(id=1, version=SCHEMA_VERSION))
        else:
            conn.execute(update(schema_version).values(version=SCHEMA_VERSION))
        return found

    return run(engine, apply, write=True)


def existing_catalog_id(engine: Engine) -> str | None:
    """The catalog's identity if it has one, without creating anything (a SQLite
    file that does not exist is not made)."""

    if is_sqlite(engine):
        path = engine.url.database
        if path and path != ":memory:" and not os.path.exists(path):
            return None

    def read(conn: Connection) -> str | None:
        if not inspect(conn).has_table(identity.name):
            return None
        found = conn.execute(select(identity.c.uuid).where(identity.c.id == 1)).scalar()
        return None if found is None else str(found)

    return run(engine, read, write=False)


def catalog_id(engine: Engine) -> str:
    """The catalog's identity (made by the first caller)."""

    def read(conn: Connection) -> str | None:
        return conn.execute(select(identity.c.uuid).where(identity.c.id == 1)).scalar()

    found = run(engine, read, write=False)
    if found is not None:
        return str(found)

    def make(conn: Connection) -> str:
        conn.execute(insert(identity).values(id=1, uuid=str(uuid.uuid4())))
        return str(read(conn))

    try:
        return run(engine, make, write=True)
    except IntegrityError:  # another process made it first
        return str(run(engine, read, write=False))
