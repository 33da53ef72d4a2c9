"""The unlabeled view a method trains on: uint8 images batched on the model's device, no labels."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from benchmark.core.host_to_device import Shipment, to_device


@dataclass(frozen=True, eq=False)
class UnlabeledView:
    """A set of images (N, 3, H, W) uint8. ``mean``/``std`` are the normalisation the encoder will
    use."""

    images: torch.Tensor
    mean: tuple[float, ...]
    std: tuple[float, ...]

    def __post_init__(self) -> None:
        if self.images.dtype != torch.uint8 or self.images.ndim != 4:
            raise TypeError(
                f"images must be uint8 (N, C, H, W), got {self.images.dtype} {tuple(self.images.shape)}"
            )

    def __len__(self) -> int:
        return int(self.images.shape[0])

    @property
    def image_size(self) -> int:
        return int(self.images.shape[-1])

    def to(self, device: torch.device | str) -> UnlabeledView:
        device = torch.device(device)
        if self.images.device == device:
            return self
        # from pinned memory on CUDA (a client's view is gathered pinned: ClientViews), no wait
        return UnlabeledView(to_device(self.images, device), self.mean, self.std)

    def batch_indices(
        self,
        batch_size: int,
        generator: torch.Generator,
        *,
        drop_last: bool | None = None,
        shuffle: bool = True,
    ) -> list[torch.Tensor]:
        """Index batches for one epoch. ``drop_last=None`` is the Dec-SSL rule: drop a partial batch
        only if n > B.

        Batches of size 1 are always dropped (BatchNorm cannot train on them).
        """
        # DEVIATION: also where a method's official loader keeps a partial last batch (FLESD's local
        # SimCLR,
        # drop_last False): one image gives no contrastive signal and a one-sample BatchNorm batch
        n = len(self)
        order = torch.randperm(n, generator=generator) if shuffle else torch.arange(n)
        if drop_last is None:
            drop_last = n > batch_size
        batches = list(order.split(batch_size))
        if drop_last and batches and len(batches[-1]) < batch_size:
            batches.pop()
        return [b for b in batches if len(b) > 1]

    def batches(
        self,
        batch_size: int,
        generator: torch.Generator,
        *,
        device: torch.device | str = "cpu",
        drop_last: bool | None = None,
        shuffle: bool = True,
    ) -> Iterator[torch.Tensor]:
        """uint8 batches on ``device`` (the data is moved once; augmentation then runs on the
        device)."""
        view = self.to(device)
        for idx in self.batch_indices(batch_size, generator, drop_last=drop_last, shuffle=shuffle):
            yield view.images[to_device(idx, view.images.device)]

    def normalize(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 → float, scaled to [0, 1] and normalised with the view's statistics."""
        return normalize(images, self.mean, self.std)


def normalize(
    images: torch.Tensor, mean: tuple[float, ...], std: tuple[float, ...]
) -> torch.Tensor:
    x = images.float() / 255.0 if images.dtype == torch.uint8 else images
    # the statistics reach the device in one non-blocking copy (the same values as
    # torch.tensor(mean, dtype=x.dtype))
    ship = Shipment()
    pm, ps = ship.add(mean, x.dtype), ship.add(std, x.dtype)
    got = ship.send(x.device)
    return (x - got[pm].view(1, -1, 1, 1)) / got[ps].view(1, -1, 1, 1)
