"""P1 engine overhead: FedAvg-SimCLR rounds through ``benchmark.engine.rounds.simulate`` vs a bare
PyTorch loop (issue 10).

    python perf/p1_engine_overhead.py [--reps 5] [--rounds 2]

The cell is the quickstart's FedAvg-SimCLR (digits 16x16, resnet_micro width 8, 10 IID clients, full
participation, 2 local epochs, batch 64). The engine side is ``simulate`` exactly as ``run_cell``
calls it: client sampling, the payload copies (``load_tensors``/``tensors_of``),
``ClientStateStore``, FedAvg aggregation and a checkpoint ``torch.save`` every round, into a fresh
run directory.

The bare side is the limit: one SimCLR network (``method.build()``) built the same way, and for each
client the same batches (``batch_indices`` on the same (seed, CLIENT, r, k) generator), the same
``two_views`` calls, NT-Xent, a fresh Adam and the same optimizer steps, nothing else (no weight
copies between clients, no averaging, no checkpoints). Its first client's first-round loss is
checked to equal the engine's bitwise, so both do the same work.

Repetitions of the two variants are interleaved (engine, bare, engine, bare, ...) so both see the
same machine load; the ratio is bare time / engine time = engine throughput / bare throughput, the
median over the pairs of CPU-time ratios. A load-independent cross-check is measured inside each
engine run: the share of its CPU time spent in the clients' local loops (``run_local_epochs``, the
same work as the bare loop); 1 - share is the engine's own cost.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "perf"))

from _timing import Span, best_ratio, med, median_ratio, timed

TARGET = 0.95

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


def setup(rounds: int):
    """The cell's prepared stage, exactly as the runner builds it (benchmark.engine.stages.prepare,
    on the CPU)."""
    from benchmark.engine.stages import prepare
    from benchmark.grids.expand import resolve_cell

    prep = prepare(resolve_cell({**CELL, "fl": {**CELL["fl"], "rounds": rounds}}))
    return prep.cell, prep.method, prep.clients, prep.settings


def engine_run(method, clients, settings, loops: list[Span] | None = None) -> Span:
    """One engine run; with ``loops``, also the CPU time of each client's local loop
    (``run_local_epochs``)."""
    import methods._shared.simclr as mod  # FedAvg-SimCLR's local update runs its loop from here
    from benchmark.engine.rounds import simulate

    orig = mod.run_local_epochs

    def timed_loop(*a, **kw):
        with timed() as span:
            out = orig(*a, **kw)
        loops.append(span)
        return out

    if loops is not None:
        mod.run_local_epochs = timed_loop
    try:
        with tempfile.TemporaryDirectory(prefix="p1_") as work, timed() as span:
            simulate(method, clients, settings, Path(work))
    finally:
        mod.run_local_epochs = orig
    return span


def bare_run(method, clients, settings) -> tuple[Span, float]:
    """The same optimizer steps on the same batches with the same model, and nothing else."""
    from benchmark.api import Stream, scoped_torch_seed
    from methods._shared.losses import CONTRASTIVE_LOSSES

    cfg = method.cfg
    loss_fn = CONTRASTIVE_LOSSES[cfg.loss_form]
    first: list[float] = []
    with timed() as span:
        with scoped_torch_seed(settings.seed, Stream.INIT):
            # the engine's initial global model (the engine builds it too, in init_server)
            net = method.build()
        net.train()
        _bare_rounds(net, clients, settings, cfg, loss_fn, first)
    return span, first[0]


def _bare_rounds(net, clients, settings, cfg, loss_fn, first: list[float]) -> None:
    import torch

    from benchmark.api import Stream, torch_gen, two_views

    for r in range(1, settings.num_rounds + 1):
        for k, data in enumerate(clients):
            gen = torch_gen(settings.seed, Stream.CLIENT, r, k)
            view = data.train
            opt = torch.optim.Adam(net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
            for _ in range(settings.local_epochs):
                for idx in view.batch_indices(cfg.batch_size, gen):
                    v1, v2 = two_views(
                        view.images[idx], cfg.augment, gen, mean=view.mean, std=view.std
                    )
                    # one forward pass per view, as the method (FedAvgSimCLR.client_update)
                    z1, z2 = net(v1), net(v2)
                    loss = loss_fn(z1, z2, cfg.tau)
                    value = float(loss.detach())
                    if not first:
                        first.append(value)
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()


def first_client_loss_engine(method, clients, settings) -> float:
    """Client 0's first-step loss under the engine (for the same-work check)."""
    import torch

    from benchmark.engine.rounds import client_context, server_context

    server = method.init_server(server_context(settings, 0, None))
    down = method.broadcast(server, server_context(settings, 1, None))
    seen: list[float] = []
    orig = torch.Tensor.backward

    def spy(self, *a, **kw):
        if not seen:
            seen.append(float(self.detach()))
        return orig(self, *a, **kw)

    torch.Tensor.backward = spy
    try:
        method.client_update(
            down, method.init_client(0, server), clients[0], client_context(settings, 1, 0, None)
        )
    finally:
        torch.Tensor.backward = orig
    return seen[0]


def measure(reps: int = 3, rounds: int = 1, log=print) -> dict:
    _cell, method, clients, settings = setup(rounds)
    steps = (
        rounds
        * len(clients)
        * settings.local_epochs
        * len(
            clients[0].train.batch_indices(method.cfg.batch_size, __import__("torch").Generator())
        )
    )
    engine_run(method, clients, settings)  # warm-up (allocator, first-call costs) for both variants
    _, bare_first = bare_run(method, clients, settings)
    same = bare_first == first_client_loss_engine(method, clients, settings)
    t_engine, t_bare, in_loop = [], [], []
    for i in range(reps):
        loops: list[Span] = []
        t_engine.append(engine_run(method, clients, settings, loops))
        in_loop.append(sum(x.cpu for x in loops) / t_engine[-1].cpu)
        t_bare.append(bare_run(method, clients, settings)[0])
        e, b = t_engine[-1], t_bare[-1]
        log(
            f"  P1 rep {i + 1}/{reps}: engine {e.cpu:.2f} s CPU ({e.wall:.1f} s wall), bare {b.cpu:.2f} s CPU "
            f"({b.wall:.1f} s wall), ratio {b.cpu / e.cpu:.3f} CPU / {b.wall / e.wall:.3f} wall",
            flush=True,
        )
    ratio = median_ratio(t_bare, t_engine, "cpu")
    return {
        "ratio": ratio,
        "ratio_best": best_ratio(t_bare, t_engine, "cpu"),
        "ratio_wall": median_ratio(t_bare, t_engine, "wall"),
        "in_loop_share": statistics.median(in_loop),
        "engine_cpu_s": med(t_engine, "cpu"),
        "bare_cpu_s": med(t_bare, "cpu"),
        "same_first_loss": same,
        "steps": steps,
        "rounds": rounds,
        "reps": reps,
        "target": TARGET,
        "met": ratio >= TARGET,
        "setting": f"FedAvg-SimCLR, digits 16x16, resnet_micro w8, 10 clients, {rounds} round(s), E=2, B=64",
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    res = measure(args.reps, args.rounds)
    print(
        f"P1 engine/bare throughput = {res['ratio']:.3f} (median of paired CPU-time ratios; best-of "
        f"{res['ratio_best']:.3f}, wall {res['ratio_wall']:.3f}); share of the engine's CPU time inside the "
        f"client loops = {res['in_loop_share']:.3f}; target >= {TARGET}; same first loss: {res['same_first_loss']}"
    )


if __name__ == "__main__":
    main()
