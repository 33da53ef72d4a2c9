"""ResNet encoder weights → Detectron2 backbone weights (docs/protocols/evaluation.md §4.2). Pure:
no Detectron2, no I/O but the final pickle writer.

Source names are torchvision's (``conv1``, ``bn1``, ``layer1.0.conv1``, ``layer1.0.downsample.0``
…), which is what ``benchmark.building_blocks.backbones.ResNet`` uses. Dec-SSL's positional names (``f.0``,
``f.1``, then the residual stages as the next four ``Sequential`` children, with or without a
max-pool child between) are first mapped to these names by the kind of child, so the mapping is
right for both stems. The output naming follows Detectron2's ``tools/convert-torchvision-to-d2.py``;
Detectron2's checkpointer matches it to ``backbone.bottom_up.*``.

Stems: a full stem (7×7/2 + max-pool) maps 1:1. A CIFAR stem (3×3/1, no max-pool) cannot feed an FPN
that needs res2–res5 at strides 4–32, so ``stem_policy`` decides: ``reinit`` (default) drops the
stem tensors and Detectron2 initialises a new stem (``FREEZE_AT 0`` required), ``inflate`` copies
the 3×3 kernel into the centre of a zero 7×7 kernel (stride 2 and max-pool stay) and keeps the stem
BN.
"""

from __future__ import annotations

import pickle
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np

StemPolicy = Literal["reinit", "inflate"]
BN_FIELDS = ("weight", "bias", "running_mean", "running_var")
_PREFIXES = ("module.", "encoder.", "backbone.", "model.")


def _array(t: Any) -> np.ndarray:
    if hasattr(t, "detach"):
        t = t.detach().cpu()
        return t.float().numpy().copy() if t.is_floating_point() else t.numpy().copy()
    return np.asarray(t).copy()


def strip_prefixes(state_dict: Mapping[str, Any]) -> dict[str, Any]:
    """Drop wrapper prefixes (``module.``, ``encoder.``, ``backbone.``) that every key shares."""
    sd = dict(state_dict)
    changed = True
    while changed and sd:
        changed = False
        for p in _PREFIXES:
            if all(k.startswith(p) for k in sd):
                sd = {k[len(p) :]: v for k, v in sd.items()}
                changed = True
    return sd


def decssl_to_torchvision(state_dict: Mapping[str, Any]) -> dict[str, Any]:
    """Dec-SSL positional names (``f.<i>.…``) → torchvision names, by the kind of each child of
    ``f``.

    A child whose keys are ``weight`` only (4-d) is the stem convolution, one with ``running_mean``
    the stem BN, and children whose keys look like ``<block>.conv1.weight`` are the residual stages,
    in order (layer1..layer4). A max-pool child has no tensors and so shifts nothing. Keys outside
    ``f.`` (projector, ``g.*``) are dropped.
    """
    children: dict[int, dict[str, Any]] = {}
    for key, value in state_dict.items():
        m = re.match(r"^f\.(\d+)\.(.+)$", key)
        if m:
            children.setdefault(int(m.group(1)), {})[m.group(2)] = value
    out: dict[str, Any] = {}
    stage = 0
    for idx in sorted(children):
        sub = children[idx]
        if any(re.match(r"^\d+\.conv1\.weight$", k) for k in sub):
            stage += 1
            out.update({f"layer{stage}.{k}": v for k, v in sub.items()})
        elif "running_mean" in sub:
            out.update({f"bn1.{k}": v for k, v in sub.items()})
        elif set(sub) == {"weight"} and len(np.shape(sub["weight"])) == 4:
            out["conv1.weight"] = sub["weight"]
    return out


def canonical_resnet_state(state_dict: Mapping[str, Any]) -> dict[str, Any]:
    """torchvision-named ResNet tensors from any supported layout (ours, wrapped, or Dec-SSL
    positional)."""
    sd = strip_prefixes(state_dict)
    if "conv1.weight" not in sd and any(k.startswith("f.") for k in sd):
        sd = decssl_to_torchvision(sd)
    if "conv1.weight" not in sd:
        raise ValueError(
            "not a torchvision-style ResNet state dict: no conv1.weight (or Dec-SSL f.0.weight)"
        )
    return sd


def stem_kind(state_dict: Mapping[str, Any]) -> Literal["cifar", "full"]:
    """``cifar`` for a 3×3 stem convolution, ``full`` for 7×7 (torchvision / Detectron2
    BasicStem)."""
    k = int(np.shape(canonical_resnet_state(state_dict)["conv1.weight"])[-1])
    if k == 3:
        return "cifar"
    if k == 7:
        return "full"
    raise ValueError(f"unsupported stem kernel {k}x{k}")


