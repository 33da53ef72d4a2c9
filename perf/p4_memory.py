"""P4 client-state memory: peak RAM of 100 stateful FedEMA clients against 10 (issue 3; target ratio
<= 1.5).

    python perf/p4_memory.py [--heads 512] [--rounds-small 5] [--rounds-large 30]

Each setting runs in its own subprocess (so peak RSS is that run's alone) on digits with a width-8
micro ResNet and FedEMA's BYOL heads scaled by ``--heads`` (projector feat -> H -> H/2, predictor
H/2 -> H -> H/2). Both settings train 10 clients per round: K = 10 at full participation, K = 100 at
participation 0.1 for enough rounds that nearly every client holds a state (online + target +
predictor + λ_k). Client states live in the engine's ClientStateStore (CPU, LRU in memory, every
state on disk), so the large run's peak should grow by at most the store's budget. Prints each run's
peak RSS, stateful-client count and state size, and the ratio. Nothing here is asserted in tests.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

CHILD = r"""
import json, resource, sys, torch
from pathlib import Path
from benchmark.grids.expand import resolve_cell
from benchmark.runroot.rundir import RunDir
from benchmark.engine.runner import run_cell
from benchmark.engine.rounds import Checkpointer
k, part, rounds, heads, root = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
torch.set_num_threads(1)
cell = resolve_cell({"dataset": "digits", "backbone": {"name": "resnet_micro", "width": 8},
                     "method": {"name": "fedema", "proj_hidden": heads, "proj_out": heads // 2,
                                "pred_hidden": heads, "batch_size": 16, "drop_last": False},
                     "partition": "iid", "fl": {"num_clients": k, "participation": part, "rounds": rounds,
                                                "local_epochs": 1}, "seed": 0, "tasks": []})
rec = run_cell(cell, Path(root), device="cpu")
pre = RunDir.of(cell, Path(root)).pretrain
manifest = Checkpointer(pre).load_latest()["clients"]
files = [pre.states / e["file"] for e in manifest.values() if e.get("file")]
print(json.dumps({"clients": k, "stateful": len(files), "state_mb": max(f.stat().st_size for f in files) / 2**20,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "status": rec.status}))
"""


def run(k: int, part: float, rounds: int, heads: int) -> dict:
    with tempfile.TemporaryDirectory() as root:
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(k), str(part), str(rounds), str(heads), root],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONPATH": str(REPO), "WANDB_MODE": "disabled", "PATH": "/usr/bin:/bin"},
        )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--heads", type=int, default=512, help="BYOL head width H (quickstart uses 512)"
    )
    ap.add_argument("--rounds-small", type=int, default=5)
    ap.add_argument("--rounds-large", type=int, default=30)
    args = ap.parse_args()
    small = run(10, 1.0, args.rounds_small, args.heads)
    print("K=10 ", json.dumps(small), flush=True)
    large = run(100, 0.1, args.rounds_large, args.heads)
    print("K=100", json.dumps(large), flush=True)
    ratio = large["peak_rss_mb"] / small["peak_rss_mb"]
    print(f"peak RSS ratio (100 / 10 stateful clients) = {ratio:.3f}  (target <= 1.5)")


if __name__ == "__main__":
    main()
