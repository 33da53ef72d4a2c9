"""The exported encoder: how ``accept`` evaluates a method's encoder without running the method's
code (docs/integrity.md, "Evaluation runs in the trusted parent").

The boxed child (``benchmark.submission.box_child``, job ``export``) builds the method from the
record's cell, hands it the checkpoint's state and calls its ``encoder`` export, as the runner does;
it writes the modules of the :class:`~benchmark.contracts.types.Encoder` it gets with
``torch.save`` (:data:`ENCODER_FILE`) and its plain fields as JSON (:func:`describe`). The parent
reads that file back with :func:`load_exported`: ``torch.load(weights_only=True)``, with exactly
the classes the file names allowed, and only when every one is trusted code
(:func:`trusted_class`): a ``torch.nn.Module`` or ``enum.Enum`` subclass of PyTorch, torchvision,
timm or the project's own packages, already imported by this process (nothing is imported to
satisfy the file). A module of a plugin's own class cannot be rebuilt that way and is refused in
one line. The module's ``forward`` that tasks call is therefore the trusted class's, run on the
checkpoint's tensors: no plugin code runs where the test split and its labels are.

Loading runs under PyTorch's meta device, so that a constructor the file calls (an enum's, or a
module class called with crafted arguments) allocates nothing; a tensor left on the meta device, a
view larger than its storage, or modules holding more than the re-evaluation's byte budget are
refused after the load. The architecture fingerprint is recomputed here, never read from the child.
"""

from __future__ import annotations

import enum
import math
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ENCODER_FILE = "encoder-{i}.pt"  # one per exported record, in the child's out/
# the packages whose classes the parent rebuilds an exported encoder from (already imported here)
TRUSTED_PACKAGES = ("torch", "torchvision", "timm", "benchmark", "methods", "tasks")
# the project's own packages: a class of theirs must come from this checkout's folder
PROJECT_PACKAGES = ("benchmark", "methods", "tasks")
# what one exported encoder's file may weigh beyond its parameters and buffers (the pickled
# structure: module names, attribute dicts)
STRUCTURE_BYTES = 16 << 20
MAX_MEMBERS = 4096  # members, client models and extras of one encoder
MAX_FIELD_CHARS = 200


class ExportRefused(ValueError):
    """The exported encoder cannot be rebuilt here from trusted code: one line, why."""


def _modules(encoder: Any) -> dict[str, Any]:
    return {
        "module": encoder.module,
        "members": list(encoder.members),
        "classifier": encoder.classifier,
        "extras": dict(encoder.extras),
        "client_models": list(encoder.client_models),
    }