def resnet_layout(state_dict: Mapping[str, Any]) -> dict[str, Any]:
    """Architecture facts Detectron2 needs: stem kind, stem width, res2 width, blocks per stage,
    block type."""
    sd = canonical_resnet_state(state_dict)
    blocks = []
    for layer in range(1, 5):
        ids = {
            int(m.group(1))
            for k in sd
            for m in [re.match(rf"^layer{layer}\.(\d+)\.conv1\.weight$", k)]
            if m
        }
        blocks.append(len(ids))
    bottleneck = "layer1.0.conv3.weight" in sd
    res2_out = int(
        np.shape(sd["layer1.0.conv3.weight" if bottleneck else "layer1.0.conv2.weight"])[0]
    )
    return {
        "stem": stem_kind(sd),
        "stem_out_channels": int(np.shape(sd["conv1.weight"])[0]),
        "res2_out_channels": res2_out,
        "num_blocks": tuple(blocks),
        "block": "bottleneck" if bottleneck else "basic",
        "bottleneck_channels": int(np.shape(sd["layer1.0.conv1.weight"])[0]) if bottleneck else 0,
    }


def _map_key(key: str) -> str | None:
    """One torchvision key → its Detectron2 key (``None``: dropped). The stem is handled by the
    caller."""
    if key.endswith("num_batches_tracked"):
        return None
    m = re.match(r"^bn1\.(\w+)$", key)
    if m:
        return f"stem.conv1.norm.{m.group(1)}" if m.group(1) in BN_FIELDS else None
    m = re.match(r"^layer([1-4])\.(\d+)\.(.+)$", key)
    if not m:
        return None  # fc.*, projector, predictor, target or cluster copies
    stage, block, rest = int(m.group(1)) + 1, m.group(2), m.group(3)
    prefix = f"res{stage}.{block}"
    if c := re.match(r"^conv(\d)\.weight$", rest):
        return f"{prefix}.conv{c.group(1)}.weight"
    if (b := re.match(r"^bn(\d)\.(\w+)$", rest)) and b.group(2) in BN_FIELDS:
        return f"{prefix}.conv{b.group(1)}.norm.{b.group(2)}"
    if rest == "downsample.0.weight":
        return f"{prefix}.shortcut.weight"
    if (d := re.match(r"^downsample\.1\.(\w+)$", rest)) and d.group(1) in BN_FIELDS:
        return f"{prefix}.shortcut.norm.{d.group(1)}"
    return None


def inflate_kernel(w3: np.ndarray, size: int = 7) -> np.ndarray:
    """Place a k×k kernel in the centre of a zero size×size kernel (same output where the image is
    constant-padded)."""
    out_c, in_c, k, _ = w3.shape
    w = np.zeros((out_c, in_c, size, size), dtype=w3.dtype)
    off = (size - k) // 2
    w[:, :, off : off + k, off : off + k] = w3
    return w


def to_detectron2(
    state_dict: Mapping[str, Any], stem_policy: StemPolicy = "reinit"
) -> dict[str, np.ndarray]:
    """Detectron2 backbone weights (name → numpy array) from a ResNet encoder's state dict.

    Full stem: every tensor maps 1:1 (table in docs/protocols/evaluation.md §4.2). CIFAR stem:
    ``reinit`` omits ``stem.*``, ``inflate`` writes a 7×7 ``stem.conv1.weight`` with the 3×3 kernel
    in its centre and keeps the stem BN.
    """
    if stem_policy not in ("reinit", "inflate"):
        raise ValueError(f"stem_policy must be 'reinit' or 'inflate', got {stem_policy!r}")
    sd = canonical_resnet_state(state_dict)
    stem = stem_kind(sd)
    out: dict[str, np.ndarray] = {}
    for key, value in sd.items():
        if key == "conv1.weight":
            w = _array(value)
            if stem == "full":
                out["stem.conv1.weight"] = w
            elif stem_policy == "inflate":
                out["stem.conv1.weight"] = inflate_kernel(w)
            continue
        new = _map_key(key)
        if new is None or (new.startswith("stem.") and stem == "cifar" and stem_policy == "reinit"):
            continue
        out[new] = _array(value)
    return out


def write_detectron2_pickle(weights: Mapping[str, np.ndarray], path: str | Path) -> Path:
    """The file Detectron2's checkpointer reads with name-matching heuristics (as
    convert-torchvision-to-d2.py)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        pickle.dump(
            {"model": dict(weights), "__author__": "fssl-bench", "matching_heuristics": True}, f
        )
    return path
