"""What a cell costs, all of it: the clients' pre-training, the server's own steps, every downstream
task and COCO detection, in floating-point operations from a per-method model, and in device-hours
as a range on a named accelerator.

**Unit.** ``F`` is one forward pass of the cell's backbone on one image at the training resolution,
counted by torch's FlopCounterMode (``benchmark.grids.grid_plan: forward_flops``; a multiply-add is two
operations). A pass with a backward costs 3 F (forward, then gradients for activations and
weights); a pass without one (a target network, inference) 1 F. Projector, predictor and linear
heads are left out (a few per cent of a ResNet-18 forward at 32 px, less at 224 px).

**Pre-training, per training image** (each method's reference page in docs/methods/; :data:`TRAIN_PASSES`):
SimCLR family (FedAvg-SimCLR, central_ssl, local_ssl, FLESD's local step) 2 views with backward =
6 F; BYOL (FedU, FedEMA) 2 online views with backward + the target network on both views = 8 F;
Orchestra the online network on view 2 and on the rotated view 3 with backward + the target on view
1 = 7 F; FeatARC 2 views with backward (+ the clean view with ``align_views: view_and_clean``);
Dec-SL one supervised view = 3 F. FedMAE's client is counted from its own model: the encoder on the
visible patches only and its light decoder on every patch, FlopCounterMode over
``forward_masked`` (:func:`mae_train_flops`). Training images are the cell's client work
(``benchmark.calibration.projection: client_work``: rounds × clients trained per round × local epochs ×
mean client size; a pooled method trains one client holding all the data, never divided by the
client count).

**Server steps, per round**: FLESD's clients embed the public split (1 F an image each) and the
server distils for ``distill_epochs`` over it (the student's view with backward + the momentum
encoder's = 4 F an image); FeatARC's sampled clients score each of the C cluster models and their
previous local model on their data (C + 1 forward passes over it). FedAvg's averaging, Orchestra's
clustering and the checkpoints are small beside these and left out.

**Downstream tasks** at the dataset's resolution: kNN and the linear probe embed the train and test
splits once each (the probe's head training on cached features is left out); semi-supervised
fine-tuning takes its card's 2,000 steps of 64 images with backward, then embeds the test split;
the per-client probe embeds train and test once per distinct client encoder (K for local_ssl, C for
FeatARC, else 1); the end-to-end classifier and the reconstruction score embed the test split; the
transfer probe embeds STL-10 (5,000 + 8,000) at 32 px. **COCO detection**: Mask R-CNN R18-FPN, 90,000
iterations of 16 images (the task's ``decssl_1x`` preset) at about 800 × 1,216 px: the cell's
backbone counted at that size plus :data:`DETECTION_HEADS_FLOPS` for the FPN, RPN and the box and
mask heads, 3× for the backward.

**Hours** are FLOPs at a utilisation range of the device's dense peak (:data:`DEVICES`,
:data:`UTILISATION`): pre-training and server steps in the cell's precision, tasks and detection
(no autocast) at :data:`EVAL_PRECISION`; :func:`assumptions` says all of this in one list, printed
with every figure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from benchmark.core.precision import EVALUATION_PRECISION
from benchmark.grids.grid_plan import (
    TRAIN_PASSES,
    TRAIN_SIZES,
    backbone_flops,
    mae_train_flops,
    train_flops_per_image,
)
from benchmark.grids.work import client_work, image_size, train_images

if TYPE_CHECKING:
    from benchmark.contracts.cell import Cell

# Mask R-CNN R18-FPN at 800 x 1,216: what is not the backbone (FPN, RPN, the box and mask heads),
# forward FLOPs (2 a multiply-add). mmdetection's get_flops, which counts multiply-adds, gives about
# 275 G for Mask R-CNN R50-FPN at 1,280 x 800, of which ResNet-50 is about 84 G (4.1 G at 224 px by
# the pixels): the rest is about 190 G multiply-adds, 380 GFLOPs; on ResNet-18's narrower features
# the FPN is lighter, hence a range. An assumption from published counts, not a count of our code
DETECTION_HEADS_FLOPS = (240e9, 380e9)
DETECTION_PIXELS = 800 * 1216
DETECTION_SCHEDULE = {"decssl_1x": (90000, 16), "cpu_smoke": (5, 2)}  # tasks/coco_detection PRESETS
TEST_SIZES = {
    "digits": 359,
    "cifar10": 10000,
    "cifar100": 10000,
    "stl10": 8000,
    "tiny_imagenet": 10000,
    "imagenet100": 5000,
    "mini_imagenet": 10000,
}
TRANSFER_IMAGES = 5000 + 8000  # STL-10 labelled train + test, embedded at 32 px
SEMISUP = (2000, 64)  # semisup@v1: steps, batch
# dense peak FLOP/s per precision; fp32 is true fp32 (the cells' fp32 is fp32 unless they ask tf32)
DEVICES: Mapping[str, Mapping[str, float]] = {
    "H200": {"bf16": 989e12, "fp16": 989e12, "tf32": 494e12, "fp32": 67e12},
    "A100": {"bf16": 312e12, "fp16": 312e12, "tf32": 156e12, "fp32": 19.5e12},
}
# achieved share of that peak: small images and federated rounds keep it low (kernel launches,
# augmentation, aggregation between short local loops); the range is an assumption, not a measurement
UTILISATION = (0.10, 0.30)
# Detectron2's share of the peak: an assumption, lower than the pre-training's (data loading at 800 px,
# ROI ops, the CPU side grow slower than tensor-core peaks); a cross-check is Detectron2's model zoo,
# Mask R-CNN R50-FPN 1x at 0.261 s an iteration on 8 V100s, 52 V100-hours a run
DETECTION_UTILISATION = (0.05, 0.20)
# the tasks and Detectron2 run under the evaluation policy the runner sets (fp32 tensors, no
# autocast, TF32 tensor cores on CUDA: benchmark.core.precision.EVALUATION_PRECISION), so they are
# priced at its peak; one name for both, so the price cannot drift from what runs
EVAL_PRECISION = EVALUATION_PRECISION


@dataclass(frozen=True)
class CellWork:
    """A cell's FLOPs by part; ``precision`` decides the device's peak."""

    method: str
    precision: str
    pretrain: float = 0.0
    server: float = 0.0
    tasks: Mapping[str, float] = field(default_factory=dict)  # by task name, detection apart
    detection: tuple[float, float] = (0.0, 0.0)  # a range (the heads' cost is)

    @property
    def parts(self) -> dict[str, tuple[float, float]]:
        tasks = sum(self.tasks.values())
        return {
            "pretrain": (self.pretrain, self.pretrain),
            "server": (self.server, self.server),
            "tasks": (tasks, tasks),
            "detection": self.detection,
        }

    def total(self) -> tuple[float, float]:
        lo = sum(v[0] for v in self.parts.values())
        hi = sum(v[1] for v in self.parts.values())
        return lo, hi


def server_flops(cell: Cell, f: float) -> float:
    """The server's steps over the whole pre-training (module docstring), ``f`` = F."""

    rounds, per_round = cell.fl.rounds, cell.fl.clients_per_round
    if cell.method.name == "flesd":
        public = _public_size(cell)
        epochs = int(cell.method.params.get("distill_epochs", 200))
        return rounds * (per_round * public * f + epochs * public * 4 * f)
    if cell.method.name == "featarc":
        clusters = int(cell.method.params.get("num_clusters", 2))
        mean = train_images(cell) / cell.fl.num_clients  # every image is some client's
        return rounds * per_round * (clusters + 1) * mean * f
    return 0.0


