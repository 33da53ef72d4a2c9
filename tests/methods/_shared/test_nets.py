"""methods/_shared/nets.py: the one backbone-plus-head module (its state-dict names are each
method's payload and digest names) and the one cache of working networks (seeded build, one per
role, reloaded at every use)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from benchmark.api import tensors_of
from benchmark.contracts.registries import METHODS, load_builtins
from benchmark.engine.stages import build_method
from methods._shared.nets import BackboneHead, WorkingNets
from tests.helpers import digits_inputs, smoke_cell

load_builtins()

# top-level state-dict names of each method's network, as in every payload, client state and
# final-state digest
TOP_LEVEL = {
    "fedavg_simclr": {"encoder", "projector"},
    "central_ssl": {"encoder", "projector"},
    "local_ssl": {"encoder", "projector"},
    "featarc": {"encoder", "projector"},
    "dec_sl": {"encoder", "classifier"},
    "flesd": {"backbone", "head"},
}
BRANCHES = {  # second level under each composite network's branches
    "orchestra": (
        {"online", "target", "rot_head"},
        {"online.backbone", "online.projector", "target.backbone", "target.projector"},
    ),
    "fedu": (
        {"online", "predictor", "target"},
        {"online.backbone", "online.projector", "target.backbone", "target.projector"},
    ),
    "fedema": (
        {"online", "predictor", "target"},
        {"online.backbone", "online.projector", "target.backbone", "target.projector"},
    ),
}


def built(name: str) -> nn.Module:
    method = build_method(smoke_cell(name, tasks=[]), digits_inputs())
    return method.build(10) if name == "dec_sl" else method.build()


@pytest.mark.parametrize("name", sorted(TOP_LEVEL))
def test_backbone_head_keeps_each_methods_tensor_names(name: str) -> None:
    net = built(name)
    assert isinstance(net, BackboneHead)
    assert {k.split(".")[0] for k in tensors_of(net)} == TOP_LEVEL[name]


@pytest.mark.parametrize("name", sorted(BRANCHES))
def test_branches_keep_backbone_and_projector_names(name: str) -> None:
    top, second = BRANCHES[name]
    keys = tensors_of(built(name))
    assert {k.split(".")[0] for k in keys} == top
    assert {
        ".".join(k.split(".")[:2]) for k in keys if k.startswith(("online.", "target."))
    } == second


def test_backbone_head_is_head_of_backbone() -> None:
    g = torch.Generator().manual_seed(0)
    body, head = nn.Linear(3, 4), nn.Linear(4, 2)
    net = BackboneHead(body, head, ("encoder", "classifier"))
    x = torch.randn(5, 3, generator=g)
    assert net.encoder is body and net.classifier is head and net.trunk is body and net.top is head
    assert torch.equal(net(x), head(body(x)))
    assert list(net.state_dict()) == [
        "encoder.weight",
        "encoder.bias",
        "classifier.weight",
        "classifier.bias",
    ]


class Counter:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def __call__(self, *key) -> nn.Module:
        self.calls.append(key)
        return nn.Linear(4, int(key[0]) if key else 3)


def test_working_nets_are_built_once_per_role_key_and_device() -> None:
    build = Counter()
    nets = WorkingNets(build)
    cpu = torch.device("cpu")
    a = nets.get(cpu)
    assert nets.get(cpu) is a and nets.structure() is a and len(build.calls) == 1
    m = nets.get(cpu, "momentum")
    assert (
        m is not a
        and nets.get(cpu, "momentum") is m
        and nets.get(cpu) is a
        and len(build.calls) == 2
    )
    # a new key rebuilds the role's module (Dec-SL: the number of classes)
    k5 = nets.get(cpu, key=(5,))
    assert k5.out_features == 5 and build.calls[-1] == (5,) and nets.get(cpu, key=(5,)) is k5


def test_working_nets_build_under_the_fixed_init_seed_and_leave_the_global_stream_alone() -> None:
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    one = WorkingNets(lambda: nn.Linear(6, 6)).get(torch.device("cpu"))
    assert torch.equal(torch.random.get_rng_state(), before)
    torch.manual_seed(456)  # another global state: the working module is the same
    two = WorkingNets(lambda: nn.Linear(6, 6)).get(torch.device("cpu"))
    assert all(torch.equal(one.state_dict()[k], v) for k, v in two.state_dict().items())


def test_structure_builds_a_cpu_module_only_when_the_role_has_none() -> None:
    build = Counter()
    nets = WorkingNets(build)
    s = nets.structure()
    assert next(s.parameters()).device.type == "cpu" and nets.get(torch.device("cpu")) is s
    assert len(build.calls) == 1


def test_every_method_uses_the_shared_cache() -> None:
    """No method keeps its own ``_net``/``_nets``/``_device`` cache: the working modules are
    ``self.nets``."""
    for name in METHODS.names():
        if name in {"no_pretrain", "pixels"}:  # reference points that build no working network
            continue
        method = build_method(smoke_cell(name, tasks=[]), digits_inputs())
        assert isinstance(method.nets, WorkingNets), name
        assert not {"_net", "_nets", "_device", "_key"} & set(vars(method)), name
