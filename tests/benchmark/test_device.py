"""The CUDA fast path (channels-last) sits behind one switch, DeviceConfig; checked here on the
CPU."""

from __future__ import annotations

import torch
from torch import nn

from benchmark.building_blocks import device as device_mod
from benchmark.building_blocks.device import DeviceConfig, prepare_module


def _fake_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)


def test_cpu_resolves_channels_last_off(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cfg = DeviceConfig()
    assert cfg.resolve() == torch.device("cpu") and not cfg.use_channels_last()
    assert not DeviceConfig(device="cpu", channels_last=True).use_channels_last()


def test_fake_cuda_resolves_channels_last_on_and_the_flag_switches_it_off(monkeypatch):
    _fake_cuda(monkeypatch)
    assert DeviceConfig().resolve() == torch.device("cuda") and DeviceConfig().use_channels_last()
    assert not DeviceConfig(channels_last=False).use_channels_last()
    assert DeviceConfig(device="cpu").resolve().type == "cpu"


def test_precision_is_a_cell_field_not_a_device_switch():
    """No device turns mixed precision on by itself (the old default: fp16 autocast without a scaler
    on CUDA)."""
    import dataclasses

    assert "amp" not in {f.name for f in dataclasses.fields(DeviceConfig)}


def test_prepare_module_channels_last_only_on_cuda(monkeypatch):
    net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8))
    out = prepare_module(net, torch.device("cpu"), channels_last=True)
    assert out is net and net[0].weight.is_contiguous()  # the CPU keeps NCHW whatever the flag
    # on "cuda" (the move itself faked: no GPU here) the 4-D weights switch to NHWC, and only when
    # asked
    monkeypatch.setattr(nn.Module, "to", _to_without_device(nn.Module.to))
    cl = prepare_module(nn.Conv2d(3, 8, 3), torch.device("cuda"), channels_last=True)
    assert (
        cl.weight.is_contiguous(memory_format=torch.channels_last) and not cl.weight.is_contiguous()
    )
    plain = prepare_module(nn.Conv2d(3, 8, 3), torch.device("cuda"), channels_last=False)
    assert plain.weight.is_contiguous()


def _to_without_device(orig):
    def to(self, *args, **kwargs):
        args = tuple(a for a in args if not isinstance(a, torch.device))
        return orig(self, *args, **kwargs) if (args or kwargs) else self

    return to


def test_runner_passes_the_switch_into_round_contexts(monkeypatch):
    """SimSettings.channels_last reaches every client and server context (what methods read)."""
    from benchmark.engine.rounds import SimSettings, client_context, server_context

    s = SimSettings(
        seed=0,
        num_rounds=1,
        local_epochs=1,
        per_round=1,
        device=torch.device("cpu"),
        channels_last=True,
    )
    assert client_context(s, 1, 0, None).channels_last and server_context(s, 1, None).channels_last
    assert not client_context(
        SimSettings(seed=0, num_rounds=1, local_epochs=1, per_round=1, device=torch.device("cpu")),
        1,
        0,
        None,
    ).channels_last
    assert device_mod.DeviceConfig is DeviceConfig
