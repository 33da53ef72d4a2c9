"""Moving named tensors between ``nn.Module``s and payloads: prefixes, BN detection, CPU copies, and the distance of
two models. Offered to plugin methods through ``benchmark.api`` (the built-in methods use the same functions)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import torch
from torch import nn

TensorDict = Mapping[str, torch.Tensor]
BN_TYPES = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm)


def tensors_of(module: nn.Module, prefix: str = "") -> dict[str, torch.Tensor]:
    """Parameters and buffers as detached CPU copies, without ``num_batches_tracked`` (never sent, project rule)."""
    return {
        f"{prefix}{k}": v.detach().to("cpu", copy=True)
        for k, v in module.state_dict().items()
        if not k.endswith("num_batches_tracked")
    }


def load_tensors(module: nn.Module, tensors: Mapping[str, torch.Tensor], prefix: str = "") -> None:
    """Copy the ``prefix``-ed entries of ``tensors`` into ``module`` (all of its entries must be present)."""
    own = module.state_dict()
    with torch.no_grad():
        for key, target in own.items():
            if key.endswith("num_batches_tracked"):
                continue
            name = f"{prefix}{key}"
            if name not in tensors:
                raise KeyError(f"missing tensor {name!r}")
            target.copy_(tensors[name])


def select(tensors: Mapping[str, torch.Tensor], prefix: str, *, strip: bool = False) -> dict[str, torch.Tensor]:
    return {(k[len(prefix):] if strip else k): v for k, v in tensors.items() if k.startswith(prefix)}


def bn_tensor_names(module: nn.Module, prefix: str = "") -> set[str]:
    """Names of every BatchNorm tensor (affine parameters and running statistics), identified by module type."""
    names = set()
    for mod_name, mod in module.named_modules():
        if isinstance(mod, BN_TYPES):
            for key in mod.state_dict():
                if not key.endswith("num_batches_tracked"):
                    names.add(f"{prefix}{mod_name}.{key}" if mod_name else f"{prefix}{key}")
    return names


def reset_num_batches(modules: Iterable[nn.Module]) -> None:
    for module in modules:
        for mod in module.modules():
            if isinstance(mod, BN_TYPES) and mod.num_batches_tracked is not None:
                mod.num_batches_tracked.zero_()


def divergence(a: TensorDict, b: TensorDict, names: Sequence[str]) -> float:
    """D(A, B) = (1/|𝒞|) Σ_{l∈𝒞} ‖A_l − B_l‖_F over the tensors ``names`` (computed in float64)."""
    if not names:
        raise ValueError("divergence needs at least one tensor name")
    total = 0.0
    for name in names:
        diff = a[name].detach().to("cpu", torch.float64) - b[name].detach().to("cpu", torch.float64)
        total += float(torch.linalg.vector_norm(diff))
    return total / len(names)
