"""methods/_shared/aggregate.py ``average_uploads``: FedAvg of the uploads, in client-id order
(weighted_average and aggregation_weights are tested in test_fedavg_simclr.py,
docs/methods/fedavg_simclr.md §9.3)."""

from __future__ import annotations

import pytest
import torch

from benchmark.api import average_uploads, weighted_average
from benchmark.contracts.types import Payload


def up(value: float, n: int) -> Payload:
    return Payload({"w": torch.full((2, 2), value), "b": torch.full((3,), -value)}, num_examples=n)


@pytest.mark.parametrize(
    "mode, expected", [("num_examples", (1 * 1 + 3 * 5) / 4), ("uniform", 3.0)]
)
def test_weights_by_mode(mode: str, expected: float) -> None:
    out = average_uploads({0: up(5.0, 3), 7: up(1.0, 1)}, mode)
    assert torch.allclose(out["w"], torch.full((2, 2), expected)) and torch.allclose(
        out["b"], -out["b"].new_full((3,), expected)
    )


def test_client_id_order_whatever_the_mapping_order() -> None:
    g = torch.Generator().manual_seed(0)
    ups = {
        k: Payload({"w": torch.randn(4, generator=g), "id": torch.tensor(k)}, num_examples=k + 1)
        for k in (3, 0, 2)
    }
    out = average_uploads(ups, "num_examples")
    assert int(out["id"]) == 0  # integer tensors come from the first upload: the lowest client id
    ordered = [ups[k] for k in (0, 2, 3)]
    ref = weighted_average([p.tensors for p in ordered], [1 / 8, 3 / 8, 4 / 8])
    assert torch.equal(out["w"], ref["w"])
    assert torch.equal(average_uploads(dict(sorted(ups.items())), "num_examples")["w"], out["w"])
