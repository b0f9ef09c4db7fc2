"""The data source's options: what each use of ``format("lamina")`` takes, checked
before Spark starts any work."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lamina.core.interval import Interval
from lamina.errors import InvalidArgumentError, InvalidIntervalError

#: Options of every use (Spark lower-cases option names).
COMMON = {"table", "catalog", "warehouse"}
#: Options per use.
ALLOWED = {
    "read": {"asof", "versionasof", "timestampasof", "interval", "columns"},
    "write": {"txnappid", "txnversion", "interval"},
    "stream_read": {
        "columns",
        "readchangefeed",
        "startingseq",
        "maxcommitspertrigger",
        "maxrowspertrigger",
    },
    "stream_write": {"txnappid", "checkpointlocation"},
}
#: Options Spark itself may add (a path given to ``save``/``load``, a streaming
#: query's checkpoint, the properties of a table of Spark SQL); taken, not refused.
SPARKS_OWN = {
    "path",
    "checkpointlocation",
    "__partition_columns",
    "owner",
    "provider",
    "location",
    "comment",
    "external",
    "is_managed_location",
}
#: The documented spelling of each option, for messages.
SPELLING = {
    "asof": "asOf",
    "versionasof": "versionAsOf",
    "timestampasof": "timestampAsOf",
    "txnappid": "txnAppId",
    "txnversion": "txnVersion",
    "startingseq": "startingSeq",
    "maxcommitspertrigger": "maxCommitsPerTrigger",
    "maxrowspertrigger": "maxRowsPerTrigger",
    "checkpointlocation": "checkpointLocation",
    "readchangefeed": "readChangeFeed",
}


@dataclass(frozen=True)
class SourceOptions:
    """The options of one read or write, checked."""

    table: str
    catalog: str | None
    warehouse: str | None
    values: dict[str, str]

    def get(self, name: str) -> str | None:
        return self.values.get(name.lower())

    def interval(self) -> Interval | None:
        """The ``interval`` option. Raises InvalidIntervalError."""
        text = self.get("interval")
        return None if text is None else Interval.parse(text)

    def columns(self) -> list[str] | None:
        """The ``columns`` option: names separated by commas."""
        text = self.get("columns")
        if text is None:
            return None
        names = [c.strip() for c in text.split(",")]
        if not all(names):
            raise InvalidArgumentError(
                f"option columns={text!r}: give column names separated by commas, e.g. 'ts,v'"
            )
        return names

    def flag(self, name: str) -> bool:
        """A true/false option (absent: false). Raises InvalidArgumentError."""
        text = (self.get(name) or "false").strip().lower()
        if text not in ("true", "false"):
            raise InvalidArgumentError(
                f"option {SPELLING.get(name.lower(), name)}={self.get(name)!r}: give true or false"
            )
        return text == "true"

    def whole(self, name: str, least: int = 0) -> int | None:
        """An option holding a whole number of at least ``least`` (None: not given).
        Raises InvalidArgumentError."""
        text = self.get(name)
        if text is None:
            return None
        try:
            value = int(text)
        except ValueError:
            value = least - 1
        if value < least:
            raise InvalidArgumentError(
                f"option {SPELLING.get(name.lower(), name)}={text!r}: give a whole number "
                f"of at least {least}"
            )
        return value

    def txn(self) -> tuple[str, int] | None:
        """``(txnAppId, txnVersion)``, both or neither. Raises InvalidArgumentError."""
        app, version = self.get("txnappid"), self.whole("txnversion")
        if (app is None) != (version is None):
            raise InvalidArgumentError(
                "options txnAppId and txnVersion go together: give both (exactly once: a "
                "write whose version the app applied already is skipped) or neither"
            )
        return None if app is None or version is None else (app, version)


def parse(options: Mapping[str, str], use: str) -> SourceOptions:
    """Check the options of one ``use`` (read, write, stream_read, stream_write, or
    any_read: a batch or stream read, which ``schema()`` cannot tell apart).
    Raises InvalidArgumentError (an unknown option, no table), InvalidIntervalError."""
    values: dict[str, str] = {}
    for k, v in options.items():  # Spark SQL passes a table's OPTIONS again as option.x
        key = str(k).lower()
        if v is not None:
            values.setdefault(key.removeprefix("option."), str(v))
    if use == "any_read":
        allowed = COMMON | ALLOWED["read"] | ALLOWED["stream_read"]
    else:
        allowed = COMMON | ALLOWED[use]
    unknown = sorted(k for k in values if k not in allowed and k not in SPARKS_OWN)
    if unknown:
        names = ", ".join(SPELLING.get(k, k) for k in sorted(allowed))
        hint = ""
        if use == "read" and set(unknown) <= ALLOWED["stream_read"]:
            hint = " (those are options of spark.readStream)"
        raise InvalidArgumentError(
            f"unknown option(s) {unknown} for a lamina {use.replace('_', ' ')}{hint}: "
            f"the options are {names}"
        )
    table = values.get("table") or values.get("path")
    if not table:
        sql = ""
        if not values:  # Spark SQL dropped a catalog table's OPTIONS (Spark 4.3 does)
            sql = (
                "; Spark SQL does not hand the OPTIONS of a table made by CREATE TABLE "
                "… USING lamina to its reads and writes: make it CREATE TEMPORARY VIEW "
                "events USING lamina OPTIONS (…), or give them per statement, e.g. "
                "SELECT * FROM events WITH ('table' = 'events'), INSERT INTO events "
                "WITH ('table' = 'events') …"
            )
        raise InvalidArgumentError(
            'give the table: .option("table", "events") (in SQL: OPTIONS (table \'events\'))' + sql
        )
    parsed = SourceOptions(table, values.get("catalog"), values.get("warehouse"), values)
    try:
        parsed.interval()
    except InvalidIntervalError as exc:
        raise InvalidIntervalError(f"option interval: {exc}") from None
    return parsed
