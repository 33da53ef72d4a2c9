"""Unlabeled client views: uint8 images in memory, batched on the model's device. No label is
reachable here."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, overload

import numpy as np
import torch

from benchmark.contracts.unlabeled_view import UnlabeledView
from benchmark.core.host_to_device import host_rows, pins

if TYPE_CHECKING:
    from benchmark.contracts.types import ClientData


class ClientViews(Sequence["ClientData"]):
    """The clients' data, built when asked for: ``views[k]`` gathers client k's images (and labels,
    for methods that declare them) from the shared training tensor on each access. Only the index
    arrays are kept, so registered clients cost nothing until sampled; each access returns equal
    data (a fresh copy). ``device``: where the views will train; bound for CUDA, each client's images
    are gathered straight into pinned memory, so the copy to the device makes the host wait for
    nothing and there is no second host copy (``benchmark.core.host_to_device.host_rows``)."""

    def __init__(
        self,
        images: torch.Tensor,
        shards: Sequence[np.ndarray],
        mean: tuple[float, ...],
        std: tuple[float, ...],
        labels: np.ndarray | None = None,
        num_classes: int = 0,
        *,
        device: torch.device | str | None = None,
    ) -> None:
        self.images = images
        self.shards = tuple(shards)
        self.mean = tuple(mean)
        self.std = tuple(std)
        self.labels = labels
        self.num_classes = num_classes
        self.device = device

    def __len__(self) -> int:
        return len(self.shards)

    def num_examples(self, k: int) -> int:
        """``self[k].num_examples`` without gathering the client's images."""
        return len(self.shards[range(len(self))[k]])

    @overload
    def __getitem__(self, k: int) -> ClientData: ...

    @overload
    def __getitem__(self, k: slice) -> list[ClientData]: ...

    def __getitem__(self, k: int | slice) -> ClientData | list[ClientData]:
        from benchmark.contracts.types import ClientData

        if isinstance(k, slice):
            return [self[i] for i in range(len(self))[k]]
        k = range(len(self))[k]  # bounds and negative indices as for a list
        idx = self.shards[k]
        rows = host_rows(self.images, torch.as_tensor(idx, dtype=torch.long), self.device)
        view = UnlabeledView(rows, self.mean, self.std)
        labels = torch.as_tensor(self.labels[idx]) if self.labels is not None else None
        return ClientData(k, len(idx), view, labels, self.num_classes)


def staged(
    clients: Sequence[ClientData], order: Sequence[int], device: torch.device | str
) -> Iterator[tuple[int, ClientData]]:
    """``(k, clients[k])`` for each ``k`` of ``order``. Bound for a device whose copies leave from pinned
    memory (CUDA), each client's data is gathered on a helper thread while the client before it
    trains (the gather releases the GIL), so a round's clients after the first start with their
    data ready on the host; the same data either way. Elsewhere, gathered when asked, as before."""
    if not pins(device) or len(order) < 2:
        for k in order:
            yield k, clients[k]
        return
    with ThreadPoolExecutor(1, thread_name_prefix="fssl-stage") as pool:
        ahead = pool.submit(clients.__getitem__, order[0])
        for i in range(len(order)):
            data = ahead.result()
            if i + 1 < len(order):
                ahead = pool.submit(clients.__getitem__, order[i + 1])
            yield order[i], data
