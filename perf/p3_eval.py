"""P3 evaluation: kNN + linear probe on cached features vs a probe that re-embeds the data every
epoch (issue 10).

    python perf/p3_eval.py [--reps 3] [--epochs 100] [--width 8]

Encoder: a freshly initialised resnet_micro (digits 16x16, the quickstart backbone; the cost does
not depend on the weights). Cached: ``tasks.probes.knn.KNN`` then ``tasks.probes.linear_probe.LinearProbe`` (100
epochs, their defaults) through one ``TaskContext``, so the train and test splits are embedded once
and shared by both tasks. Re-embedding: the same kNN and the same linear head, optimizer, schedule
and shuffling, but the encoder re-embeds the train split at every epoch (as a probe that trains the
head on top of a frozen encoder inside the data loop does) and the test split once at the end; kNN
embeds both splits itself. Repetitions alternate between the two; ratio = re-embed / cached. The two
runs' linear top-1 must agree (same features, same head seed).
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "perf"))

from _timing import Span, med, median_ratio, timed

TARGET = 10.0


def setup(width: int):
    import torch

    from benchmark.api import Encoder, arch_fingerprint, build_backbone
    from benchmark.data.datasets import load_dataset_splits

    ds = load_dataset_splits("digits", {})
    torch.manual_seed(0)
    enc, d = build_backbone("resnet_micro", {"width": width})
    enc.eval()
    return ds, Encoder(
        module=enc,
        feat_dim=d,
        backbone="resnet_micro",
        fingerprint=arch_fingerprint(enc),
        input_size=0,
        mean=ds.mean,
        std=ds.std,
    )


def cached_run(ds, encoder, epochs: int) -> tuple[Span, float]:
    import torch

    from benchmark.api import TaskContext
    from tasks.probes.knn import KNN, KNNConfig
    from tasks.probes.linear_probe import LinearProbe, LinearProbeConfig

    with tempfile.TemporaryDirectory() as tmp:
        ctx = TaskContext(
            dataset=ds,
            data_root=Path(tmp),
            out_dir=Path(tmp),
            device=torch.device("cpu"),
            seed=0,
            feature_cache={},
        )
        with timed() as span:
            KNN(KNNConfig()).run(encoder, ctx)
            lin = LinearProbe(LinearProbeConfig(epochs=epochs)).run(encoder, ctx)
        return span, lin.values["top1"]


def reembed_run(ds, encoder, epochs: int) -> tuple[Span, float]:
    import torch
    import torch.nn.functional as F

    from benchmark.api import Stream, scoped_torch_seed, torch_gen
    from tasks.features import extract_features
    from tasks.probes.knn import knn_top1
    from tasks.probes.linear_probe import LinearProbeConfig, accuracy

    cfg = LinearProbeConfig(epochs=epochs)
    dev = torch.device("cpu")
    emb = lambda split: extract_features(encoder.module, split, encoder.mean, encoder.std, dev)
    with timed() as span:
        knn_top1(emb(ds.train), ds.train.labels, emb(ds.test), ds.test.labels, ds.num_classes)
        y = torch.as_tensor(ds.train.labels)
        with scoped_torch_seed(0, Stream.TASK, 1):
            head = torch.nn.Linear(encoder.feat_dim, ds.num_classes)
        gen = torch_gen(0, Stream.TASK, 2)
        opt = torch.optim.Adam(
            head.parameters(), lr=cfg.lr, betas=(0.9, 0.999), weight_decay=cfg.weight_decay
        )
        n = len(y)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(
            opt, T_max=epochs * math.ceil(n / cfg.batch_size)
        )
        for _ in range(epochs):
            f = emb(ds.train)  # re-embedded every epoch
            mean, std = f.mean(0, keepdim=True), f.std(0, keepdim=True) + 1e-6
            x = (f - mean) / std
            for idx in torch.randperm(n, generator=gen).split(cfg.batch_size):
                loss = F.cross_entropy(head(x[idx]), y[idx])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                sched.step()
        top1, _ = accuracy(head, (emb(ds.test) - mean) / std, ds.test.labels)
    return span, top1


def measure(reps: int = 3, epochs: int = 100, width: int = 8, log=print) -> dict:
    ds, encoder = setup(width)
    cached_run(ds, encoder, 2)
    reembed_run(ds, encoder, 2)
    t_c, t_r, agree = [], [], True
    for i in range(reps):
        tc, acc_c = cached_run(ds, encoder, epochs)
        tr, acc_r = reembed_run(ds, encoder, epochs)
        agree = agree and abs(acc_c - acc_r) < 1e-6
        t_c.append(tc)
        t_r.append(tr)
        log(
            f"  P3 rep {i + 1}/{reps}: cached {tc.cpu:.2f} s CPU ({tc.wall:.1f} wall), re-embed {tr.cpu:.2f} s CPU "
            f"({tr.wall:.1f} wall), ratio {tr.cpu / tc.cpu:.1f}",
            flush=True,
        )
    ratio = median_ratio(t_r, t_c, "cpu")
    return {
        "ratio": ratio,
        "ratio_wall": median_ratio(t_r, t_c, "wall"),
        "cached_cpu_s": med(t_c, "cpu"),
        "reembed_cpu_s": med(t_r, "cpu"),
        "same_top1": agree,
        "epochs": epochs,
        "target": TARGET,
        "met": ratio >= TARGET,
        "setting": f"digits 16x16, resnet_micro w{width}, kNN + linear probe {epochs} ep",
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=100)
    ap.add_argument("--width", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    r = measure(args.reps, args.epochs, args.width)
    print(
        f"P3 re-embed/cached time = {r['ratio']:.1f}x CPU ({r['ratio_wall']:.1f}x wall; target >= {TARGET}); same top-1: {r['same_top1']}"
    )


if __name__ == "__main__":
    main()
