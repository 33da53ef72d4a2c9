"""The FedAvg-SimCLR cell the engine benchmarks share (P1, P6, P7, P8), a tiled dataset for
cross-device shapes, the bare loop (the limit: the same optimizer steps on the same batches, nothing
else) and process-tree accounting.

The cell is the quickstart's FedAvg-SimCLR: digits 16x16, resnet_micro width 8, batch 64, two local
epochs, Adam, NT-Xent, the digits augmentation (crop >= 20 %, no flip), seed 0. ``tiled_digits(n)``
is the synthetic dataset used where digits' 1,437 training images are too few (1,000 clients of 10
images, 10,000 clients): digits' training images and labels repeated in order to ``n`` (identical
copies; the timings do not depend on the pixels).
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

CELL = {
    "dataset": "digits",
    "backbone": {"name": "resnet_micro", "width": 8},
    "method": {
        "name": "fedavg_simclr",
        "batch_size": 64,
        "augment": {"crop_scale": [0.2, 1.0], "flip_p": 0.0},
    },
    "partition": "iid",
    "partition_seed": 0,
    "fl": {"num_clients": 10, "participation": 1.0, "rounds": 2, "local_epochs": 2},
    "seed": 0,
    "tasks": [],
}


def tiled_digits(n: int):
    """digits 16x16 with its training split repeated to ``n`` images (labels alike); the test split
    unchanged."""
    import numpy as np

    from benchmark.contracts.data_types import DatasetSplit, DatasetSplits
    from benchmark.data.datasets import load_dataset_splits

    ds = load_dataset_splits("digits", {"size": 16})
    if n <= len(ds.train):
        return ds
    reps = -(-n // len(ds.train))
    images = ds.train.images.repeat(reps, 1, 1, 1)[:n].contiguous()
    labels = np.tile(ds.train.labels, reps)[:n]
    return DatasetSplits(
        f"digits_tiled_{n}",
        DatasetSplit(images, labels, ds.num_classes),
        ds.test,
        f"{ds.revision}-tiled{n}",
        ds.mean,
        ds.std,
    )


def cell_setup(
    num_clients: int,
    per_round: int,
    rounds: int,
    *,
    images: int = 0,
    method: dict | None = None,
    partition: Any = "iid",
):
    """(cell, method, clients, settings) for the cell with ``num_clients`` IID clients,
    ``per_round`` sampled."""
    import torch

    from benchmark.engine.rounds import SimSettings
    from benchmark.engine.stages import build_method, build_partition, client_datasets, input_spec
    from benchmark.grids.expand import resolve_cell

    spec = {
        **CELL,
        "partition": partition,
        "fl": {
            **CELL["fl"],
            "num_clients": num_clients,
            "rounds": rounds,
            "participation": per_round / num_clients,
        },
    }
    if method is not None:
        spec["method"] = method
    cell = resolve_cell(spec)
    ds = tiled_digits(images)
    part = build_partition(cell, ds.train.labels)
    m = build_method(cell, input_spec(ds))
    clients = client_datasets(m, ds, part)
    settings = SimSettings(
        seed=cell.seed,
        num_rounds=rounds,
        local_epochs=cell.fl.local_epochs,
        per_round=cell.fl.clients_per_round,
        device=torch.device("cpu"),
        num_classes=ds.num_classes,
    )
    return cell, m, clients, settings


def bare_rounds(
    method,
    clients: Sequence,
    settings,
    *,
    on_loss: Callable[[int, int, float], None] | None = None,
    on_round: Callable[[int], None] | None = None,
) -> None:
    """The limit: one SimCLR network (the engine's initial model), and for each round's sampled
    clients (the engine's sampling stream) the same batches, views (one forward pass each), NT-Xent
    and a fresh Adam; no weight copies, no averaging, no state store, no checkpoints.
    ``on_loss(round, client, mean loss)`` sees each client's mean step loss."""
    import torch

    from benchmark.api import Stream, scoped_torch_seed, torch_gen, two_views
    from benchmark.engine.rounds import sample_clients
    from methods._shared.losses import CONTRASTIVE_LOSSES
    from methods._shared.optim import round_lr

    cfg = method.cfg
    loss_fn = CONTRASTIVE_LOSSES[cfg.loss_form]
    with scoped_torch_seed(settings.seed, Stream.INIT):
        net = method.build()
    net.train()
    for r in range(1, settings.num_rounds + 1):
        for k in sample_clients(settings.seed, r, len(clients), settings.per_round):
            view = clients[k].train
            gen = torch_gen(settings.seed, Stream.CLIENT, r, k)
            # the method's schedule
            lr = round_lr(cfg.lr, r, settings.num_rounds, cfg.lr_milestones, cfg.lr_gamma)
            opt = torch.optim.Adam(net.parameters(), lr=lr, weight_decay=cfg.weight_decay)
            total, steps = 0.0, 0
            for _ in range(settings.local_epochs):
                for idx in view.batch_indices(cfg.batch_size, gen):
                    v1, v2 = two_views(
                        view.images[idx], cfg.augment, gen, mean=view.mean, std=view.std
                    )
                    # one forward pass per view, as the method (FedAvgSimCLR.client_update)
                    z1, z2 = net(v1), net(v2)
                    loss = loss_fn(z1, z2, cfg.tau)
                    total += float(loss.detach())
                    steps += 1
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
            if on_loss is not None:
                on_loss(r, k, total / max(steps, 1))
        if on_round is not None:
            on_round(r)


def engine_first_round_losses(
    method, clients: Sequence, settings, ks: Sequence[int]
) -> dict[int, float]:
    """Each client's round-1 mean step loss as the engine computes it (``client_update`` from the
    initial model)."""
    from benchmark.engine.rounds import client_context, server_context

    server = method.init_server(server_context(settings, 0, None))
    down = method.broadcast(server, server_context(settings, 1, None))
    out = {}
    for k in ks:
        up, _ = method.client_update(
            down, method.init_client(k, server), clients[k], client_context(settings, 1, k, None)
        )
        out[int(k)] = float(up.metrics["loss"])
    return out


# ---- whole-process-tree accounting (Linux /proc) -------------------------------------------------


def become_subreaper() -> None:
    """Orphaned descendants (daemons a child starts, e.g. Ray's) are re-parented to this process
    instead of init, so that they stay in our tree and their CPU time is added to RUSAGE_CHILDREN
    when we reap them."""
    import ctypes

    PR_SET_CHILD_SUBREAPER = 36
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        for c in children.get(pid, []):
            out.append(c)
            todo.append(c)
    return out


def rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def run_tree(
    argv: list[str], env: dict, cwd: Path, poll: float = 0.1, timeout: float = 3600
) -> dict:
    """Run ``argv`` and measure its whole process tree: wall time, CPU time (user + system of every
    descendant, reaped here as their subreaper) and peak RSS (the tree's summed VmRSS, polled every
    ``poll`` s; shared pages count once per process). Returns {wall, cpu, peak_rss, returncode,
    stdout}."""
    import subprocess
    import tempfile

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryFile(mode="w+") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            argv, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, text=True
        )
        peak = 0
        while proc.poll() is None:
            peak = max(peak, rss_bytes(proc.pid) + sum(rss_bytes(p) for p in descendants(proc.pid)))
            if time.perf_counter() - t0 > timeout:
                proc.kill()
            time.sleep(poll)
        wall = time.perf_counter() - t0
        _reap_orphans()
        out.seek(0)
        text = out.read()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "wall": wall,
        "cpu": cpu,
        "peak_rss": peak,
        "returncode": proc.returncode,
        "stdout": text,
    }


def _reap_orphans(grace: float = 30.0) -> None:
    """Wait for descendants left behind (re-parented to us); kill what is still there after
    ``grace`` s."""
    t0 = time.perf_counter()
    while True:
        left = descendants(os.getpid())
        if not left:
            break
        if time.perf_counter() - t0 > grace:
            for pid in left:
                try:
                    os.kill(pid, 9)
                except OSError:
                    pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            pass
        time.sleep(0.1)
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass
