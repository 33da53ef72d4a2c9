"""Device policy behind one switch: CUDA when present, with AMP and channels-last; plain fp32 on the CPU."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch


@dataclass(frozen=True, kw_only=True)
class DeviceConfig:
    device: str = "auto"  # "auto" | "cpu" | "cuda" | "cuda:N"
    amp: bool = True  # mixed precision, only ever on CUDA
    channels_last: bool = True  # only ever on CUDA

    def resolve(self) -> torch.device:
        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return torch.device(self.device)

    def use_amp(self) -> bool:
        return self.amp and self.resolve().type == "cuda"

    def use_channels_last(self) -> bool:
        return self.channels_last and self.resolve().type == "cuda"


def autocast(device: torch.device, enabled: bool) -> contextlib.AbstractContextManager:
    if enabled and device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.float16)
    return contextlib.nullcontext()
