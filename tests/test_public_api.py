"""The public API is what users build on: ``lamina.__all__``, every public method of the
catalog, tables, transactions and pushes with its signature, the errors and their bases,
the CLI's commands and options and the REST API's OpenAPI document all equal the
snapshot in ``tests/data/public_api.json`` (``python -m tests.public_api`` rewrites it
when a change is meant)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.public_api import SNAPSHOT, surface


@pytest.fixture(scope="module")
def current() -> dict[str, Any]:
    return surface()


@pytest.fixture(scope="module")
def recorded() -> dict[str, Any]:
    return json.loads(SNAPSHOT.read_text())


@pytest.mark.parametrize("part", ["__all__", "connect", "errors", "cli", "rest"])
def test_public_surface_is_unchanged(part: str, current: dict, recorded: dict) -> None:
    assert current[part] == recorded[part]


@pytest.mark.parametrize(
    "cls",
    [
        "Catalog",
        "Commit",
        "CommitState",
        "ConsistentPush",
        "Granularity",
        "Interval",
        "Segment",
        "Table",
        "Transaction",
    ],
)
def test_public_class_members_are_unchanged(cls: str, current: dict, recorded: dict) -> None:
    assert current["classes"][cls] == recorded["classes"][cls]
