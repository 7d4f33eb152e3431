"""Settings declared once: a frozen dataclass whose fields carry a :class:`Setting`.

Each field is one setting: its name, type and default are the field's, and its
:class:`Setting` says the rest (the help text, which commands have a flag for it, its
bounds or choices, whether ``up`` hands it to its children). From that one declaration
come the ``--flag`` of each command with help that shows the default and the variable
(:func:`add_flags`), the ``CODEMOJEX_*`` variable and how its text is read
(:func:`read`), the one check of the bounds (:func:`check`) and the variables ``up``
passes on (:func:`to_env`). Nothing here knows a particular setting.

Precedence: a flag over its ``CODEMOJEX_*`` variable over the field's default. A flag's
argparse default is None, so an unset flag leaves the variable to decide.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

T = TypeVar("T")

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off", "")
PREFIX = "CODEMOJEX_"


class ConfigError(ValueError):
    """A setting whose value cannot be used; the message names the flag or variable."""


@dataclass(frozen=True, slots=True)
class Setting:
    """What a field's type and default do not say about the setting it declares."""

    help: str = ""  # what it does; the default and the variable are appended
    flag_of: tuple[str, ...] = ()  # the commands with a --flag for it; () = variable only
    shown: str | None = None  # the default as help shows it, where the value says too little
    zero: str | None = None  # what 0 means ("off"), shown in help
    choices: tuple[str, ...] = ()
    metavar: str | None = None
    minimum: float | None = None
    maximum: float | None = None
    only_if: str | None = None  # the bounds hold only while this other setting is not 0
    checked_with: str | None = None  # one refusal names this setting with that one
    commas: bool = False  # a tuple's variable is separated by commas as well as spaces
    # Reads and normalises the text of a flag or variable; (text, flag or variable) -> text.
    normalize: Callable[[str, str], str] | None = None
    variable: bool = True  # read from CODEMOJEX_<NAME>
    handed_down: bool = True  # `up` passes it to its children as that variable


def setting(default: T, **declared: Any) -> T:
    """A dataclass field with this default, declared by :class:`Setting` ``(**declared)``.

    Typed as the default, so the class reads as plain fields to a type checker."""
    meta = {"setting": Setting(**declared)}
    if isinstance(default, dict | list):
        factory = type(default)
        return typing.cast(T, dataclasses.field(default_factory=factory, metadata=meta))
    made: T = dataclasses.field(default=default, metadata=meta)
    return made


class _Settings(Protocol):
    __dataclass_fields__: typing.ClassVar[dict[str, dataclasses.Field[Any]]]


S = TypeVar("S", bound=_Settings)


@dataclass(frozen=True, slots=True)
class Declared:
    """One field of a settings class, with its type and declaration resolved."""

    name: str
    kind: type  # int, float, bool, str, Path or tuple (of str)
    default: Any
    setting: Setting

    @property
    def variable(self) -> str:
        return env_name(self.name)

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def label(self) -> str:
        """How a refusal names it: by its flag, or by its variable where it has none."""
        return self.flag if self.setting.flag_of else self.variable


def env_name(field_name: str) -> str:
    """The environment variable of a setting."""
    return f"{PREFIX}{field_name.upper()}"


_DECLARED: dict[type[Any], tuple[Declared, ...]] = {}


def declared(cls: type[Any]) -> tuple[Declared, ...]:
    """The settings of ``cls`` in their declaration order."""
    if (known := _DECLARED.get(cls)) is not None:
        return known
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        decl = f.metadata.get("setting")
        if decl is None:
            raise TypeError(f"{cls.__name__}.{f.name} is not declared with setting()")
        default = f.default
        if f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        out.append(Declared(f.name, _kind(hints[f.name]), default, decl))
    _DECLARED[cls] = tuple(out)
    return _DECLARED[cls]


def _kind(hint: Any) -> type:
    """``int | None`` -> int, ``tuple[str, ...]`` -> tuple: what the text is read as."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    origin = typing.get_origin(hint) or hint
    return origin if isinstance(origin, type) else object


def parse_bool(name: str, raw: str) -> bool:
    """An on/off variable: a typo (``ture``) is an error, never quietly "off"."""
    word = raw.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ConfigError(
        f"{name} must be one of {'/'.join(TRUE_WORDS + FALSE_WORDS[:-1])}, not {raw!r}"
    )


def _from_text(d: Declared, raw: str, name: str) -> Any:
    """The value of ``raw``, the text of the flag or variable ``name``."""
    s = d.setting
    if d.kind is bool:
        return parse_bool(name, raw)
    if d.kind in (int, float):
        try:
            return int(raw) if d.kind is int else float(raw)
        except ValueError:
            what = "a whole number" if d.kind is int else "a number"
            raise ConfigError(f"{name} must be {what}, not {raw!r}") from None
    if d.kind is tuple:
        return tuple((raw.replace(",", " ") if s.commas else raw).split())
    if s.choices and raw not in s.choices:
        raise ConfigError(f"{name} must be one of {', '.join(s.choices)}, not {raw!r}")
    if s.normalize is not None:
        raw = s.normalize(raw, name)
    return Path(raw) if d.kind is Path else raw


def read(cls: type[S], env: Mapping[str, str], flags: Mapping[str, Any] | None = None) -> S:
    """``cls`` from flags (by field name; None = not given) over ``env`` over defaults,
    checked. A flag's value is typed by argparse already; its text, if any, is normalised
    as a variable's is, and a refusal names the flag."""
    flags = flags or {}
    values: dict[str, Any] = {}
    for d in declared(cls):
        given = flags.get(d.name)
        if given is not None:
            if isinstance(given, str) and d.kind is not Path:
                given = _from_text(d, given, d.flag)
            values[d.name] = given
        elif d.setting.variable and (raw := env.get(d.variable)) is not None:
            values[d.name] = _from_text(d, raw, d.variable)
    made = cls(**values)
    check(made)
    return made


