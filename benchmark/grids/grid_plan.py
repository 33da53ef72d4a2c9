"""``plan``: what a grid costs before it runs — cells, rounds, client steps, images and estimated
GPU-hours, then the whole grid's cost (pre-training, server steps, downstream tasks, COCO detection)
as a range on one H200 with its assumptions (``benchmark.grids.cost``).

Client steps are counted as the engine runs them (rounds × clients per round × local epochs ×
batches of an average client; one client holding all the data for a pooled method), with each
cell's forward FLOPs per image (torch's FlopCounterMode at the dataset's resolution). The grid's
cost is one figure, ``benchmark.grids.cost``'s (pre-training, server steps, tasks and detection on
one H200, with its assumptions). :func:`estimate_hours` (a cell's training FLOPs at 40 % of an
A100's dense peak in its precision, or ``--throughput`` images/s) is kept only to order and weigh
the calibration's configurations and as the calibration report's comparison column; ``plan`` prints
it nowhere. Cells of methods that train nothing (``MethodBase.pretrains = False``: random init,
calibrated BN) cost no pre-training.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import torch

from benchmark.grids.work import (  # re-exported: plan's sizes are the work module's
    IMAGE_SIZES,
    NUM_CLASSES,
    TRAIN_SIZES,
    client_work,
    image_size,
)

if TYPE_CHECKING:
    from benchmark.contracts.cell import Cell

UTILISATION = 0.4
PEAK_FLOPS = {"fp32": 156e12, "bf16": 312e12, "fp16": 312e12}  # A100 dense (fp32 as TF32)


@lru_cache(maxsize=64)
def forward_flops(backbone: str, params_json: str, size: int) -> float:
    import json

    from torch.utils.flop_counter import FlopCounterMode

    from benchmark.building_blocks.backbones import build_backbone
    from benchmark.contracts.registries import BACKBONES

    module, _ = build_backbone(backbone, json.loads(params_json))
    module.eval()
    # convolutional backbones are counted on the meta device (shapes only, no arithmetic: the same
    # count in a tenth of the time); a ViT's attention is counted by the kernel it dispatches to on
    # the CPU, which the meta device does not reproduce
    meta = getattr(BACKBONES.get(backbone), "family", "") == "resnet"
    device = torch.device("meta" if meta else "cpu")
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        module.to(device)(torch.zeros(2, 3, size, size, device=device))
    return counter.get_total_flops() / 2


# passes of the backbone per training image: (with backward, without); see the module docstring
TRAIN_PASSES: Mapping[str, tuple[int, int]] = {
    "fedavg_simclr": (2, 0),  # fedavg_simclr.md: two augmented views, NT-Xent
    "central_ssl": (2, 0),  # the same SimCLR step on the pooled data
    "local_ssl": (2, 0),
    "flesd": (2, 0),  # flesd.md §2.3: local SimCLR
    "fedu": (2, 2),  # fedu.md: BYOL, online on both views, target on both
    "fedema": (2, 2),  # fedema.md: the same BYOL step
    "orchestra": (2, 1),  # orchestra.md §2.2: online on views 2 and 3 (rotation), target on view 1
    "featarc": (2, 0),  # featarc.md §2.3: SimCLR's two views (+1 with view_and_clean)
    "dec_sl": (1, 0),  # supervised FedAvg: one view
}


def backbone_flops(cell: Cell, size: int) -> float:
    params = json.dumps(dict(cell.backbone.params), sort_keys=True)
    return forward_flops(cell.backbone.name, params, size)


@lru_cache(maxsize=32)
def mae_train_flops(backbone: str, params_json: str, mask_ratio: float) -> float:
    """FLOPs of one FedMAE client image with backward: 3 × the one-block masked auto-encoder's
    forward (the encoder on the visible patches, the decoder on all), counted by FlopCounterMode."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from benchmark.contracts.registries import BACKBONES
    from benchmark.core.config import from_mapping

    spec = from_mapping(BACKBONES.get(backbone), json.loads(params_json))
    model = spec.build_mae(1).eval()
    n = (spec.img_size // spec.patch_size) ** 2
    keep = int(n * (1 - mask_ratio))
    x = torch.zeros(2, 3, spec.img_size, spec.img_size)
    ids = torch.arange(n).repeat(2, 1)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model.forward_masked(x, ids, keep)
    return 3 * counter.get_total_flops() / 2


def train_flops_per_image(cell: Cell) -> float:
    """FLOPs one training image costs the cell's method (module docstring)."""
    name = cell.method.name
    if name == "fedmae":
        params = json.dumps(dict(cell.backbone.params), sort_keys=True)
        ratio = float(cell.method.params.get("mask_ratio", 0.75))
        return mae_train_flops(cell.backbone.name, params, ratio)
    grad, nograd = TRAIN_PASSES.get(name, (2, 0))  # an unknown method: a two-view SSL step
    if name == "featarc" and cell.method.params.get("align_views") == "view_and_clean":
        grad += 1
    return (3 * grad + nograd) * backbone_flops(cell, image_size(cell))


def cell_cost(cell: Cell) -> dict[str, float]:
    """A cell's pre-training: client steps, client images (each through all of its method's views)
    and training FLOPs from the per-method model (:func:`train_flops_per_image`: BYOL's target network,
    FedMAE's visible patches, a pooled method's data never divided by the client count)."""
    import json

    from benchmark.contracts.registries import METHODS

    size = int(cell.dataset.params.get("size", IMAGE_SIZES.get(cell.dataset.name, 32)))
    flops = forward_flops(
        cell.backbone.name, json.dumps(dict(cell.backbone.params), sort_keys=True), size
    )
    if not METHODS.get(cell.method.name).pretrains:
        return {"client_steps": 0, "images": 0, "train_flops": 0.0, "fwd_flops": flops}
    images, updates, per_update = client_work(cell)
    batch = int(cell.method.params.get("batch_size", 256))
    batches = max(1, math.floor(per_update / batch)) if per_update > batch else 1
    return {
        "client_steps": int(updates * cell.fl.local_epochs * batches),
        "images": images,
        "train_flops": images * train_flops_per_image(cell),
        "fwd_flops": flops,
    }


def estimate_hours(cell: Cell, throughput: float | None = None) -> float:
    """The fixed estimate of a cell's pre-training GPU-hours: its images at ``throughput`` images/s,
    else its training FLOPs at 40 % of an A100's dense peak in the cell's precision."""
    c = cell_cost(cell)
    if throughput:
        return c["images"] / throughput / 3600
    return c["train_flops"] / (UTILISATION * PEAK_FLOPS[cell.precision]) / 3600


def plan_grid(grid: Any, cells: Sequence[Cell], throughput: float | None = None) -> str:
    """The cells of ``plan``: rounds, client steps, forward GFLOP per image and precision, then the
    total client steps (``--throughput`` images/s: the pre-training's hours at that rate). The
    grid's cost is the one figure of ``benchmark.grids.cost`` printed after it."""
    lines = [f"grid {grid.name!r}: {len(cells)} cells"]
    total_steps = total_images = 0.0
    for cell in cells:
        c = cell_cost(cell)
        precision = getattr(cell, "precision", "fp32")
        total_steps += c["client_steps"]
        total_images += c["images"]
        lines.append(
            f"  {cell.cell_id}  rounds={cell.fl.rounds:<4d} steps={int(c['client_steps']):<8d} "
            f"GFLOP/img={c['fwd_flops'] / 1e9:<8.3f} {precision}  {cell.label()}"
        )
    summary = f"pre-training: {int(total_steps)} client steps, {int(total_images):,} images"
    if throughput:
        summary += f", {total_images / throughput / 3600:.2f} hours at {throughput:g} images/s"
    lines.append(summary)
    return "\n".join(lines)


__all__ = [
    "IMAGE_SIZES",
    "NUM_CLASSES",
    "PEAK_FLOPS",
    "TRAIN_PASSES",
    "TRAIN_SIZES",
    "UTILISATION",
    "backbone_flops",
    "cell_cost",
    "estimate_hours",
    "forward_flops",
    "mae_train_flops",
    "plan_grid",
    "train_flops_per_image",
]
