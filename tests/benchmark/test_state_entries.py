"""benchmark/building_blocks/tensors.py ``state_entries``: the entries of ``state_dict(keep_vars=True)``
(the same tensors, names and order, without ``num_batches_tracked``), walked directly where no
module customises its state dict; what ``tensors_of`` and ``load_tensors`` use once per client."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from benchmark.building_blocks.backbones import build_backbone
from benchmark.building_blocks.tensors import _walk, load_tensors, state_entries, tensors_of
from benchmark.contracts.registries import BACKBONES, load_builtins

load_builtins()


def reference(module: nn.Module) -> list[tuple[str, torch.Tensor]]:
    return [
        (k, v)
        for k, v in module.state_dict(keep_vars=True).items()
        if not k.endswith("num_batches_tracked")
    ]


def same(a, b) -> bool:
    """Same names in the same order, the same tensor objects (extra state, not a tensor, compares by
    value)."""
    return [k for k, _ in a] == [k for k, _ in b] and all(
        x is y if isinstance(y, torch.Tensor) else x == y for (_, x), (_, y) in zip(a, b)
    )


@pytest.mark.parametrize("name", BACKBONES.names())
def test_every_backbone_walks_to_its_state_dict(name: str) -> None:
    module, _ = build_backbone(name)
    assert same(state_entries(module), reference(module))
    assert _walk(module, "", [])  # the direct walk, not the fallback, for every built-in backbone


class Transient(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(2, 2)
        self.register_buffer("cache", torch.zeros(2), persistent=False)  # not in a state dict
        self.register_buffer("kept", torch.ones(2))
        self.shared = self.lin  # one module under two names: both appear, as in state_dict
        self.none = None


def _drop_kept(module, sd, prefix, local) -> None:
    del sd[prefix + "kept"]


class Renamed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = Transient()
        # a hook changes the entries: state_dict decides
        self.inner.register_state_dict_post_hook(_drop_kept)


class Extra(nn.Linear):
    def get_extra_state(self):
        return {"step": 1}


@pytest.mark.parametrize(
    "make",
    [Transient, Renamed, lambda: nn.Sequential(Extra(2, 2), nn.BatchNorm1d(2))],
    ids=["non_persistent_and_shared", "state_dict_hook", "extra_state"],
)
def test_customised_state_dicts_agree(make) -> None:
    module = make()
    assert same(state_entries(module), reference(module))


def test_a_copy_out_and_back_in_is_exact_and_checks_every_entry() -> None:
    a, _ = build_backbone("resnet_micro", {"width": 4})
    b, _ = build_backbone("resnet_micro", {"width": 4})
    for p in a.parameters():
        p.data.normal_()
    out = tensors_of(a, "encoder.")
    assert all(t.device.type == "cpu" for t in out.values())
    # copies
    assert not {t.data_ptr() for t in out.values()} & {v.data_ptr() for _, v in reference(a)}
    load_tensors(b, out, "encoder.")
    assert all(torch.equal(x, y) for (_, x), (_, y) in zip(reference(a), reference(b)))
    del out["encoder.fc.bias" if "encoder.fc.bias" in out else next(iter(out))]
    with pytest.raises(KeyError, match="missing tensor"):
        load_tensors(b, out, "encoder.")