def _public_size(cell: Cell) -> int:

    if cell.public is None:
        return 0
    fraction = float(cell.public.params.get("fraction", 0.1))
    return int(round(train_images(cell) * fraction))


def _encoders(cell: Cell) -> int:
    if cell.method.name == "local_ssl":
        return cell.fl.num_clients
    if cell.method.name == "featarc":
        return int(cell.method.params.get("num_clusters", 2))
    return 1


def task_flops(cell: Cell, f: float) -> dict[str, float]:
    """Each downstream task's FLOPs but detection's, by task name (module docstring)."""

    n_train = TRAIN_SIZES.get(cell.dataset.name, train_images(cell))
    n_test = TEST_SIZES.get(cell.dataset.name, 10000)
    out: dict[str, float] = {}
    for t in cell.tasks:
        name = t.name
        if name in ("knn", "linear_probe"):
            work = (n_train + n_test) * f
        elif name == "semi_supervised":
            steps, batch = SEMISUP
            work = steps * batch * 3 * f + n_test * f
        elif name == "perclient":
            work = _encoders(cell) * (n_train + n_test) * f
        elif name in ("e2e_classifier", "reconstruction"):
            work = n_test * f
        elif name == "transfer_linear":
            work = TRANSFER_IMAGES * backbone_flops(cell, 32)
        elif name == "coco_detection":
            continue
        else:  # an unknown task: one pass over train and test
            work = (n_train + n_test) * f
        label = name if name not in out else f"{name}#{len(out)}"
        out[label] = work
    return out