def _bound(d: Declared) -> str:
    s = d.setting
    if s.choices:
        return f"one of {', '.join(s.choices)}"
    low, high = (_number(b) for b in (s.minimum, s.maximum))
    if s.minimum is not None and s.maximum is not None:
        return f"{low} to {high}"
    return f"{low} or more" if s.minimum is not None else f"{high} or less"


def _number(x: float | None) -> str:
    return "" if x is None else f"{x:g}"


def _within(d: Declared, value: Any, obj: object) -> bool:
    s = d.setting
    if value is None or (s.only_if is not None and not getattr(obj, s.only_if)):
        return True  # unset, or a bound that holds only while another setting is on
    if s.choices:
        return value in s.choices
    if isinstance(value, float) and not math.isfinite(value):
        return s.minimum is None and s.maximum is None
    low = -math.inf if s.minimum is None else s.minimum
    high = math.inf if s.maximum is None else s.maximum
    return bool(low <= value <= high)


def check(obj: object) -> None:
    """The one check of every setting's bounds and choices: a :class:`ConfigError` naming
    the first setting out of bounds (with those declared ``checked_with`` it, the way
    related limits are refused in one line)."""
    decls = [d for d in declared(type(obj)) if _bounded(d.setting)]
    groups: dict[str, list[Declared]] = {}
    for d in decls:
        groups.setdefault(d.setting.checked_with or d.name, []).append(d)
    for group in groups.values():
        if all(_within(d, getattr(obj, d.name), obj) for d in group):
            continue
        bounds = [_bound(d) for d in group]
        labels = [d.label for d in group]
        if len(set(bounds)) == 1:
            names = labels[0] if len(labels) == 1 else f"{', '.join(labels[:-1])} and {labels[-1]}"
            raise ConfigError(f"{names} must be {bounds[0]}")
        joint = ", and " if any("," in b for b in bounds) else " and "
        rest = "".join(f"{joint}{label} {bound}" for label, bound in zip(labels[1:], bounds[1:]))
        raise ConfigError(f"{labels[0]} must be {bounds[0]}{rest}")


def _bounded(s: Setting) -> bool:
    return bool(s.choices) or s.minimum is not None or s.maximum is not None


def show_default(d: Declared) -> str | None:
    """The default as help shows it, or None (an on/off flag: it shows ``VAR=1``)."""
    s = d.setting
    if d.kind is bool:
        return None
    if s.shown is not None:
        return s.shown
    value = d.default
    if isinstance(value, Path) and not value.is_absolute():
        return f"./{value}"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def help_text(d: Declared) -> str:
    """``what it does (default; 0 = off; CODEMOJEX_NAME)``."""
    s = d.setting
    if d.kind is bool:
        return f"{s.help} ({d.variable}=1)"
    shown = show_default(d)
    parts = [] if shown is None else [shown]
    if s.zero is not None:
        parts = (
            [f"0 = {s.zero}"] if d.default == 0 and s.shown is None else [*parts, f"0 = {s.zero}"]
        )
    return f"{s.help} ({'; '.join([*parts, d.variable])})"


def add_flags(parser: argparse.ArgumentParser, command: str, *classes: type[Any]) -> None:
    """The flags ``command`` has, of each settings class in turn, in declaration order."""
    for cls in classes:
        for d in declared(cls):
            if command in d.setting.flag_of:
                parser.add_argument(d.flag, **_argument(d))


def _argument(d: Declared) -> dict[str, Any]:
    s = d.setting
    kwargs: dict[str, Any] = {"default": None, "help": help_text(d)}
    if d.kind is bool:
        kwargs["action"] = "store_true"
        return kwargs
    if d.kind in (int, float, Path):
        kwargs["type"] = d.kind
    if s.choices:
        kwargs["choices"] = list(s.choices)
    if s.metavar is not None:
        kwargs["metavar"] = s.metavar
    return kwargs


def to_env(obj: object, env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with ``obj``'s settings as the variables that read them back (a None one
    removed), but for those not handed down."""
    out = dict(env)
    for d in declared(type(obj)):
        if not (d.setting.variable and d.setting.handed_down):
            continue
        value = getattr(obj, d.name)
        if value is None:
            out.pop(d.variable, None)
        elif isinstance(value, bool):
            out[d.variable] = "1" if value else "0"
        elif isinstance(value, tuple):
            out[d.variable] = " ".join(value)
        else:
            out[d.variable] = str(value)
    return out


def given(namespace: argparse.Namespace, cls: type[Any]) -> dict[str, Any]:
    """The flags of ``cls``'s settings in ``namespace`` that were given."""
    values = vars(namespace)
    return {d.name: values[d.name] for d in declared(cls) if values.get(d.name) is not None}
