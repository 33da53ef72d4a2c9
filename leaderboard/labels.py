"""Readable short labels for what tables show: partitions ("Dir(0.1)", "IID") and configurations of
one method ("resnet_micro", "lr=0.32"). Pure functions of record data; the full specification stays
one hover or click away.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from leaderboard.formatting import alpha_number

# partitioners whose main parameter is a Dirichlet concentration over labels: all shown as Dir(α)
_LABEL_DIRICHLET_PARAM = "alpha"
# other partitioners: (short name, main parameter)
_SHORT = {
    "quantity_dirichlet": ("Qty", "beta"),
    "decssl_skew": ("Skew", "beta"),
    "fedavg_shards": ("Shards", "shards_per_client"),
    "easyfl_class": ("Classes", "classes_per_client"),
}


def _num(x: Any) -> str:
    if isinstance(x, float):
        return alpha_number(x)
    return str(x)


def partition_short(name: str | None, params: Mapping[str, Any] | None) -> str:
    """``iid`` → ``IID``; a label-Dirichlet partitioner → ``Dir(0.1)``; a few others by their main
    parameter (``Shards(2)``); anything else by its name. Modifiers (e.g. a subsample) are appended,
    so two different partitions never share a short label because of them."""
    params = dict(params or {})
    if name is None:
        return "—"
    if name == "iid":
        text = "IID"
    elif isinstance(params.get(_LABEL_DIRICHLET_PARAM), (int, float)):
        text = f"Dir({_num(params[_LABEL_DIRICHLET_PARAM])})"
    elif name in _SHORT and _SHORT[name][1] in params:
        short, key = _SHORT[name]
        text = f"{short}({_num(params[key])})"
    else:
        text = str(name)
    for mod in params.get("modifiers") or ():
        if isinstance(mod, Mapping):
            extra = ", ".join(f"{k}={_num(v)}" for k, v in sorted(mod.items()) if k != "name")
            text += f" + {mod.get('name', 'modifier')}" + (f"({extra})" if extra else "")
    return text


def disambiguate(shorts: Mapping[str, str], names: Mapping[str, str]) -> dict[str, str]:
    """``{full label: short}`` with collisions resolved: two partitions of one dataset that share a
    short label (e.g. two different Dirichlet partitioners at α = 0.1) get their partitioner's name
    appended, then a digest."""
    out = dict(shorts)
    for _ in range(2):
        seen: dict[str, list[str]] = {}
        for full, short in out.items():
            seen.setdefault(short, []).append(full)
        clashes = [fulls for fulls in seen.values() if len(fulls) > 1]
        if not clashes:
            break
        for fulls in clashes:
            for full in fulls:
                suffix = names.get(full) or ""
                if suffix and not out[full].endswith(f"[{suffix}]"):
                    out[full] = f"{out[full]} [{suffix}]"
                else:
                    out[full] = f"{out[full]} #{hashlib.sha256(full.encode()).hexdigest()[:4]}"
    return out


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """``{"backbone": {"params": {"width": 8}}}`` → ``{"backbone.params.width": 8}`` (lists stay
    values)."""
    if isinstance(obj, Mapping):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out if out or not prefix else {prefix[:-1]: {}}
    return {prefix[:-1]: obj}


# how a varying configuration key is written in a label (default: its last path component)
_KEY_NAMES = {
    "backbone.name": "",
    "fl.rounds": "R",
    "fl.local_epochs": "E",
    "fl.num_clients": "K",
    "fl.participation": "p",
    "dataset.name": "",
}


def _part(key: str, value: Any) -> str:
    name = _KEY_NAMES.get(key, key.rsplit(".", 1)[-1])
    text = (
        _num(value)
        if isinstance(value, (int, float, str)) and not isinstance(value, bool)
        else json.dumps(value, sort_keys=True, default=str)
    )
    return f"{name}={text}" if name else text


def _varies(flats: Any, key: str) -> bool:
    return len({json.dumps(f.get(key), sort_keys=True, default=str) for f in flats}) > 1


def variant_labels(configs: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Labels telling apart the configurations of one method: ``{key: config}`` → ``{key: label}``
    naming only the settings that differ between them (a backbone by its name: ``resnet_micro`` /
    ``vit_micro``; a parameter as ``lr=0.32``). One configuration → ``""``. Labels are unique (a
    digest is appended if they would clash)."""
    if len(configs) < 2:
        return {k: "" for k in configs}
    flat = {k: flatten(c) for k, c in configs.items()}
    keys = sorted({key for f in flat.values() for key in f})
    varying = [key for key in keys if _varies(flat.values(), key)]
    for comp in ("backbone", "dataset", "method"):
        # another component: its own parameters only where they tell apart namesakes
        if f"{comp}.name" in varying:
            groups: dict[Any, list[dict[str, Any]]] = {}
            for f in flat.values():
                groups.setdefault(json.dumps(f.get(f"{comp}.name")), []).append(f)
            varying = [
                key
                for key in varying
                if not key.startswith(f"{comp}.params.")
                or any(_varies(g, key) for g in groups.values())
            ]
    # the backbone's name first, then the rest in key order
    varying.sort(key=lambda key: (key != "backbone.name", key))
    out = {k: " · ".join(_part(key, f.get(key)) for key in varying) for k, f in flat.items()}
    counts: dict[str, int] = {}
    for label in out.values():
        counts[label] = counts.get(label, 0) + 1
    return {k: (v if counts[v] == 1 and v else f"{v} #{k[:6]}".strip()) for k, v in out.items()}


def round_stat(value: Any, digits: int = 3) -> Any:
    """Partition statistics for display: floats to ``digits`` significant digits; a long list of
    numbers as its min / mean / max; anything else unchanged."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, float):
        return float(f"{value:.{digits}g}") if math.isfinite(value) else value
    if (
        isinstance(value, Sequence)
        and not isinstance(value, str)
        and value
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
    ):
        if len(value) <= 8:
            return ", ".join(
                _num(round_stat(float(v) if isinstance(v, float) else v, digits)) for v in value
            )
        mean = math.fsum(value) / len(value)
        return f"{len(value)} values: min {_num(min(value))}, mean {mean:.{digits}g}, max {_num(max(value))}"
    return value
