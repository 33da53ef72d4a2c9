"""Issue 56 item 1: `plan` prices what runs. Its figure is recounted here from first principles:
torch's FLOP counter over a real forward and backward of the methods' passes (not the model's 3 F
rule), the detection backbone counted at its full 800 x 1,216 input (not scaled from 224 px), and
the hours at the peak of the precision the runner's evaluation flags actually select. plan's low
and high ends must each be within 1.3x of the recount."""

from __future__ import annotations

import json

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from benchmark.building_blocks.backbones import build_backbone
from benchmark.commands.run import load_cells
from benchmark.core.precision import EVALUATION_PRECISION, cuda_precision
from benchmark.grids import cost
from benchmark.grids.grid_plan import TRAIN_SIZES, train_flops_per_image
from benchmark.grids.work import client_work, image_size

TOLERANCE = 1.3


def _backbone(cell, device: str = "cpu") -> torch.nn.Module:
    module, _ = build_backbone(cell.backbone.name, json.loads(json.dumps(cell.backbone.params)))
    return module.to(device)


def _counted(fn) -> float:
    with FlopCounterMode(display=False) as counter:
        fn()
    return float(counter.get_total_flops())


def recount_train_per_image(cell) -> float:
    """One training image's FLOPs, counted over the method's real passes at batch 4: every view
    with a gradient through forward and backward, a target network's views forward only."""
    online, target = {"fedavg_simclr": (2, 0), "fedu": (2, 2), "dec_sl": (1, 0)}[cell.method.name]
    model, size, batch = _backbone(cell).train(), image_size(cell), 4

    def step() -> None:
        loss = sum(model(torch.randn(batch, 3, size, size)).float().sum() for _ in range(online))
        loss.backward()
        with torch.no_grad():
            for _ in range(target):
                model(torch.randn(batch, 3, size, size))

    return _counted(step) / batch


def recount_forward(cell, height: int, width: int) -> float:
    model = _backbone(cell, "meta").eval()
    with torch.no_grad():
        return _counted(lambda: model(torch.zeros(1, 3, height, width, device="meta")))


def eval_peak_name() -> str:
    """The peak the evaluation runs at, read from the flags the runner sets for it (not from the
    cost model): TF32 allowed for cuDNN convolutions and matrix products means the TF32 peak."""
    flags = cuda_precision(EVALUATION_PRECISION)
    return "tf32" if flags.tf32_cudnn and flags.tf32_matmul else "fp32"


def recount_hours(cells) -> tuple[float, float]:
    """(low, high) H200-hours of ``cells`` from the counts above (tasks: one counted forward per
    embedded image; detection: the counted full-size backbone plus the heads' published range,
    forward and backward)."""
    peaks = cost.DEVICES["H200"]
    lo = hi = 0.0
    for cell in cells:
        images = client_work(cell)[0]
        train = images * recount_train_per_image(cell) if images else 0.0
        size = image_size(cell)
        fwd = recount_forward(cell, size, size)
        n = TRAIN_SIZES[cell.dataset.name] + cost.TEST_SIZES[cell.dataset.name]
        tasks = 0.0
        for t in cell.tasks:
            if t.name in ("knn", "linear_probe", "perclient"):  # perclient: one global encoder
                tasks += n * fwd
            elif t.name == "semi_supervised":
                tasks += 2000 * 64 * 3 * fwd + cost.TEST_SIZES[cell.dataset.name] * fwd
        eval_peak = peaks[eval_peak_name()]
        for u, acc in ((cost.UTILISATION[1], "lo"), (cost.UTILISATION[0], "hi")):
            h = train / (u * peaks[cell.precision]) + tasks / (u * eval_peak)
            if acc == "lo":
                lo += h
            else:
                hi += h
        if any(t.name == "coco_detection" for t in cell.tasks):
            backbone = recount_forward(cell, 800, 1216)
            work = [3 * 90000 * 16 * (backbone + heads) for heads in cost.DETECTION_HEADS_FLOPS]
            lo += work[0] / (cost.DETECTION_UTILISATION[1] * eval_peak)
            hi += work[1] / (cost.DETECTION_UTILISATION[0] * eval_peak)
    return lo / 3600, hi / 3600


def within(a: float, b: float) -> bool:
    return 1 / TOLERANCE <= a / b <= TOLERANCE


@pytest.mark.parametrize("method", ["fedavg_simclr", "fedu", "dec_sl"])
def test_a_training_image_costs_what_the_flop_counter_counts(method: str) -> None:
    cell = load_cells("main", only=f"method={method},dataset=cifar10", seeds=[0])[1][0]
    assert within(train_flops_per_image(cell), recount_train_per_image(cell))


def test_plan_prices_the_evaluation_at_the_precision_the_runner_sets() -> None:
    assert cost.EVAL_PRECISION == EVALUATION_PRECISION
    assert eval_peak_name() == EVALUATION_PRECISION  # the name plan prices is the flags' peak


@pytest.mark.parametrize(
    "only",
    [
        "method=fedavg_simclr,dataset=cifar10,partition=iid",  # pre-training and every task
        "method=fedu,dataset=imagenet100,partition=iid",  # ImageNet-100 and COCO detection
    ],
)
def test_plans_figure_is_within_1_3x_of_a_first_principles_recount(only: str) -> None:
    cells = load_cells("main", only=only, seeds=[0])[1]
    assert cells
    lo, hi = cost.grid_hours(cells)["total"]
    rlo, rhi = recount_hours(cells)
    assert within(lo, rlo) and within(hi, rhi), (lo, rlo, hi, rhi)
