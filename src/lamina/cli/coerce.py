"""Plain option values converted without pydantic.

Typer converts every parameter through a pydantic ``TypeAdapter``; importing pydantic
and building the adapters costs a tenth of a second per command. The values lamina's
commands take (text, flags, enum choices, whole numbers, lists of text) are converted here
directly; anything else, and any value this cannot convert (so every error message),
goes through typer's own conversion, unchanged. With a typer whose internals differ,
nothing is patched.

Values of lamina's own kinds (sizes, ``APP:VERSION``) are read by the parsers below
(``typer.Option(parser=...)``): a value they cannot read is a usage error (exit 2), with
or without the direct conversion.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, get_args, get_origin

import typer
from typer._param_types import coerce_cli_choice, routes_to_path

from lamina.core.interval import Interval
from lamina.engines.files import parse_size
from lamina.errors import LaminaError

Convert = Callable[[Any, Any], Any]  # (value, click context) -> value; raises to give up

_INT = re.compile(r"-?(0|[1-9][0-9]{0,17})")


class _GiveUp(Exception):
    """The value is left to typer's conversion."""


def _text(value: Any, _ctx: Any) -> Any:
    if type(value) is not str:
        raise _GiveUp
    return value


def _flag(value: Any, _ctx: Any) -> Any:
    if type(value) is not bool:
        raise _GiveUp
    return value


def converter(annotation: Any, info: Any) -> Convert | None:
    """A direct conversion for ``annotation``, or None to keep typer's."""

    if info.parser is not None:
        parse = info.parser

        def parsed(value: Any, _ctx: Any) -> Any:
            if type(value) is not str:
                raise _GiveUp
            return parse(value)  # a usage error (BadParameter) propagates

        return parsed
    if get_origin(annotation) is list:
        (item_type,) = get_args(annotation)
        item = converter(item_type, info)
        if item is None:
            return None

        def many(value: Any, ctx: Any) -> Any:
            items = value if isinstance(value, list | tuple) else [value]
            return [item(v, ctx) for v in items]

        return many
    if routes_to_path(annotation, info):
        return None
    if annotation is str:
        return _text
    if annotation is bool:
        return _flag
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        choices, case_sensitive = list(annotation), info.case_sensitive

        def choice(value: Any, ctx: Any) -> Any:
            return coerce_cli_choice(value, choices=choices, case_sensitive=case_sensitive, ctx=ctx)

        return choice
    if annotation is int and not info.clamp:
        lo, hi = info.min, info.max

        def whole(value: Any, _ctx: Any) -> Any:
            if type(value) is int:
                n = value
            elif type(value) is str and _INT.fullmatch(value):
                n = int(value)
            else:
                raise _GiveUp
            if (lo is not None and n < lo) or (hi is not None and n > hi):
                raise _GiveUp
            return n

        return whole
    return None


def install() -> None:
    """Make typer convert plain values directly (see the module docstring)."""
    try:
        from typer import core  # optional: may be missing
        from typer._coercion import (  # optional: may be missing
            RuntimeParam,
            TypeDescriptor,
            build_runtime_param,
        )
    except ImportError:
        return
    import click  # typer's own

    if getattr(core, "build_runtime_param", None) is not build_runtime_param:
        return  # another typer, or installed already

    @dataclass(frozen=True)
    class DirectParam(RuntimeParam):
        convert: Convert
        descriptor: TypeDescriptor
        slow: list[RuntimeParam] = field(default_factory=list)  # typer's, built on demand

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            try:
                return self.convert(value, ctx)
            except click.BadParameter as exc:  # a parser's usage error: exit 2
                if exc.param is None:
                    exc.param, exc.ctx = param, ctx
                raise
            except Exception:  # noqa: BLE001 - typer converts it, or explains why not
                pass
            if not self.slow:
                self.slow.append(build_runtime_param(self.descriptor))
            return self.slow[0]._coerce_value(value, param, ctx)

    def direct(descriptor: TypeDescriptor) -> RuntimeParam:
        convert = None
        if descriptor.file_annotation is None:
            convert = converter(descriptor.annotation, descriptor.parameter_info)
        if convert is None:
            return build_runtime_param(descriptor)
        return DirectParam(
            annotation=descriptor.annotation,
            parameter_info=descriptor.parameter_info,
            convert=convert,
            descriptor=descriptor,
        )

    core.build_runtime_param = direct


# -- parsers of lamina's own kinds of values (``typer.Option(parser=...)``) -----------------


def checked(parse: Callable[[str], Any]) -> Callable[[str], str]:
    """A parser keeping an option's text once ``parse`` reads it; a LaminaError (or
    ValueError) of ``parse`` becomes a usage error (BadParameter: exit 2)."""

    def check(value: str) -> str:
        try:
            parse(value)
        except (LaminaError, ValueError) as exc:
            raise typer.BadParameter(str(exc)) from None
        return value

    return check


#: ``500MB``, ``2GB``: a size (``--local-max-bytes``)
size_text = checked(parse_size)
#: ``START/END`` in ISO-8601 (whether it is aligned depends on the table: checked later)
interval_text = checked(Interval.parse)


def app_version_text(value: str) -> str:
    """``APP:VERSION``, checked (kept as text). Raises BadParameter."""
    app_version(value)
    return value


def app_version(value: str) -> tuple[str, int]:
    """``APP:VERSION`` (an exactly-once application id and a whole version >= 0) ->
    ``(app, version)``. Raises BadParameter."""
    app, sep, version = value.rpartition(":")
    if not sep or not app or not _INT.fullmatch(version) or version.startswith("-"):
        raise typer.BadParameter(
            f"{value!r} is not APP:VERSION; write e.g. nightly-load:20240601 (a version is "
            "a whole number >= 0, higher for each new run)"
        )
    return app, int(version)
