"""The one backbone-plus-head module and the one cache of working networks that every method uses.

``BackboneHead`` replaces the per-method copies (FedAvg-SimCLR's encoder/projector, Dec-SL's
encoder/classifier, FLESD's backbone/head, Orchestra's and BYOL's backbone/projector branches). Its
two children keep the names each method's state dicts have always used
(``encoder.*``/``projector.*``, ``backbone.*``/``head.*``, …): payload names, client states and the
final-state digest are keyed by them.

``WorkingNets`` holds the modules a method computes with inside one hook. They carry no state from
one hook to the next: every use reloads them from tensors (payloads, client or server state), so a
method object can be rebuilt at any time (resume) without changing a number.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

import torch
from torch import nn

from benchmark.api import Stream, prepare_module, scoped_torch_seed


class BackboneHead(nn.Module):
    """``head(backbone(x))``, the two children registered under ``names`` (default
    ``backbone``/``head``)."""

    def __init__(
        self, backbone: nn.Module, head: nn.Module, names: tuple[str, str] = ("backbone", "head")
    ) -> None:
        super().__init__()
        self._names = names
        self.add_module(names[0], backbone)
        self.add_module(names[1], head)

    @property
    def trunk(self) -> nn.Module:
        """The backbone, whatever its attribute name (``net.encoder`` / ``net.backbone`` read the
        same)."""
        return getattr(self, self._names[0])

    @property
    def top(self) -> nn.Module:
        """The head, whatever its attribute name (``net.projector`` / ``net.head`` /
        ``net.classifier``)."""
        return getattr(self, self._names[1])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.top(self.trunk(x))


class WorkingNets:
    """Working modules of one method instance: one per ``role`` (e.g. FLESD's ``model`` and
    ``momentum``), built by ``build(*key)`` under ``scoped_torch_seed(0, Stream.INIT, 0)`` the first
    time a (role, key, device) is asked for and rebuilt when the key or device of that role changes.
    Callers load every tensor before use."""

    def __init__(self, build: Callable[..., nn.Module]) -> None:
        self._build = build
        self._cache: dict[str, tuple[tuple[Hashable, ...], torch.device, nn.Module]] = {}

    def get(
        self,
        device: torch.device,
        role: str = "model",
        key: tuple[Hashable, ...] = (),
        *,
        channels_last: bool = True,
    ) -> nn.Module:
        """The ``role`` module on ``device``; on CUDA its convolution weights in channels-last
        layout unless ``channels_last`` is False (``prepare_module``, the one place every method's
        networks go through; nothing changes on the CPU)."""
        hit = self._cache.get(role)
        if hit is None or hit[0] != key or hit[1] != device:
            with scoped_torch_seed(0, Stream.INIT, 0):
                net = prepare_module(self._build(*key), device, channels_last=channels_last)
            hit = self._cache[role] = (key, device, net)
        return hit[2]

    def structure(self, role: str = "model", key: tuple[Hashable, ...] = ()) -> nn.Module:
        """A module to read names and shapes from: the cached one of ``role`` (any device), else a
        CPU one."""
        hit = self._cache.get(role)
        if hit is not None and hit[0] == key:
            return hit[2]
        return self.get(torch.device("cpu"), role, key)
