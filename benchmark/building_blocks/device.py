"""Device policy behind one switch: CUDA when present, with channels-last; the CPU otherwise.
Precision is not a device choice but a cell field (``benchmark.core.precision``): the same cell
computes in the same dtype on every device."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True, kw_only=True)
class DeviceConfig:
    device: str = "auto"  # "auto" | "cpu" | "cuda" | "cuda:N"
    channels_last: bool = True  # only ever on CUDA

    def resolve(self) -> torch.device:
        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return torch.device(self.device)

    def use_channels_last(self) -> bool:
        return self.channels_last and self.resolve().type == "cuda"


def prepare_module(
    module: torch.nn.Module, device: torch.device, *, channels_last: bool
) -> torch.nn.Module:
    """``module`` on ``device``, its 4-D weights in channels-last (NHWC) layout when
    ``channels_last`` and on CUDA.

    Tensor cores run NHWC convolutions without layout transposes; activations follow the weights'
    layout, and ``load_tensors`` copies into the existing tensors, so the layout survives every
    reload. A no-op on the CPU. The runner resolves the switch once
    (``DeviceConfig.use_channels_last``) and passes it as ``ctx.channels_last``. A module already on
    ``device`` is not passed through ``Module.to`` (which re-assigns every tensor: 0.36 ms for the
    micro ResNet, paid once per client per round; perf/p8).
    """
    device = torch.device(device)
    # tensors live on "cuda:N"
    if device.type == "cuda" and device.index is None and torch.cuda.is_available():
        device = torch.device("cuda", torch.cuda.current_device())
    if _off_device(module, device):
        module = module.to(device)
    if channels_last and device.type == "cuda":
        module = module.to(memory_format=torch.channels_last)
    return module


def _off_device(module: torch.nn.Module, device: torch.device) -> bool:
    """Whether any parameter or buffer (persistent or not) of ``module`` or its submodules is off
    ``device``: the module tree walked directly (``Module.parameters()``/``buffers()`` go through
    ``named_modules``' generators, 0.1 ms a client for the micro ResNet)."""
    for tensors in (module._parameters, module._buffers):
        for t in tensors.values():
            if t is not None and t.device != device:
                return True
    return any(
        _off_device(child, device) for child in module._modules.values() if child is not None
    )
