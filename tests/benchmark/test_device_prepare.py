"""``prepare_module`` skips ``Module.to`` for a module already on the device (issue 23, P8)."""

from __future__ import annotations

import torch

from benchmark.building_blocks.device import prepare_module


def test_module_on_the_device_is_not_moved_and_one_elsewhere_is(monkeypatch) -> None:
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4))
    calls = []
    real = torch.nn.Module.to

    def counting(self, *a, **kw):
        calls.append(a)
        return real(self, *a, **kw)

    monkeypatch.setattr(torch.nn.Module, "to", counting)
    assert prepare_module(net, torch.device("cpu"), channels_last=False) is net and calls == []
    moved = prepare_module(net, torch.device("meta"), channels_last=False)
    assert len(calls) == 1 and all(p.device.type == "meta" for p in moved.parameters())
    net2 = torch.nn.Linear(2, 2, device="meta")
    net2.register_buffer("b", torch.zeros(1))  # one tensor elsewhere is enough to move
    prepare_module(net2, torch.device("meta"), channels_last=False)
    assert len(calls) == 2 and net2.b.device.type == "meta"
