"""Checks of the arguments public methods take, each raising the caller's error type with
a message that says what to pass. Pure."""

from __future__ import annotations

import decimal
import math
import numbers
from collections.abc import Iterable
from typing import Any

from lamina.errors import InvalidArgumentError, LaminaError


def whole_number(value: Any, name: str, error: type[LaminaError], most: int = 2**31 - 1) -> int:
    """``value`` as an int from 0 to ``most`` (not a bool, a float or a string).
    Raises ``error``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise error(f"{name} must be a whole number >= 0, not {value!r}")
    if int(value) > most:
        raise error(f"{name} must be at most {most}, not {value!r}")
    return int(value)


def flag(value: Any, name: str) -> bool:
    """``value``, which must be a bool (a string such as ``"false"`` is true to Python).
    Raises InvalidArgumentError."""
    if not is_bool(value):
        raise InvalidArgumentError(f"{name} must be True or False, not {value!r}")
    return bool(value)


def is_bool(value: Any) -> bool:
    """Whether ``value`` is a bool, Python's or numpy's (without importing numpy)."""
    kind = type(value)
    return isinstance(value, bool) or (kind.__module__ == "numpy" and kind.__name__ in BOOLS)


BOOLS = ("bool", "bool_")  # numpy's bool type, by its names in numpy 2 and 1


def seconds(value: Any, name: str, error: type[LaminaError]) -> float:
    """``value`` as a finite number of seconds >= 0. Raises ``error``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real | decimal.Decimal):
        raise error(f"{name} must be a number of seconds >= 0, not {value!r}")
    if not math.isfinite(value) or value < 0:
        raise error(f"{name} must be a finite number of seconds >= 0, not {value!r}")
    return float(value)


def names(value: Any, name: str, error: type[LaminaError], noun: str = "names") -> list[str]:
    """``value``, a list (or other iterable) of strings, as a list; a lone string is
    refused (it would be read as its characters). Raises ``error``."""
    if isinstance(value, str | bytes):
        raise error(f"{name} takes a list of {noun}: pass [{value!r}], not {value!r}")
    if not isinstance(value, Iterable):
        raise error(f"{name} takes a list of {noun}, not {value!r}")
    got = list(value)
    wrong = [v for v in got if not isinstance(v, str)]
    if wrong:
        raise error(f"{name} takes a list of {noun} (strings), not {wrong[0]!r}")
    bad = [v for v in got if not is_unicode(v)]
    if bad:
        raise error(f"{name}: {bad[0]!r} is not valid Unicode (a lone surrogate); fix the text")
    return got


def is_unicode(text: str) -> bool:
    """False for a string holding a lone surrogate (a byte string decoded with
    ``surrogateescape``, say): no catalog, JSON or Parquet file can store it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