def describe(encoder: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the modules to ``torch.save``, the plain fields as JSON) of ``encoder``: what the boxed
    child writes."""
    fields = {
        "feat_dim": int(encoder.feat_dim),
        "backbone": str(encoder.backbone),
        "input_size": int(encoder.input_size),
        "mean": [float(v) for v in encoder.mean],
        "std": [float(v) for v in encoder.std],
        "member_rule": str(encoder.member_rule),
        "designated_member": int(encoder.designated_member),
        "member_weights": [float(v) for v in encoder.member_weights],
        "client_index": [int(v) for v in encoder.client_index],
    }
    return _modules(encoder), fields


def trusted_class(name: str) -> type | None:
    """The class ``name`` ("package.module.Qualname") when the parent may rebuild a module from it:
    an ``nn.Module`` or ``Enum`` subclass defined in a trusted package that this process has
    already imported (the project's own from this checkout); else None."""
    from torch import nn

    module_name, _, qualname = name.rpartition(".")
    top = module_name.split(".", 1)[0]
    if top not in TRUSTED_PACKAGES or not qualname.isidentifier():
        return None
    module = sys.modules.get(module_name)  # never imported for the file's sake
    if module is None:
        return None
    if top in PROJECT_PACKAGES and not _in_checkout(getattr(module, "__file__", None)):
        return None
    obj = getattr(module, qualname, None)
    if not isinstance(obj, type) or getattr(obj, "__module__", None) != module_name:
        return None
    from benchmark.core.registry import loaded_from

    if loaded_from(obj) is not None:  # what a plugin's entry point registered
        return None
    return obj if issubclass(obj, (nn.Module, enum.Enum)) else None


def _in_checkout(path: str | None) -> bool:
    from benchmark.core.paths import REPO

    if not path:
        return False
    here = Path(path).resolve()
    return any((REPO / name).resolve() in here.parents for name in PROJECT_PACKAGES)


def load_exported(
    path: Path, fields: Mapping[str, Any], *, max_bytes: int, inputs: Any, what: str
) -> Any:
    """The :class:`~benchmark.contracts.types.Encoder` the boxed child exported to ``path`` with
    ``fields`` (its JSON), rebuilt from trusted classes only. ``inputs``: the dataset's input
    spec, which the encoder's input fields must equal. ExportRefused (one line) otherwise."""
    import torch

    if path.is_symlink() or not path.is_file():
        raise ExportRefused(f"{what}: the boxed child wrote no exported encoder")
    if path.stat().st_size > max_bytes + STRUCTURE_BYTES:
        raise ExportRefused(
            f"{what}: the exported encoder's file holds {path.stat().st_size:,} bytes, more than "
            f"the {max_bytes:,} a re-evaluation may build (raise --max-encoder-mb)"
        )
    _stored_only(path, max_bytes + STRUCTURE_BYTES, what)
    try:
        with open(path, "rb") as fh:
            names = torch.serialization.get_unsafe_globals_in_checkpoint(fh)
    except Exception as exc:  # noqa: BLE001 - whatever the child wrote, one line
        raise ExportRefused(f"{what}: the exported encoder is not a checkpoint: {exc}") from None
    classes, refused = [], []
    for name in names:
        cls = trusted_class(name)
        (classes if cls is not None else refused).append(cls if cls is not None else name)
    if refused:
        raise ExportRefused(
            f"{what}: its encoder is built from {_few(refused)}, not a class of PyTorch, "
            "torchvision, timm or fssl-bench: accept evaluates only encoders it can rebuild from "
            "trusted code (docs/integrity.md)"
        )
    try:
        with torch.serialization.safe_globals(classes), torch.device("meta"):
            raw = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - one line
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise ExportRefused(
            f"{what}: the exported encoder does not load: {type(exc).__name__}: {first[:200]}"
        ) from None
    modules = _checked_modules(raw, what)
    _plain_modules(modules, what)
    _check_tensors(modules, max_bytes, what)
    encoder = _encoder(modules, fields, what)
    for name, want in (
        ("input size", inputs.image_size),
        ("mean", tuple(inputs.mean)),
        ("std", tuple(inputs.std)),
    ):
        have = {"input size": encoder.input_size, "mean": encoder.mean, "std": encoder.std}[name]
        if have != want:
            raise ExportRefused(f"{what}: its encoder's {name} {have!r} is not the dataset's")
    return encoder


def _few(names: list[Any]) -> str:
    from benchmark.core.terminal import printable

    shown = ", ".join(printable(str(n))[:MAX_FIELD_CHARS] for n in names[:3])
    return shown + (f" (and {len(names) - 3} more)" if len(names) > 3 else "")


def _checked_modules(raw: Any, what: str) -> dict[str, Any]:
    from torch import nn

    def module(x: Any, where: str, optional: bool = False) -> Any:
        if x is None and optional:
            return None
        if not isinstance(x, nn.Module):
            raise ExportRefused(f"{what}: the exported encoder's {where} is not a module")
        return x

    def listed(x: Any, where: str) -> list[Any]:
        if not isinstance(x, list) or len(x) > MAX_MEMBERS:
            raise ExportRefused(f"{what}: the exported encoder's {where} is not a list of modules")
        return [module(m, where) for m in x]

    if not isinstance(raw, dict) or set(raw) != {
        "module",
        "members",
        "classifier",
        "extras",
        "client_models",
    }:
        raise ExportRefused(f"{what}: the exported encoder is not an encoder's modules")
    extras = raw["extras"]
    if (
        not isinstance(extras, dict)
        or len(extras) > MAX_MEMBERS
        or not all(isinstance(k, str) and len(k) <= MAX_FIELD_CHARS for k in extras)
    ):
        raise ExportRefused(f"{what}: the exported encoder's extras are not named modules")
    return {
        "module": module(raw["module"], "module"),
        "members": listed(raw["members"], "members"),
        "classifier": module(raw["classifier"], "classifier", optional=True),
        "extras": {k: module(v, f"extra {k!r}") for k, v in extras.items()},
        "client_models": listed(raw["client_models"], "client models"),
    }


def _stored_only(path: Path, limit: int, what: str) -> None:
    """The file is the zip archive ``torch.save`` writes: every member stored (never compressed,
    so that no member inflates past what the file holds), at most ``limit`` bytes in all. Checked
    before torch reads a byte of it."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise ExportRefused(f"{what}: the exported encoder is not a checkpoint: {exc}") from None
    if len(infos) > 4 * MAX_MEMBERS + 64:
        raise ExportRefused(f"{what}: the exported encoder's archive has {len(infos):,} members")
    total = 0
    for info in infos:
        if info.compress_type != zipfile.ZIP_STORED or info.file_size != info.compress_size:
            raise ExportRefused(
                f"{what}: the exported encoder's archive has a compressed member, which "
                "torch.save never writes"
            )
        total += info.file_size
    if total > limit:
        raise ExportRefused(
            f"{what}: the exported encoder's archive holds {total:,} bytes, more than {limit:,}"
        )


# what an nn.Module instance holds in its own __dict__ besides plain configuration values: the
# containers its parameters, buffers and children live in, and its hook dictionaries
_MODULE_SLOTS = ("_parameters", "_buffers", "_modules", "_non_persistent_buffers_set")


def _plain_modules(modules: Mapping[str, Any], what: str) -> None:
    """Every module the file holds is what its class builds, nothing more: no hook registered
    (a hook is a callable the file chose), no tensor or module outside ``_parameters``,
    ``_buffers`` and ``_modules`` (an instance attribute wins over those, so a tensor there would
    be computed with while another one is checked and fingerprinted), and no instance attribute
    that shadows a method of the class (``forward``) or one of its parameters, buffers or
    children. Refused in one line."""
    import torch
    from torch import nn

    roots = [modules["module"], *modules["members"], *modules["extras"].values()]
    roots += [*modules["client_models"]] + (
        [modules["classifier"]] if modules["classifier"] else []
    )
    for root in roots:
        for name, m in root.named_modules(remove_duplicate=True):
            where = f"{what}: the exported encoder's module {name or '(root)'!r}"
            held = vars(m)
            for key, value in held.items():
                if key in _MODULE_SLOTS:
                    continue
                if key.endswith("_hooks") or key.endswith("_hooks_with_kwargs"):
                    if len(value):
                        raise ExportRefused(f"{where} carries a {key[1:]} entry")
                    continue
                if isinstance(value, (torch.Tensor, nn.Module)) or callable(value):
                    raise ExportRefused(
                        f"{where} holds {key!r} outside its parameters, buffers and children"
                    )
                if callable(getattr(type(m), key, None)) or any(
                    key in held.get(slot, {}) for slot in ("_parameters", "_buffers", "_modules")
                ):
                    raise ExportRefused(f"{where} shadows {key!r} of its class")


def _check_tensors(modules: Mapping[str, Any], max_bytes: int, what: str) -> None:
    """Every parameter and buffer a real tensor of the file (not left on the meta device by a
    constructor the file called), no view larger than its storage, all within ``max_bytes``."""
    import torch

    roots = [modules["module"], *modules["members"], *modules["extras"].values()]
    roots += [*modules["client_models"]] + (
        [modules["classifier"]] if modules["classifier"] else []
    )
    seen: set[int] = set()
    total = 0
    for root in roots:
        for name, t in [*root.named_parameters(), *root.named_buffers()]:
            if id(t) in seen:
                continue
            seen.add(id(t))
            if not isinstance(t, torch.Tensor) or t.device.type != "cpu":
                raise ExportRefused(
                    f"{what}: the exported encoder's {name!r} is not a tensor of the file"
                )
            if t.numel() * t.element_size() > t.untyped_storage().nbytes():
                raise ExportRefused(
                    f"{what}: the exported encoder's {name!r} is a view larger than its storage"
                )
            total += t.numel() * t.element_size()
    if total > max_bytes:
        raise ExportRefused(
            f"{what}: the exported encoder holds {total:,} bytes, more than the {max_bytes:,} a "
            "re-evaluation may build (raise --max-encoder-mb)"
        )


def _encoder(modules: Mapping[str, Any], fields: Mapping[str, Any], what: str) -> Any:
    from benchmark.contracts.types import Encoder, arch_fingerprint

    def number(key: str, kind: type, minimum: float = 0) -> Any:
        v = fields.get(key)
        if not isinstance(v, kind) or isinstance(v, bool) or not minimum <= v < 1 << 31:
            raise ExportRefused(f"{what}: the exported encoder's {key} is not a valid number")
        return v

    def floats(key: str, limit: int) -> tuple[float, ...]:
        v = fields.get(key)
        if (
            not isinstance(v, list)
            or len(v) > limit
            or not all(
                isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
                for x in v
            )
        ):
            raise ExportRefused(f"{what}: the exported encoder's {key} is not a list of numbers")
        return tuple(float(x) for x in v)

    def text(key: str) -> str:
        v = fields.get(key)
        if not isinstance(v, str) or len(v) > MAX_FIELD_CHARS:
            raise ExportRefused(f"{what}: the exported encoder's {key} is not a name")
        return v

    index = fields.get("client_index")
    if (
        not isinstance(index, list)
        or len(index) > 1 << 20
        or not all(isinstance(i, int) and not isinstance(i, bool) for i in index)
    ):
        raise ExportRefused(f"{what}: the exported encoder's client index is not a list of ints")
    try:
        return Encoder(
            module=modules["module"],
            feat_dim=number("feat_dim", int, 1),
            backbone=text("backbone"),
            fingerprint=arch_fingerprint(modules["module"]),  # recomputed, never the child's
            input_size=number("input_size", int, 1),
            mean=floats("mean", 16),
            std=floats("std", 16),
            members=tuple(modules["members"]),
            classifier=modules["classifier"],
            extras=dict(modules["extras"]),
            member_rule=text("member_rule"),
            designated_member=number("designated_member", int),
            member_weights=floats("member_weights", MAX_MEMBERS),
            client_models=tuple(modules["client_models"]),
            client_index=tuple(index),
        )
    except ValueError as exc:  # the encoder's own checks (member rule, indices)
        raise ExportRefused(f"{what}: the exported encoder is refused: {exc}") from None


def export_in_box(
    items: list[tuple[Any, Any]],
    *,
    data_root: str | Path | None,
    max_bytes: int,
    hidden: Any = (),
    unboxed: bool = False,
) -> dict[str, Any]:
    """The encoders of ``items`` ((record, its checkpoint's ``Pretrained``), one dataset) exported
    by their methods' own code in one boxed child and rebuilt here from trusted classes: cell id →
    the Encoder, or the lines why not (the problems ``benchmark.submission.bounds`` names for an
    encoder that does not fit or is too large, a fingerprint that is not the record's, or an
    :class:`ExportRefused` line). BoxRefused (one line) when the child gives no valid result."""
    import tempfile

    from benchmark.contracts.cell import Cell
    from benchmark.engine.stages import input_spec, load_data
    from benchmark.submission.box import BoxRefused, run_boxed

    if not items:
        return {}
    inputs = input_spec(load_data(Cell.from_dict(items[0][0].cell), data_root))
    states = [
        {
            "model": dict(pre.server.model),
            "extra": dict(pre.server.extra),
            "clients": {int(k): dict(v) for k, v in pre.client_tensors.items()},
        }
        for _, pre in items
    ]
    job = {
        "kind": "export",
        "cells": [dict(record.cell) for record, _ in items],
        "image_size": inputs.image_size,
        "mean": list(inputs.mean),
        "std": list(inputs.std),
        "num_classes": inputs.num_classes,
        "max_bytes": int(max_bytes),
    }
    what = "exporting the encoders in the box"
    names = [ENCODER_FILE.format(i=i) for i in range(len(items))]
    with tempfile.TemporaryDirectory(prefix="fssl-exported-") as tmp:
        raw = run_boxed(
            job,
            {"states": states},
            what=what,
            hidden=hidden,
            unboxed=unboxed,
            into=Path(tmp),
            keep_optional=names,
        )
        answers = raw.get("exported")
        if not isinstance(answers, list) or len(answers) != len(items):
            raise BoxRefused(f"{what}: the child's answer is not one export per record")
        out: dict[str, Any] = {}
        for i, ((record, _), answer) in enumerate(zip(items, answers, strict=True)):
            out[record.cell_id] = _one(record, answer, Path(tmp) / names[i], inputs, max_bytes)
    return out


def _one(record: Any, answer: Any, path: Path, inputs: Any, max_bytes: int) -> Any:
    """One record's answer from the child: its Encoder, or the lines why not."""
    from benchmark.core.terminal import printable

    what = f"{record.cell_id}: its method's encoder export"
    if not isinstance(answer, dict):
        return [f"{what}: the boxed child's answer is not an export"]
    if "unfit" in answer:
        return [
            "checkpoint: its tensors do not fit the encoder the record's cell builds (sized on "
            f"the meta device in the box, nothing allocated): {printable(str(answer['unfit']))[:300]}"
        ]
    if "bytes" in answer:
        size = answer["bytes"]
        shown = f"{size:,}" if isinstance(size, int) and 0 <= size < 1 << 62 else "too many"
        return [
            f"the encoder the record's cell builds holds {shown} bytes, more than the "
            f"{max_bytes:,} a re-evaluation may build (raise --max-encoder-mb)"
        ]
    if not isinstance(answer.get("fields"), dict):
        return [f"{what}: the boxed child's answer is not an export"]
    try:
        encoder = load_exported(
            path, answer["fields"], max_bytes=max_bytes, inputs=inputs, what=what
        )
    except ExportRefused as exc:
        return [str(exc)]
    if record.backbone_fingerprint and encoder.fingerprint != record.backbone_fingerprint:
        return [
            f"the encoder the record's cell builds from the checkpoint has architecture "
            f"fingerprint {encoder.fingerprint}, the record states {record.backbone_fingerprint}"
        ]
    return encoder


__all__ = [
    "ENCODER_FILE",
    "TRUSTED_PACKAGES",
    "ExportRefused",
    "describe",
    "export_in_box",
    "load_exported",
    "trusted_class",
]
