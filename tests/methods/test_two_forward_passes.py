"""Two views, two forward passes (docs/methods/fedavg_simclr.md §2.2 "z1 = g(f(v1)); z2 = g(f(v2))", docs/methods/flesd.md §2.6.2, the official
code): BatchNorm in training mode never sees the two views of a batch as one batch of 2B images."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from benchmark.conformance import smoke_cell
from benchmark.rundir import PretrainDir
from benchmark.stages import prepare, pretrain

TWO_VIEW_METHODS = ["fedavg_simclr", "central_ssl", "local_ssl", "featarc", "flesd", "fedu", "fedema", "orchestra"]


@pytest.mark.parametrize("name", TWO_VIEW_METHODS)
def test_batchnorm_never_sees_both_views_in_one_batch(name: str, tmp_path: Path) -> None:
    cell = smoke_cell(name, rounds=2 if name == "orchestra" else 1, tasks=[])
    limit = max(int(v) for k, v in cell.method.params.items() if k.endswith("batch_size"))
    seen: list[int] = []

    def hook(module: nn.Module, args: tuple) -> None:
        if isinstance(module, nn.modules.batchnorm._BatchNorm) and module.training and args[0].dim() == 4:
            seen.append(int(args[0].shape[0]))

    handle = nn.modules.module.register_module_forward_pre_hook(hook)
    try:
        pre = pretrain(prepare(cell), PretrainDir(tmp_path))
    finally:
        handle.remove()
    assert pre is not None and pre.status == "ok"
    assert seen, "no BatchNorm ran in training mode"
    assert max(seen) <= limit, (name, limit, sorted(set(seen)))
