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

from benchmark.records.record_error import RecordError

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
    if hasattr(obj, "bytes_up") or hasattr(obj, "client_steps"):
        check_counts(obj, where)


# What a count of a record (traffic in bytes, optimizer steps, samples, epochs, peak memory) may be:
# a non-negative integer the site's floats hold exactly (2**53 bytes is 9 PB). comm.bytes_up =
# 10**400 was collected and then made the site skip it with OverflowError; -5 client steps escaped
# the budget flag (issue 44).
MAX_COUNT = 2**53


def check_counts(stats: Any, where: str) -> None:
    """RecordError naming the first count of ``stats`` (a record's ``comm`` or ``compute``) that is
    negative or over :data:`MAX_COUNT`, a time that is negative, or per-round traffic that does not
    add up to its total."""
    for f in dataclasses.fields(stats):
        value = getattr(stats, f.name)
        items = value if isinstance(value, tuple) else (value,)
        for item in items:
            if isinstance(item, bool) or not isinstance(item, (int, float)):
                continue
            if not 0 <= item <= MAX_COUNT:
                raise RecordError(
                    f"{where}.{f.name} is {_short(item)}: a count or a time must be between 0 and "
                    f"{MAX_COUNT:,}"
                )
    for total, rounds in (("bytes_up", "per_round_up"), ("bytes_down", "per_round_down")):
        per_round = getattr(stats, rounds, ())
        if per_round and sum(per_round) != getattr(stats, total):
            raise RecordError(
                f"{where}.{total} is {getattr(stats, total):,} but its {rounds} add up to "
                f"{sum(per_round):,}"
            )


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


# The resolved cell (benchmark.contracts.cell.Cell.to_dict): its sections and their types. Every
# tool reads these (identity, tracks, accept, the site's tables); a record whose cell has another
# shape is refused where it is read, never a traceback in one of them.
CELL_COMPONENTS = ("dataset", "backbone", "method", "partition")
CELL_REQUIRED = (*CELL_COMPONENTS, "partition_seed", "public", "fl", "seed", "tasks")
# kernels_revision: the portable mode's revision, in a portable cell only (Cell.to_dict)
CELL_OPTIONAL: Mapping[str, type] = {"precision": str, "kernels": str, "kernels_revision": int}
FL_FIELDS: Mapping[str, Any] = {
    "num_clients": int,
    "participation": float,
    "rounds": int,
    "local_epochs": int,
}
COMPONENT_KEYS = {"name", "version", "params"}


def check_cell(cell: Any, where: str = "record.cell") -> None:
    """Raise RecordError naming the first section of a record's ``cell`` of the wrong shape."""
    if not isinstance(cell, Mapping):
        raise RecordError(f"{where} must be an object, got {_type(cell)}")
    unknown = sorted(set(cell) - set(CELL_REQUIRED) - set(CELL_OPTIONAL), key=str)
    if unknown:
        raise RecordError(f"{where} has unknown keys {unknown}")
    missing = [k for k in CELL_REQUIRED if k not in cell]
    if missing:
        raise RecordError(f"{where} lacks {missing}")
    for key in CELL_COMPONENTS:
        _check_component(cell[key], f"{where}.{key}")
    if cell["public"] is not None:
        _check_component(cell["public"], f"{where}.public")
    tasks = cell["tasks"]
    if not isinstance(tasks, (list, tuple)):
        raise RecordError(f"{where}.tasks must be a list of components, got {_type(tasks)}")
    for i, task in enumerate(tasks):
        _check_component(task, f"{where}.tasks[{i}]")
    fl = cell["fl"]
    if not isinstance(fl, Mapping) or set(fl) != set(FL_FIELDS):
        raise RecordError(
            f"{where}.fl must be an object with {sorted(FL_FIELDS)}, got {_short(fl)}"
        )
    for key, hint in FL_FIELDS.items():
        if not _fits(fl[key], hint):
            raise RecordError(f"{where}.fl.{key} must be a {hint.__name__}, got {_short(fl[key])}")
    for key in ("seed", "partition_seed"):
        if not _fits(cell[key], int):
            raise RecordError(f"{where}.{key} must be an integer, got {_short(cell[key])}")
    for key, hint in CELL_OPTIONAL.items():
        if key in cell and not _fits(cell[key], hint):
            raise RecordError(f"{where}.{key} must be a {hint.__name__}, got {_short(cell[key])}")


def _check_component(value: Any, where: str) -> None:
    if not isinstance(value, Mapping):
        raise RecordError(f"{where} must be an object (name, version, params), got {_short(value)}")
    unknown = sorted(set(value) - COMPONENT_KEYS, key=str)
    if unknown:
        raise RecordError(f"{where} has unknown keys {unknown}")
    if not isinstance(value.get("name"), str) or not value["name"]:
        raise RecordError(f"{where}.name must be a non-empty string")
    if not isinstance(value.get("version"), str):
        raise RecordError(f"{where}.version must be a string")
    if not isinstance(value.get("params", {}), Mapping):
        raise RecordError(f"{where}.params must be an object, got {_type(value['params'])}")


# What the site shows of a record is copied into several pages (a partition label into about 18
# places): a string longer than any the runner writes (the longest, a card's source note, is a few
# hundred characters) or a structure nested deeper is refused where the record is read.
MAX_TEXT = 2000
MAX_DEPTH = 32


def check_sizes(raw: Any, where: str = "record") -> None:
    """RecordError when a string (a key or a value) anywhere in ``raw`` is longer than
    :data:`MAX_TEXT` characters or ``raw`` nests deeper than :data:`MAX_DEPTH` (walked without
    recursion)."""
    stack: list[tuple[Any, str, int]] = [(raw, where, 0)]
    while stack:
        value, path, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise RecordError(f"{path} is nested more than {MAX_DEPTH} levels deep")
        if isinstance(value, str):
            if len(value) > MAX_TEXT:
                raise RecordError(
                    f"{path} holds {len(value):,} characters, more than the {MAX_TEXT:,} a "
                    "record's text may hold"
                )
        elif isinstance(value, Mapping):
            for key, item in value.items():
                if isinstance(key, str) and len(key) > MAX_TEXT:
                    raise RecordError(f"{path} has a key of {len(key):,} characters")
                stack.append((item, f"{path}.{str(key)[:40]}", depth + 1))
        elif isinstance(value, (list, tuple)):
            stack.extend((item, f"{path}[{i}]", depth + 1) for i, item in enumerate(value))


def _type(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _name(hint: Any) -> str:
    return str(hint).replace("typing.", "").replace("collections.abc.", "")


__all__ = [
    "MAX_COUNT",
    "MAX_DEPTH",
    "MAX_TEXT",
    "check_cell",
    "check_counts",
    "check_shape",
    "check_sizes",
]
