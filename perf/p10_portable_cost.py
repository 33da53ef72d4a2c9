"""P10 portable kernels' cost: quickstart cells per hour, portable vs native (issue 34).

    python perf/p10_portable_cost.py [--only "method=fedavg_simclr;method=fedmae"] [--pairs 1]

The same quickstart cells run once with portable kernels and once natively (the quickstart grid with
``kernels: portable`` and with ``kernels: native``, written to a temporary folder), each arm a fresh
``python -m benchmark run --workers 1`` into its own temporary root, in ABBA order (native,
portable, portable, native per pair) so that a drift of the shared machine's speed hits both arms
alike. Cells per hour count each cell's own wall time (``compute.wall_time_s`` of its record:
pre-training and evaluation, not the process start-up); the ratio is portable / native cells per
hour.

``--where`` adds where the cost comes from: the CPU time of one training step of the quickstart's
ResNet (resnet_micro width 8, batch 128 at 16x16, forward + backward + SGD) in a fresh process per
kernel setting (native, ATen at AVX2, oneDNN off, MKL's COMPATIBLE branch, the whole mode, and
revision 1 of the mode, which bypassed oneDNN), repeated in alternating order; ``--steps-only``
prints only that.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
# seed 0, IID: one cell of each of the quickstart's 13 configurations (methods, reference points, ViTs)
DEFAULT_ONLY = "partition=iid"
STEP = """
import os, sys, time
import torch
torch.set_num_threads(1)
torch.backends.mkldnn.enabled = os.environ.get("P10_ONEDNN", "on") == "on"
from benchmark.building_blocks.backbones import build_backbone
model, _ = build_backbone("resnet_micro", {"width": 8})
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(128, 3, 16, 16, generator=torch.Generator().manual_seed(0))
def step():
    opt.zero_grad()
    model(x).float().pow(2).mean().backward()
    opt.step()
for _ in range(3):
    step()
t = time.process_time()
for _ in range(20):
    step()
print((time.process_time() - t) / 20 * 1000)
"""
SETTINGS = {
    "native": {},
    "ATen AVX2": {"ATEN_CPU_CAPABILITY": "avx2"},
    "oneDNN off": {"P10_ONEDNN": "off"},
    "MKL COMPATIBLE": {"MKL_CBWR": "COMPATIBLE"},
    # the mode (revision 2): oneDNN kept, JIT-compiled for AVX2
    "portable": {
        "ATEN_CPU_CAPABILITY": "avx2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "MKL_CBWR": "COMPATIBLE",
    },
    # revision 1 of the mode (docs/reproducibility.md, Cost): oneDNN bypassed (im2col + GEMM)
    "portable rev. 1": {
        "ATEN_CPU_CAPABILITY": "avx2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "MKL_CBWR": "COMPATIBLE",
        "P10_ONEDNN": "off",
    },
}


def _arm(grid: Path, only: str, root: Path) -> tuple[float, int]:
    """Seconds of cell wall time and cells, for one run of the chosen cells."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "WANDB_MODE": "disabled"}
    for part in only.split(";"):
        cmd = [
            sys.executable,
            "-m",
            "benchmark",
            "run",
            "--grid",
            str(grid),
            "--only",
            part,
            "--seeds",
            "0",
            "--root",
            str(root),
            "--no-wandb",
            "--workers",
            "1",
        ]
        out = subprocess.run(
            cmd, check=False, cwd=REPO, env=env, capture_output=True, text=True, timeout=7200
        )
        if out.returncode != 0:
            raise RuntimeError(f"run exited {out.returncode}: {out.stderr[-400:]}")
    from benchmark.records.store import load_records

    walls = [rec.compute.wall_time_s for _, rec in load_records([root])[0]]
    if not walls:
        raise RuntimeError(f"no records under {root}")
    return sum(walls), len(walls)


def step_costs(repeats: int = 3) -> dict[str, float]:
    """Median ms of CPU time a ResNet training step under each kernel setting (see the module doc)."""
    import statistics

    from benchmark.portable.mode import WATCHED

    # every kernel variable cleared (the same list records report), then each setting's own
    base = {k: v for k, v in os.environ.items() if k not in {*WATCHED, "P10_ONEDNN"}}
    base |= {"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    times: dict[str, list[float]] = {name: [] for name in SETTINGS}
    for i in range(repeats):
        for name in SETTINGS if i % 2 == 0 else reversed(SETTINGS):
            out = subprocess.run(
                [sys.executable, "-c", STEP],
                env={**base, **SETTINGS[name]},
                check=True,
                capture_output=True,
                text=True,
                timeout=600,
            )
            times[name].append(float(out.stdout.strip().splitlines()[-1]))
    return {name: statistics.median(v) for name, v in times.items()}


def measure(only: str = DEFAULT_ONLY, pairs: int = 1, log=print) -> dict:
    with tempfile.TemporaryDirectory(prefix="p10-") as tmp:
        grids = {}
        for arm in ("native", "portable"):
            raw = yaml.safe_load((REPO / "benchmark" / "grids" / "quickstart.yaml").read_text())
            raw["base"]["kernels"] = arm
            grids[arm] = Path(tmp) / f"quickstart_{arm}.yaml"
            grids[arm].write_text(yaml.safe_dump(raw))
        seconds = {"native": 0.0, "portable": 0.0}
        cells = 0
        order = []
        for i in range(pairs):
            for n, arm in enumerate(("native", "portable", "portable", "native")):
                s, cells = _arm(grids[arm], only, Path(tmp) / f"{arm}{i}_{n}")
                seconds[arm] += s
                order.append((arm, round(s, 1)))
                log(f"  P10 {arm}: {cells} cells in {s:.1f} s (load {os.getloadavg()[0]:.1f})")
    runs = 2 * pairs
    rate = {arm: 3600 * cells * runs / s for arm, s in seconds.items()}
    return {
        "cells": cells,
        "only": only,
        "order": order,
        "native_cells_h": rate["native"],
        "portable_cells_h": rate["portable"],
        "ratio": rate["portable"] / rate["native"],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=DEFAULT_ONLY)
    ap.add_argument("--pairs", type=int, default=1)
    ap.add_argument("--where", action="store_true", help="also time a ResNet step per setting")
    ap.add_argument("--steps-only", action="store_true", help="only time a ResNet step per setting")
    args = ap.parse_args()
    if args.steps_only:
        print(json.dumps({"step_ms": step_costs()}))
        return 0
    r = measure(args.only, args.pairs)
    if args.where:
        r["step_ms"] = step_costs()
    print(json.dumps(r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
