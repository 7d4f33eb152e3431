"""JSON Schema (2020-12, as OpenAPI 3.1 uses it) from the typed shapes of ``codemojex.views``.

A shape is declared once, as a ``TypedDict``; :func:`schema_of` reads its annotations, so
the document web/openapi.py serves cannot drift from what mypy checks where the shape is
built. What a Python type does not say (an id's pattern, a description, the values a
plain ``str`` takes) rides along as :class:`Schema` in ``Annotated[T, Schema(...)]``, which
type checkers read as plain ``T``.

Mapped: ``str int float bool None``, ``list[T]``, ``dict[str, T]``, ``Literal[...]``,
``T | None``, ``Any`` (no constraint), ``Annotated`` and ``TypedDict`` (an object whose
keys are all listed, ``NotRequired`` ones left out of ``required``; one named in ``refs``
becomes a ``$ref`` to its component).
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, NotRequired, Required, Union

_PRIMITIVES: dict[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    type(None): "null",
}


class UnmappedType(TypeError):
    """A type :func:`schema_of` has no JSON Schema for (a shape should not carry it)."""


class Schema:
    """JSON Schema keywords added to a type's own: ``Annotated[str, Schema(pattern=...)]``."""

    __slots__ = ("keywords",)

    def __init__(self, **keywords: Any) -> None:
        self.keywords = keywords

    def __repr__(self) -> str:
        return f"Schema(**{self.keywords!r})"


def schema_of(tp: Any, refs: Mapping[Any, str] | None = None) -> dict[str, Any]:
    """The JSON Schema of ``tp``; a ``TypedDict`` in ``refs`` (but ``tp`` itself) becomes
    ``{"$ref": "#/components/schemas/<name>"}``. A ``TypedDict``'s docstring is its
    description."""
    return _schema(tp, refs or {}, top=True)


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _schema(tp: Any, refs: Mapping[Any, str], *, top: bool = False) -> dict[str, Any]:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        base = _schema(args[0], refs)
        for extra in args[1:]:
            if isinstance(extra, Schema):
                base = {**base, **extra.keywords}
        return base
    if origin in (Required, NotRequired):
        return _schema(args[0], refs)
    if tp is Any:
        return {}
    if tp in _PRIMITIVES:
        return {"type": _PRIMITIVES[tp]}
    if origin is Literal:
        kinds = sorted({_PRIMITIVES[type(a)] for a in args})
        kind: str | list[str] = kinds[0] if len(kinds) == 1 else kinds
        if len(args) == 1:
            return {"type": kind, "const": args[0]}
        return {"type": kind, "enum": list(args)}
    if origin is list:
        return {"type": "array", "items": _schema(args[0], refs)}
    if origin is dict:
        if args[0] is not str:
            raise UnmappedType(f"JSON object keys are strings, not {args[0]!r}")
        return {"type": "object", "additionalProperties": _schema(args[1], refs)}
    if origin in (Union, types.UnionType):
        return _nullable(tp, args, refs)
    if typing.is_typeddict(tp):
        if not top and tp in refs:
            return _ref(refs[tp])
        hints = typing.get_type_hints(tp, include_extras=True)
        made: dict[str, Any] = {
            "type": "object",
            "properties": {name: _schema(hint, refs) for name, hint in hints.items()},
            "required": [name for name, hint in hints.items() if _required(tp, hint)],
        }
        if tp.__doc__:
            made["description"] = " ".join(tp.__doc__.split())
        return made
    raise UnmappedType(f"no JSON Schema for {tp!r}")


def _nullable(tp: Any, args: tuple[Any, ...], refs: Mapping[Any, str]) -> dict[str, Any]:
    """``T | None``: ``"type": [T's, "null"]`` where T has one type, else ``oneOf``."""
    rest = [a for a in args if a is not type(None)]
    if len(rest) != 1 or len(rest) == len(args):
        raise UnmappedType(f"only T | None is mapped, not {tp!r}")
    inner = _schema(rest[0], refs)
    kind = inner.get("type")
    if isinstance(kind, str) and "$ref" not in inner:
        return {**inner, "type": [kind, "null"]}
    return {"oneOf": [inner, {"type": "null"}]}


def _required(tp: Any, hint: Any) -> bool:
    """Whether a key must be present. From the annotation, not ``__required_keys__``:
    Python 3.11 counts a ``NotRequired`` written as a string (``from __future__ import
    annotations``) as required."""
    origin = typing.get_origin(hint)
    if origin is NotRequired:
        return False
    return origin is Required or bool(tp.__total__)
