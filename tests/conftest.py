"""Shared fixtures: catalogs on SQLite and PostgreSQL, one Spark session per run."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

import lamina

PG_URL = os.environ.get("LAMINA_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
_pg_state: dict[str, str | None] = {}


def _pg_unavailable() -> str | None:
    """None when PostgreSQL answers, else the reason."""
    if "reason" not in _pg_state:
        try:
            eng = create_engine(
                PG_URL.replace("postgresql://", "postgresql+psycopg://", 1),
                connect_args={"connect_timeout": 3},
            )
            with eng.connect() as conn:
                conn.execute(text("SELECT 1"))
            eng.dispose()
            _pg_state["reason"] = None
        except Exception as exc:  # noqa: BLE001
            _pg_state["reason"] = f"PostgreSQL at {PG_URL} unreachable: {exc}"
    return _pg_state["reason"]


def require_postgres() -> None:
    reason = _pg_unavailable()
    if reason is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true requires PostgreSQL)")
    pytest.skip(reason)


# `make test` runs the suite on two pytest-xdist workers, one module at a time each.
# Two groups run one test after another, each on one worker: the Spark tests (the
# cluster gives each application one of its two cores) and the races, which count on
# no second race loading the machine. The two groups run beside each other and start
# first, being the longest; the other modules fill in around them. (xdist's own
# ``--dist loadgroup`` renames node ids, which pytest 9 no longer lets it do: this
# scheduler groups by node id.)
RACE_MODULES = {
    "test_compaction_reliability",
    "test_concurrency",
    "test_history_checker",
    "test_push_reliability",
    "test_upsert_history",
}
GROUP_ORDER = ("spark", "races")


def serial_scope(nodeid: str) -> str | None:
    """The group (``spark`` or ``races``) whose tests run one after another, else None."""
    module = nodeid.split("::")[0].rsplit("/", 1)[-1].removesuffix(".py")
    if "spark" in nodeid.lower():
        return "spark"
    return "races" if module in RACE_MODULES else None


# The upsert semantics modules run each case in both write modes and on both catalogs.
# What the catalog adds (SQL dialects, locking) is the same in either mode, and what
# copy-on-write adds is the same on either catalog; tests/test_copy_on_write.py and the
# history races run copy-on-write on PostgreSQL. So the fourth pairing is left out.
MODE_BY_CATALOG_MODULES = {
    "test_upsert",
    "test_upsert_partial",
    "test_upsert_surfaces",
    "test_upsert_value_semantics",
    "test_upsert_visibility",
}


def redundant_pairing(item: pytest.Item) -> bool:
    """A copy-on-write run on PostgreSQL of a module of MODE_BY_CATALOG_MODULES."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    module = item.nodeid.split("::")[0].rsplit("/", 1)[-1].removesuffix(".py")
    return (
        module in MODE_BY_CATALOG_MODULES
        and params.get("write_mode") == "copy-on-write"
        and params.get("catalog_url") == "postgres"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Refuse a Spark test whose node id does not say so (the scheduler sees only ids);
    leave out the pairings :func:`redundant_pairing` names; put the groups first."""
    for item in items:
        uses = item.get_closest_marker("spark") or "spark" in getattr(item, "fixturenames", ())
        if uses and serial_scope(item.nodeid) is None:
            raise pytest.UsageError(f"{item.nodeid} uses Spark: put 'spark' in its name")
    left_out = [item for item in items if redundant_pairing(item)]
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = [item for item in items if not redundant_pairing(item)]
    # xdist hands out scopes in the order it first meets them: the groups go first.
    rank = {group: i for i, group in enumerate(GROUP_ORDER)}
    items.sort(key=lambda item: rank.get(serial_scope(item.nodeid) or "", len(rank)))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    class Scheduler(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return serial_scope(nodeid) or super()._split_scope(nodeid)

    return Scheduler(config, log)


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A catalog URL on PostgreSQL, isolated in its own schema."""
    require_postgres()
    schema = f"lamina_test_{uuid.uuid4().hex[:10]}"
    admin = create_engine(PG_URL.replace("postgresql://", "postgresql+psycopg://", 1))
    with admin.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    sep = "&" if "?" in PG_URL else "?"
    yield f"{PG_URL}{sep}options=-csearch_path%3D{schema}"
    if os.environ.get("LAMINA_KEEP_TEST_SCHEMAS"):  # to look into after a failure
        print(f"kept PostgreSQL schema {schema}")
    else:
        with admin.begin() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
    admin.dispose()


@pytest.fixture(params=["sqlite", "postgres"])
def catalog_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Run a test once on an embedded SQLite catalog and once on PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/catalog.db"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def cat(catalog_url: str, tmp_path: Path) -> Iterator[lamina.Catalog]:
    c = lamina.connect(catalog=catalog_url, warehouse=str(tmp_path / "wh"))
    yield c
    c.close()


@pytest.fixture
def local_cat(tmp_path: Path) -> Iterator[lamina.Catalog]:
    """The embedded default: SQLite inside the warehouse."""
    c = lamina.connect(warehouse=str(tmp_path / "wh"))
    yield c
    c.close()


@pytest.fixture(scope="session")
def spark():  # type: ignore[no-untyped-def]
    from lamina.engines.spark import get_spark

    session = get_spark(app_name="lamina-tests")
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def pt(cat: lamina.Catalog) -> lamina.Table:
    """A partial-upsert table ``p`` of tests/test_upsert.py's PSCHEMA and STRATEGIES."""
    from tests.test_upsert import PSCHEMA, STRATEGIES

    return cat.create_table(
        "p", PSCHEMA, time_column="ts", primary_key="key", delete_column="deleted",
        partial_upsert=STRATEGIES,
    )  # fmt: skip


@pytest.fixture(params=["merge-on-read", "copy-on-write"])
def write_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test once per upsert write mode: every upsert table the test creates gets
    ``write.update.mode`` (unless it names one itself)."""
    mode = str(request.param)
    create = lamina.Catalog.create_table

    def with_mode(self: lamina.Catalog, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("primary_key"):
            props = dict(kwargs.get("properties") or {})
            props.setdefault("write.update.mode", mode)
            kwargs["properties"] = props
        return create(self, *args, **kwargs)

    monkeypatch.setattr(lamina.Catalog, "create_table", with_mode)
    return mode