def detection_flops(cell: Cell) -> tuple[float, float]:
    """COCO detection's training FLOPs (a range: the heads'), 0 without the task."""
    spec = next((t for t in cell.tasks if t.name == "coco_detection"), None)
    if spec is None:
        return 0.0, 0.0
    params = dict(spec.params)
    dataset = params.get("dataset", "coco2017")
    preset = params.get("preset", "auto")
    if preset == "auto":
        preset = "cpu_smoke" if dataset == "shapes_coco" else "decssl_1x"
    iters, batch = DETECTION_SCHEDULE[preset]
    iters = int(params.get("max_iter") or iters)
    batch = int(params.get("ims_per_batch") or batch)
    backbone = backbone_flops(cell, 224) * DETECTION_PIXELS / 224**2
    lo, hi = DETECTION_HEADS_FLOPS
    return tuple(3 * iters * batch * (backbone + heads) for heads in (lo, hi))  # type: ignore[return-value]


def cell_work(cell: Cell, *, pretrain: bool = True) -> CellWork:
    """Every part of the cell's cost in FLOPs (``pretrain=False``: all but the clients' pre-training,
    which a calibration measures; the partition is then not drawn)."""
    from benchmark.contracts.registries import METHODS

    f = backbone_flops(cell, image_size(cell))
    trains = METHODS.get(cell.method.name).pretrains
    images = client_work(cell)[0] if trains and pretrain else 0.0
    return CellWork(
        method=cell.method.name,
        precision=cell.precision,
        pretrain=images * train_flops_per_image(cell) if images else 0.0,
        server=server_flops(cell, f) if trains else 0.0,
        tasks=task_flops(cell, f),
        detection=detection_flops(cell),
    )


def hours(
    flops: float,
    precision: str,
    device: str = "H200",
    utilisation: tuple[float, float] = UTILISATION,
) -> tuple[float, float]:
    """(fewest, most) device-hours for ``flops`` at the utilisation range of the peak."""
    peak = DEVICES[device][precision if precision in DEVICES[device] else "fp32"]
    lo_u, hi_u = utilisation
    return flops / (hi_u * peak) / 3600, flops / (lo_u * peak) / 3600


def grid_hours(cells: Sequence[Cell], device: str = "H200") -> dict[str, tuple[float, float]]:
    """Device-hours by part (pretrain, server, tasks, detection) and in total, each (low, high).
    Pre-training and server steps run in the cell's precision, the tasks and detection at
    :data:`EVAL_PRECISION` (see :func:`assumptions`)."""
    out = {k: [0.0, 0.0] for k in ("pretrain", "server", "tasks", "detection", "total")}
    for cell in cells:
        work = cell_work(cell)
        for part, (flo, fhi) in work.parts.items():
            precision = cell.precision if part in ("pretrain", "server") else EVAL_PRECISION
            util = DETECTION_UTILISATION if part == "detection" else UTILISATION
            lo, _ = hours(flo, precision, device, util)
            _, hi = hours(fhi, precision, device, util)
            out[part][0] += lo
            out[part][1] += hi
            out["total"][0] += lo
            out["total"][1] += hi
    return {k: (v[0], v[1]) for k, v in out.items()}


