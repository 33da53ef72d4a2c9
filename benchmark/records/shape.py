"""The types inside a record, checked field by field where a record is read: a sealed record of the
wrong shape (``env.plugins`` entries that are not provenance, ``task_failures`` a list,
``comm.bytes_up`` a string) is a :class:`RecordError` with the field's path, so ``collect`` and
``accept`` refuse it and ``leaderboard build`` lists it on the skipped page instead of failing on
it. Torch-free."""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from typing import Any

from benchmark.records.errors import RecordError

# an entry of env.plugins (benchmark.core.provenance.component_provenance): the keys a page reads,
# with their types
PLUGIN_KEYS: Mapping[str, tuple[type, ...]] = {
    "module": (str,),
    "distribution": (str, type(None)),
    "version": (str, type(None)),
    "source_digest": (str,),
    "files": (int,),
    "commit": (str,),
    "url": (str, type(None)),
}
PLUGIN_REQUIRED = ("module", "distribution", "version", "source_digest")


def check_shape(obj: Any, where: str = "record") -> None:
    """Raise RecordError naming the first field of ``obj`` (a record dataclass) whose value has the
    wrong type."""
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        path = f"{where}.{f.name}"
        if dataclasses.is_dataclass(value):
            check_shape(value, path)
            continue
        if isinstance(value, tuple):
            for i, item in enumerate(value):
                if dataclasses.is_dataclass(item):
                    check_shape(item, f"{path}[{i}]")
        if not _fits(value, hints[f.name]):
            raise RecordError(
                f"{path} has the wrong type ({type(value).__name__}: "
                f"{_short(value)}), expected {_name(hints[f.name])}"
            )
    if hasattr(obj, "plugins"):
        _check_plugins(obj.plugins, f"{where}.plugins")


def _fits(value: Any, hint: Any) -> bool:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if origin is typing.Literal:
        return value in args
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, a) for a in args)
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return (
            isinstance(value, (int, float))
            and not isinstance(value, bool)
            and math.isfinite(float(value))
        )
    if hint is str:
        return isinstance(value, str)
    if origin is tuple:
        if not isinstance(value, tuple):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_fits(v, args[0]) or dataclasses.is_dataclass(v) for v in value)
        return len(value) == len(args) and all(_fits(v, a) for v, a in zip(value, args))
    if origin is Mapping or origin is dict:
        if not isinstance(value, Mapping):
            return False
        key_t, val_t = args or (Any, Any)
        return all(_fits(k, key_t) and _fits(v, val_t) for k, v in value.items())
    if dataclasses.is_dataclass(hint):
        return isinstance(value, hint)
    return True


def _check_plugins(plugins: Mapping[str, Any], where: str) -> None:
    for key, entry in plugins.items():
        if not isinstance(entry, Mapping):
            raise RecordError(f"{where}[{key!r}] must be an object (the plugin's provenance)")
        missing = [k for k in PLUGIN_REQUIRED if k not in entry]
        if missing:
            raise RecordError(f"{where}[{key!r}] lacks {missing} (the plugin's provenance)")
        for name, value in entry.items():
            allowed = PLUGIN_KEYS.get(name)
            if allowed is None:
                raise RecordError(f"{where}[{key!r}] has an unknown key {name!r}")
            if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
                raise RecordError(
                    f"{where}[{key!r}].{name} has the wrong type ({type(value).__name__})"
                )


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _name(hint: Any) -> str:
    return str(hint).replace("typing.", "").replace("collections.abc.", "")


__all__ = ["check_shape"]
