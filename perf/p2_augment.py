"""P2 augmentation: batched two-view SimCLR augmentation on uint8 tensors vs the papers' per-image
PIL pipeline.

    python perf/p2_augment.py [--reps 5] [--batch 512] [--width 16]

Both sides make two views of the same 512 random 32x32 RGB images with the Dec-SSL CIFAR pipeline
(RandomResizedCrop(32), horizontal flip 0.5, ColorJitter(0.4, 0.4, 0.4, 0.1) with p 0.8, grayscale p
0.2, to float, Normalize):
  * tensor: ``benchmark.data.augment.two_views`` on the uint8 batch (what every method calls),
  * PIL: torchvision's transforms on ``PIL.Image``s, one image at a time, as the papers' data loaders do
    (in one process: a loader with N workers divides both the PIL time and nothing else by N).
Repetitions alternate between the two (same machine load); throughput ratio = PIL time / tensor
time.

Share of a training step: one SimCLR step of resnet18_cifar (forward of both views, NT-Xent,
backward, Adam) at batch
512. Width 64 (the papers') takes tens of seconds per step on this 2-core CPU, so the step is
     measured at ``--width`` (default 8) and the share is reported twice: measured at that width (an
     upper bound: a wider model only makes the step longer), and estimated for width 64 by scaling
     the measured step time by the ratio of forward FLOPs (benchmark.grids.grid_plan.forward_flops). The
     step's loss is the project's ``ntxent_2b`` (methods/_shared/losses.py: one (2B x 2B)
     cross-entropy, as the SimCLR code does), what every SimCLR-style method trains with.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "perf"))

from _timing import Span, med, median_ratio, timed

TARGET_SPEEDUP = 5.0
TARGET_SHARE = 0.15
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)


def pil_pipeline():
    from torchvision import transforms as T

    return T.Compose(
        [
            T.RandomResizedCrop(32),
            T.RandomHorizontalFlip(),
            T.RandomApply([T.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8),
            T.RandomGrayscale(p=0.2),
            T.ToTensor(),
            T.Normalize(MEAN, STD),
        ]
    )


def images(batch: int):
    import torch

    gen = torch.Generator().manual_seed(0)
    return torch.randint(0, 256, (batch, 3, 32, 32), dtype=torch.uint8, generator=gen)


def time_tensor(x, cfg, gen) -> Span:
    from benchmark.data.augment import two_views

    with timed() as span:
        two_views(x, cfg, gen, mean=MEAN, std=STD)
    return span


def time_pil(pils, tf) -> Span:
    import torch

    with timed() as span:
        v1 = torch.stack([tf(im) for im in pils])
        v2 = torch.stack([tf(im) for im in pils])
    del v1, v2
    return span


def step_time(width: int, x, cfg, reps: int) -> list[Span]:
    """Median seconds of one full SimCLR step (augmentation excluded) of resnet18_cifar at
    ``width``."""
    import torch

    from benchmark.api import build_backbone, mlp_head, ntxent_2b
    from benchmark.data.augment import two_views

    torch.manual_seed(0)
    enc, d = build_backbone("resnet18_cifar", {"width": width})
    net = torch.nn.Sequential(enc, mlp_head(d, d, d)).train()
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    v1, v2 = two_views(x, cfg, torch.Generator().manual_seed(1), mean=MEAN, std=STD)
    out = []
    for _ in range(reps + 1):
        with timed() as span:
            z1, z2 = net(v1), net(v2)  # one forward pass per view, as the methods do
            loss = ntxent_2b(z1, z2, 0.5)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        out.append(span)
    return out[1:]


def measure(reps: int = 5, batch: int = 512, width: int = 8, step_reps: int = 2, log=print) -> dict:
    import torch
    from PIL import Image

    from benchmark.data.augment import AugmentConfig
    from benchmark.grids.grid_plan import forward_flops

    x = images(batch)
    pils = [Image.fromarray(im.permute(1, 2, 0).numpy()) for im in x]
    tf = pil_pipeline()
    cfg = AugmentConfig()  # Dec-SSL CIFAR defaults = the pipeline above
    gen = torch.Generator().manual_seed(0)
    time_tensor(x, cfg, gen)
    time_pil(pils[:64], tf)
    t_tensor, t_pil, t_step = [], [], []
    for i in range(reps):
        t_tensor.append(time_tensor(x, cfg, gen))
        t_pil.append(time_pil(pils, tf))
        e, p = t_tensor[-1], t_pil[-1]
        log(
            f"  P2 rep {i + 1}/{reps}: tensor {e.cpu * 1e3:.0f} ms CPU ({e.wall * 1e3:.0f} wall), PIL "
            f"{p.cpu * 1e3:.0f} ms CPU ({p.wall * 1e3:.0f} wall)",
            flush=True,
        )
    # the training step, each repetition paired with an augmentation call right next to it (same
    # load)
    steps = step_time(width, x, cfg, step_reps)
    aug_near = [time_tensor(x, cfg, gen) for _ in steps]
    t_step = steps
    share_w = statistics.median(a.cpu / (a.cpu + s.cpu) for a, s in zip(aug_near, t_step))
    scale = forward_flops("resnet18_cifar", '{"width": 64}', 32) / forward_flops(
        "resnet18_cifar", f'{{"width": {width}}}', 32
    )
    share_64 = statistics.median(a.cpu / (a.cpu + s.cpu * scale) for a, s in zip(aug_near, t_step))
    speedup = median_ratio(t_pil, t_tensor, "cpu")
    return {
        "speedup": speedup,
        "speedup_wall": median_ratio(t_pil, t_tensor, "wall"),
        "tensor_ms": med(t_tensor, "cpu") * 1e3,
        "pil_ms": med(t_pil, "cpu") * 1e3,
        "step_s": med(t_step, "cpu"),
        "width": width,
        "share_measured": share_w,
        "flops_scale": scale,
        "share_w64_est": share_64,
        "met": speedup >= TARGET_SPEEDUP and share_w <= TARGET_SHARE,
        "batch": batch,
        "target": f">= {TARGET_SPEEDUP:g}x PIL and <= {TARGET_SHARE:.0%} of a step",
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--width", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    r = measure(args.reps, args.batch, args.width)
    print(
        f"P2 tensor/PIL throughput = {r['speedup']:.2f}x CPU-time ({r['speedup_wall']:.2f}x wall; target >= {TARGET_SPEEDUP}); "
        f"share of a resnet18_cifar w{r['width']} step = {r['share_measured']:.1%} "
        f"(w64 est. {r['share_w64_est']:.1%}; target <= {TARGET_SHARE:.0%})"
    )


if __name__ == "__main__":
    main()