def assumptions(device: str = "H200") -> list[str]:
    lo, hi = UTILISATION
    ratio = DEVICES[device][EVAL_PRECISION] / DEVICES[device]["fp32"]
    peaks = ", ".join(f"{p} {v / 1e12:g}" for p, v in DEVICES[device].items())
    return [
        f"{device} dense peak TFLOP/s: {peaks}; achieved {lo:.0%}-{hi:.0%} of it (an assumed range, "
        "not a measurement: `doctor --calibrate` on the device replaces it for pre-training)",
        "F = one backbone forward at the training resolution (FlopCounterMode); with backward 3 F; "
        "projector, predictor and probe heads left out",
        "per training image: SimCLR family 6 F, BYOL (FedU, FedEMA) 8 F, Orchestra 7 F, FeatARC 6 F, "
        "Dec-SL 3 F, FedMAE 3x its one-block MAE on the visible patches plus its decoder (counted)",
        "client images = rounds x clients per round x local epochs x mean client size; pooled "
        "central_ssl trains all the data every round",
        "server: FLESD's public-split embedding (1 F an image a client) and distillation (4 F an "
        "image an epoch); FeatARC's cluster scoring ((C + 1) F an image a sampled client); "
        "aggregation, clustering and checkpoints left out",
        "tasks: kNN and linear probe embed train + test once; semi-supervised 2,000 x 64 images with "
        "backward; per-client probes once per distinct encoder; transfer STL-10 at 32 px",
        "detection: Mask R-CNN R18-FPN, 90,000 iterations x 16 images at 800 x 1,216, backbone "
        f"counted plus {DETECTION_HEADS_FLOPS[0] / 1e9:.0f}-{DETECTION_HEADS_FLOPS[1] / 1e9:.0f} "
        "GFLOPs of FPN and heads (from mmdetection's published count), 3x for the backward; at "
        f"{DETECTION_UTILISATION[0]:.0%}-{DETECTION_UTILISATION[1]:.0%} of the peak (assumed)",
        "pre-training and server steps in the cell's precision; tasks and detection at the "
        f"{EVAL_PRECISION} peak: the evaluation precision the runner sets on CUDA (fp32 tensors, "
        "TF32 tensor cores, deterministic cuDNN; docs/precision.md, recorded in a GPU record's "
        f"env.cuda_precision.evaluation); in true fp32 they would take {ratio:.1f}x their hours",
        "one cell on one device at a time; data loading and evaluation I/O not counted",
    ]


def fmt_range(lo: float, hi: float) -> str:
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "-"
    return f"{lo:,.0f}-{hi:,.0f}" if hi >= 10 else f"{lo:.2f}-{hi:.2f}"


def cost_table(cells: Sequence[Cell], device: str = "H200") -> list[str]:
    """The lines ``plan`` prints: device-hours by part and in total, with the assumptions."""
    h = grid_hours(cells, device)
    lines = [f"whole-grid cost on one {device}, device-hours (low-high):"]
    labels = {
        "pretrain": "pre-training (clients)",
        "server": "server steps",
        "tasks": "downstream tasks",
        "detection": "COCO detection",
        "total": "total",
    }
    for key, label in labels.items():
        lines.append(f"  {label:<24} {fmt_range(*h[key]):>15}")
    lines.append("  assumptions:")
    lines += [f"  - {a}" for a in assumptions(device)]
    return lines


__all__ = [
    "DETECTION_HEADS_FLOPS",
    "DETECTION_SCHEDULE",
    "DETECTION_UTILISATION",
    "DEVICES",
    "EVAL_PRECISION",
    "TRAIN_PASSES",
    "UTILISATION",
    "CellWork",
    "assumptions",
    "cell_work",
    "cost_table",
    "detection_flops",
    "grid_hours",
    "hours",
    "mae_train_flops",
    "server_flops",
    "task_flops",
    "train_flops_per_image",
]
