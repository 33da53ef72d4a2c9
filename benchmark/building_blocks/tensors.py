"""Moving named tensors between ``nn.Module``s and payloads: prefixes, BN detection, CPU copies, and
the distance of two models. Offered to plugin methods through ``benchmark.api`` (the built-in
methods use the same functions)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import torch
from torch import nn

TensorDict = Mapping[str, torch.Tensor]
BN_TYPES = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm)


def state_entries(module: nn.Module) -> list[tuple[str, torch.Tensor]]:
    """``module.state_dict(keep_vars=True)``'s entries, in its order, without
    ``num_batches_tracked``.

    ``Module.state_dict`` recurses through a Python call (hooks, metadata, a detach) per submodule:
    0.13 ms for the micro ResNet, paid twice a client (load the broadcast, copy the upload) — a
    weight at cross-device scale (perf/p8). The same entries come from a direct walk of
    ``_parameters`` and persistent ``_buffers``, which is what ``state_dict`` does unless a module
    customises it; any module that does (state-dict hooks, an overridden
    ``state_dict``/``_save_to_state_dict``, extra state) sends the whole walk to ``state_dict``
    itself."""
    out: list[tuple[str, torch.Tensor]] = []
    if not _walk(module, "", out):
        out = list(module.state_dict(keep_vars=True).items())
    return [(k, v) for k, v in out if not k.endswith("num_batches_tracked")]


def _walk(module: nn.Module, prefix: str, out: list[tuple[str, torch.Tensor]]) -> bool:
    cls = type(module)
    if (
        module._state_dict_hooks
        or module._state_dict_pre_hooks
        or cls.state_dict is not nn.Module.state_dict
        or cls._save_to_state_dict is not nn.Module._save_to_state_dict
        or cls.get_extra_state is not nn.Module.get_extra_state
    ):
        return False
    for name, param in module._parameters.items():
        if param is not None:
            out.append((prefix + name, param))
    transient = module._non_persistent_buffers_set
    for name, buf in module._buffers.items():
        if buf is not None and name not in transient:
            out.append((prefix + name, buf))
    return all(
        _walk(child, f"{prefix}{name}.", out)
        for name, child in module._modules.items()
        if child is not None
    )


def tensors_of(module: nn.Module, prefix: str = "") -> dict[str, torch.Tensor]:
    """Parameters and buffers as detached CPU copies, without ``num_batches_tracked`` (never sent,
    project rule)."""
    out = {}
    with torch.no_grad():  # copies without autograd history: what ``.detach()`` then copying gives
        for key, t in state_entries(module):
            # a CPU tensor's ``clone`` is ``.to("cpu", copy=True)`` (the same values and strides)
            # without its dispatch; a meta tensor (accept sizes an encoder on the meta device
            # before building it) has no data to copy and stays a meta tensor
            out[prefix + key] = t.clone() if t.is_cpu or t.is_meta else t.to("cpu", copy=True)
    return out


def load_tensors(module: nn.Module, tensors: Mapping[str, torch.Tensor], prefix: str = "") -> None:
    """Copy the ``prefix``-ed entries of ``tensors`` into ``module`` (all of its entries must be
    present)."""
    targets, sources = [], []
    for key, target in state_entries(module):
        name = f"{prefix}{key}"
        if name not in tensors:
            raise KeyError(f"missing tensor {name!r}")
        targets.append(target)
        sources.append(tensors[name])
    with torch.no_grad():
        # one call, not one dispatch per tensor; exact like ``copy_``
        torch._foreach_copy_(targets, sources)


def select(
    tensors: Mapping[str, torch.Tensor], prefix: str, *, strip: bool = False
) -> dict[str, torch.Tensor]:
    return {
        (k[len(prefix) :] if strip else k): v for k, v in tensors.items() if k.startswith(prefix)
    }


def bn_tensor_names(module: nn.Module, prefix: str = "") -> set[str]:
    """Names of every BatchNorm tensor (affine parameters and running statistics), identified by
    module type."""
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
