"""P6 Flower side by side: the same FedAvg-SimCLR cell through Flower's simulation engine, ours and
a bare loop.

    python perf/p6_flower.py [--reps 3] [--rounds 5] [--shapes 10/10,100/10] [--python PATH]

The cell is the quickstart's FedAvg-SimCLR (perf/_cells.py: digits 16x16, resnet_micro w8,
IID, B = 64, E = 2, Adam, NT-Xent, the digits augmentation), at 10 clients all sampled and at 100
clients 10 sampled.

- **flower**: Flower's current simulation API (``flwr.simulation.run_simulation`` with a
  ``ServerApp`` running the message-API ``FedAvg`` strategy and a ``ClientApp``; Flower starts Ray,
  with its default client resources, 2 CPUs a client, i.e. one client at a time on this 2-core
  machine, as ours). The ClientApp's train step calls the same ``FedAvgSimCLR.client_update`` on the
  received arrays with the same (seed, CLIENT, round, partition-id) streams, so model, augmentation,
  loss, optimizer and random draws are ours; Flower does the transport, sampling (its own, unseeded)
  and weighted averaging (in NumPy). Evaluation rounds are off (``fraction_evaluate = 0``).
- **ours**: ``benchmark.engine.rounds.simulate`` (sampling stream, ClientStateStore, FedAvg, a
  checkpoint each round).
- **bare**: ``_cells.bare_rounds``, the same steps on our sampled clients and nothing else.

Every repetition of every variant runs in a fresh process (imports, dataset, Ray start-up and
shut-down included), the three variants interleaved and rotated from one repetition to the next,
with 1 torch thread. Measured per run: wall time, CPU time of the whole process tree (this script is
made the child subreaper, so Ray's daemons and workers are reaped here and counted), peak RSS of the
tree (summed VmRSS, polled every 0.1 s) and, inside the run, each round's end time; the steady round
is the median of rounds 2.. (round 1 carries Flower's actor start-up). First-round losses: each
client's mean step loss in round 1 from Flower's replies and from ours must equal, bitwise,
``client_update`` from the initial model for the same client (ours' own sampled clients; for Flower
the clients it sampled), and the bare loop's first client likewise (it then carries its network on,
by design).

Flower is not a dependency of the project: ``pip install -e .[bench]`` (flwr[simulation] pins its
own Ray, so a separate environment is advised: ``python -m venv --system-site-packages
.venv-bench``) and pass ``--python``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "perf"))

VARIANTS = ("flower", "ours", "bare")
MARK = "P6RESULT "


# ---- the three variants (each in its own process) ------------------------------------------------


def _setup():
    import torch
    from _cells import cell_setup

    torch.set_num_threads(1)
    k, m, rounds = (int(os.environ[v]) for v in ("P6_CLIENTS", "P6_PER_ROUND", "P6_ROUNDS"))
    return cell_setup(k, m, rounds)


def run_ours() -> dict:
    import tempfile

    _cell, method, clients, settings = _setup()
    ends: list[float] = []
    losses: dict[int, float] = {}
    update = method.client_update

    def recording(down, state, data, ctx):
        up, new = update(down, state, data, ctx)
        if ctx.round == 1:
            losses[ctx.client_id] = float(up.metrics["loss"])
        return up, new

    method.client_update = recording
    from benchmark.engine.rounds import simulate

    with tempfile.TemporaryDirectory(prefix="p6_") as work:
        t0 = time.perf_counter()
        simulate(
            method,
            clients,
            settings,
            Path(work),
            on_round=lambda r, _m: ends.append(time.perf_counter()),
        )
    return {"t0": t0, "ends": ends, "losses": losses}


def run_bare() -> dict:
    from _cells import bare_rounds

    _cell, method, clients, settings = _setup()
    ends: list[float] = []
    losses: dict[int, float] = {}
    first: list[int] = []

    def keep(r: int, k: int, loss: float) -> None:
        if r == 1:
            losses[k] = loss
            first.append(k)

    t0 = time.perf_counter()
    bare_rounds(
        method, clients, settings, on_loss=keep, on_round=lambda r: ends.append(time.perf_counter())
    )
    return {"t0": t0, "ends": ends, "losses": {first[0]: losses[first[0]]}}


_CLIENT: dict = {}


def _flower_train(msg, context):
    """The ClientApp's train handler: our client_update on the received arrays, for client =
    partition-id."""
    from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict

    from benchmark.contracts.types import Payload, ServerState
    from benchmark.engine.rounds import client_context

    if not _CLIENT:
        _CLIENT["cell"] = _setup()
    _cell, method, clients, settings = _CLIENT["cell"]
    k = int(context.node_config["partition-id"])
    r = int(msg.content["config"]["server-round"])
    tensors = dict(msg.content["arrays"].to_torch_state_dict())
    down = Payload(tensors)
    state = method.init_client(k, ServerState(model=tensors))
    up, _ = method.client_update(down, state, clients[k], client_context(settings, r, k, None))
    metrics = MetricRecord(
        {"num-examples": int(up.num_examples), "loss": float(up.metrics["loss"]), "client": k}
    )
    return Message(
        content=RecordDict({"arrays": ArrayRecord(up.tensors), "metrics": metrics}), reply_to=msg
    )


def run_flower() -> dict:
    from flwr.app import ArrayRecord
    from flwr.clientapp import ClientApp
    from flwr.serverapp import ServerApp
    from flwr.serverapp.strategy import FedAvg
    from flwr.simulation import run_simulation

    from benchmark.engine.rounds import server_context

    _cell, method, clients, settings = _setup()
    initial = ArrayRecord(dict(method.init_server(server_context(settings, 0, None)).model))
    k, m, rounds = len(clients), settings.per_round, settings.num_rounds
    log: dict = {"ends": [], "losses": {}}

    class Recording(FedAvg):
        def configure_train(self, server_round, arrays, config, grid):
            log.setdefault("t0", time.perf_counter())
            return super().configure_train(server_round, arrays, config, grid)

        def aggregate_train(self, server_round, replies):
            replies = list(replies)
            if server_round == 1:
                for msg in replies:
                    mr = msg.content["metrics"]
                    log["losses"][int(mr["client"])] = float(mr["loss"])
            out = super().aggregate_train(server_round, replies)
            log["ends"].append(time.perf_counter())
            return out

    server = ServerApp()

    @server.main()
    def main(grid, context) -> None:
        strategy = Recording(
            fraction_train=m / k, fraction_evaluate=0.0, min_train_nodes=m, min_available_nodes=k
        )
        strategy.start(grid=grid, initial_arrays=initial, num_rounds=rounds)

    client = ClientApp()
    client.train()(_flower_train)
    run_simulation(server_app=server, client_app=client, num_supernodes=k)
    if len(log["ends"]) != rounds:
        raise RuntimeError(f"Flower completed {len(log['ends'])} of {rounds} rounds")
    return log


def child(variant: str) -> None:
    started = time.perf_counter()
    out = {"flower": run_flower, "ours": run_ours, "bare": run_bare}[variant]()
    ends = out["ends"]
    rounds = [b - a for a, b in zip([out["t0"], *ends[:-1]], ends)]
    print(
        MARK
        + json.dumps(
            {
                "variant": variant,
                "rounds": rounds,
                "to_first_round": out["t0"] - started,
                "losses": {str(k): v for k, v in out["losses"].items()},
            }
        ),
        flush=True,
    )


# ---- the parent: interleaved repetitions, process-tree accounting, checks ------------------------


def one(python: str, variant: str, k: int, m: int, rounds: int) -> dict:
    from _cells import run_tree

    env = {
        **os.environ,
        "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'perf'}",
        "WANDB_MODE": "disabled",
        "P6_CLIENTS": str(k),
        "P6_PER_ROUND": str(m),
        "P6_ROUNDS": str(rounds),
        "RAY_USAGE_STATS_ENABLED": "0",
        "OMP_NUM_THREADS": "1",
        "PYTHONWARNINGS": "ignore",
    }
    res = run_tree([python, str(Path(__file__).resolve()), "--child", variant], env, REPO)
    lines = [ln for ln in res["stdout"].splitlines() if ln.startswith(MARK)]
    if res["returncode"] != 0 or not lines:
        raise RuntimeError(
            f"{variant} run failed (exit {res['returncode']}): {res['stdout'][-800:]}"
        )
    inner = json.loads(lines[-1][len(MARK) :])
    return {
        **inner,
        "wall": res["wall"],
        "cpu": res["cpu"],
        "peak_rss_mb": res["peak_rss"] / 2**20,
        "steady": statistics.median(inner["rounds"][1:]),
    }


def check_losses(runs: dict[str, list[dict]], k: int, m: int, rounds: int) -> bool:
    """Every reported round-1 loss equals (bitwise) our client_update from the initial model for
    that client."""
    from _cells import cell_setup, engine_first_round_losses

    _cell, method, clients, settings = cell_setup(k, m, rounds)
    wanted = {int(c) for rs in runs.values() for r in rs for c in r["losses"]}
    ref = engine_first_round_losses(method, clients, settings, sorted(wanted))
    return all(ref[int(c)] == v for rs in runs.values() for r in rs for c, v in r["losses"].items())


def measure_shape(python: str, k: int, m: int, rounds: int, reps: int, log=print) -> dict:
    runs: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    for i in range(reps):
        order = VARIANTS[i % 3 :] + VARIANTS[: i % 3]
        for v in order:
            r = one(python, v, k, m, rounds)
            runs[v].append(r)
            log(
                f"  P6 {k}/{m} rep {i + 1} {v}: steady round {r['steady']:.3f} s, end to end {r['wall']:.1f} s wall "
                f"{r['cpu']:.1f} s CPU, peak RSS {r['peak_rss_mb']:.0f} MB (tree)",
                flush=True,
            )
    same = check_losses(runs, k, m, rounds)

    def ratio(a: str, b: str, key: str) -> float:
        return statistics.median(x[key] / y[key] for x, y in zip(runs[a], runs[b]))

    def med(v: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[v])

    return {
        "shape": f"{k}/{m}",
        "same_first_losses": same,
        "steady_flower_ours": ratio("flower", "ours", "steady"),
        "steady_ours_bare": ratio("ours", "bare", "steady"),
        "e2e_flower_ours": ratio("flower", "ours", "wall"),
        "cpu_flower_ours": ratio("flower", "ours", "cpu"),
        **{
            f"{v}_{key}": med(v, key)
            for v in VARIANTS
            for key in ("steady", "wall", "cpu", "peak_rss_mb")
        },
        "runs": runs,
    }


def flower_missing(python: str) -> str | None:
    import subprocess

    out = subprocess.run(
        [python, "-c", "import flwr, ray; print(flwr.__version__, ray.__version__)"],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        return f"flwr[simulation] is not importable by {python}: {out.stderr.strip().splitlines()[-1:]}"
    return None


def measure(
    python: str | None = None,
    reps: int = 3,
    rounds: int = 5,
    shapes=((10, 10), (100, 10)),
    log=print,
) -> dict:
    from _cells import become_subreaper

    python = python or os.environ.get("FSSL_BENCH_PYTHON") or sys.executable
    missing = flower_missing(python)
    if missing:
        raise RuntimeError(missing + " (pip install -e .[bench], see perf/p6_flower.py)")
    become_subreaper()
    import subprocess

    code = "import flwr, ray; print(f'flwr {flwr.__version__}, ray {ray.__version__}')"
    versions = subprocess.run(
        [python, "-c", code], capture_output=True, text=True, check=False
    ).stdout.strip()
    res = [measure_shape(python, k, m, rounds, reps, log) for k, m in shapes]
    met = all(
        r["steady_flower_ours"] > 1 and r["e2e_flower_ours"] > 1 and r["same_first_losses"]
        for r in res
    )
    return {"shapes": res, "versions": versions, "rounds": rounds, "reps": reps, "met": met}


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        child(sys.argv[2])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--shapes", default="10/10,100/10", help="registered/sampled, comma-separated")
    ap.add_argument(
        "--python",
        default=None,
        help="interpreter with flwr[simulation] (default: this one, or $FSSL_BENCH_PYTHON)",
    )
    args = ap.parse_args()
    shapes = tuple(tuple(int(x) for x in s.split("/")) for s in args.shapes.split(","))
    res = measure(args.python, args.reps, args.rounds, shapes)
    print(
        f"{res['versions']}; {res['rounds']} rounds, {res['reps']} reps, load average {os.getloadavg()[0]:.1f}"
    )
    for r in res["shapes"]:
        print(
            f"P6 {r['shape']}: steady round Flower/ours {r['steady_flower_ours']:.2f}x, ours/bare "
            f"{r['steady_ours_bare']:.3f}x; end to end Flower {r['flower_wall']:.1f} s vs ours {r['ours_wall']:.1f} s "
            f"({r['e2e_flower_ours']:.2f}x wall, {r['cpu_flower_ours']:.2f}x CPU); peak RSS (tree) Flower "
            f"{r['flower_peak_rss_mb']:.0f} MB vs ours {r['ours_peak_rss_mb']:.0f} MB vs bare "
            f"{r['bare_peak_rss_mb']:.0f} MB; same first-round losses {r['same_first_losses']}"
        )
    print(
        f"P6 met (ours faster per steady round and end to end at every shape, same losses): {res['met']}"
    )


if __name__ == "__main__":
    main()
