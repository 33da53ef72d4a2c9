"""P10 portable kernels' cost: quickstart cells per hour, portable vs native (issue 34).

    python benchmarks/p10_portable_cost.py [--only "method=fedavg_simclr;method=fedmae"] [--pairs 1]

The same quickstart cells run once with portable kernels and once natively (the quickstart grid with
``kernels: portable`` and with ``kernels: native``, written to a temporary folder), each arm a fresh
``python -m benchmark run --workers 1`` into its own temporary root, in ABBA order (native,
portable, portable, native per pair) so that a drift of the shared machine's speed hits both arms
alike. Cells per hour count each cell's own wall time (``compute.wall_time_s`` of its record:
pre-training and evaluation, not the process start-up); the ratio is portable / native cells per
hour.
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
DEFAULT_ONLY = "method=fedavg_simclr,partition=iid;method=fedmae,partition=iid"


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
    args = ap.parse_args()
    r = measure(args.only, args.pairs)
    print(json.dumps(r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
