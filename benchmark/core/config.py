"""Strict config loading: ``from_mapping`` (and ``to_plain``, ``canonical_json``, ``digest`` from
records.canonical).

Every component config is a frozen dataclass. ``from_mapping`` rejects unknown keys (naming the
nearest field) and wrong types before any compute is spent; ``digest`` names things by content
(cells, cards, partitions).
"""

from __future__ import annotations

import dataclasses
import difflib
import reprlib
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

from benchmark.core.canonical import canonical_json, digest, to_plain

C = TypeVar("C")


class ConfigError(ValueError):
    """A config value or key is wrong; the message names the field."""


# a value quoted in a one-line error: at most a few levels and items of it (a grid's alias bomb
# would otherwise be printed whole)
_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxtuple, _REPR.maxdict = 3, 6, 6, 6
_REPR.maxstring = _REPR.maxother = 80


def show(value: Any) -> str:
    """``repr(value)``, cut short without building the whole of it."""
    return _REPR.repr(value)


def _coerce(owner: str, key: str, tp: Any, value: Any) -> Any:
    origin = get_origin(tp)
    where = f"{owner}.{key}"
    if tp is Any:
        return value
    if origin is Literal:
        if value not in get_args(tp):
            raise ConfigError(f"{where} must be one of {list(get_args(tp))}, got {show(value)}")
        return value
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(owner, key, arg, value)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(f"{where}: {show(value)} matches none of {tp}")
    if origin in (tuple, list, typing.Sequence) or tp in (tuple, list):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where} must be a list, got {type(value).__name__} {show(value)}")
        args = get_args(tp)
        if args and (len(args) == 2 and args[1] is Ellipsis or origin is not tuple):
            return tuple(_coerce(owner, key, args[0], v) for v in value)
        if args:
            if len(args) != len(value):
                raise ConfigError(f"{where} must have {len(args)} items, got {len(value)}")
            return tuple(_coerce(owner, key, a, v) for a, v in zip(args, value))
        return tuple(value)
    if origin in (dict, Mapping, typing.Mapping) or tp in (dict,):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where} must be a mapping, got {show(value)}")
        return dict(value)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if isinstance(value, tp):
            return value
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where} must be a mapping, got {show(value)}")
        return from_mapping(tp, value)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where} must be true or false, got {show(value)}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where} must be an integer, got {show(value)}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where} must be a number, got {show(value)}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where} must be a string, got {show(value)}")
        return value
    return value


def from_mapping(cls: type[C], raw: Mapping[str, Any] | None) -> C:
    """Build the frozen dataclass ``cls`` from ``raw``, rejecting unknown keys and wrong types."""
    raw = dict(raw or {})
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
    for key in sorted(raw.keys() - fields.keys()):
        hint = difflib.get_close_matches(key, list(fields), n=1)
        raise ConfigError(
            f"{cls.__name__} has no field {key!r}"
            + (
                f"; did you mean {hint[0]!r}?"
                if hint
                else f"; fields: {', '.join(sorted(fields)) or '(none)'}"
            )
        )
    hints = get_type_hints(cls)
    kwargs = {
        k: _coerce(cls.__name__, k, hints.get(k, Any), _over_default(fields[k], v))
        for k, v in raw.items()
    }
    try:
        return cls(**kwargs)
    except TypeError as exc:  # missing required fields
        raise ConfigError(f"{cls.__name__}: {exc}") from None


def _over_default(f: dataclasses.Field, value: Any) -> Any:
    """A mapping given for a nested config overrides the *field's default* key by key, never the
    nested class's own defaults: ``augment: {flip_p: 0}`` keeps FedU's EasyFL jitter (0.8) instead
    of falling back to AugmentConfig's 0.4. Everywhere a nested config is read from a mapping
    (grids, method_common, ``with:``, CLI) the merge is the same."""
    if not isinstance(value, Mapping):
        return value
    if f.default is not dataclasses.MISSING:
        default = f.default
    elif f.default_factory is not dataclasses.MISSING:
        default = f.default_factory()
    else:
        return value
    if not dataclasses.is_dataclass(default):
        return value
    return {**to_plain(default), **value}


def config_dict(cfg: Any) -> dict[str, Any]:
    """The fully resolved config (defaults filled in) as a plain dict."""
    return to_plain(cfg)


__all__ = [
    "C",
    "ConfigError",
    "canonical_json",
    "config_dict",
    "digest",
    "from_mapping",
    "to_plain",
]
