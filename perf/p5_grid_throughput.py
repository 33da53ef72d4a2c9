"""P5 grid throughput: cells per hour of the smoke grid, local launcher vs Ray with 2 workers (issue
10).

    python perf/p5_grid_throughput.py [--grid smoke] [--only method=fedavg_simclr] [--workers 2]

Each launcher runs the same cells into a fresh temporary run root (nothing is skipped), with W&B
off. The local launcher runs cells one after another in this process; Ray runs one cell per worker
with ``num_cpus=1`` each. Every launcher pins a CPU cell to ``FSSL_CELL_THREADS`` (default 1)
intra-op threads, so that the records agree bit for bit. Ray's figure is given twice: with the
cluster start-up included (what a user waits for) and for the grid alone. The records of the two
runs are compared too: the launchers must agree on every number.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# used when benchmark/grids/smoke.yaml does not exist (yet): the smallest real cells, several
# methods
FALLBACK_GRID = """\
name: p5_smoke
description: smoke-sized cells on 16x16 digits (fallback for perf/p5_grid_throughput.py)
base:
  dataset: digits
  backbone: {name: resnet_micro, width: 4}
  partition: iid
  fl: {num_clients: 2, participation: 1.0, rounds: 2, local_epochs: 1}
  tasks: [knn, {name: linear_probe, epochs: 1}]
method_common: {batch_size: 16}
axes:
  method: [fedavg_simclr, local_ssl, no_pretrain]
  seed: [0, 1]
"""


def _comparable(cells, root):
    from benchmark.runroot.rundir import RunDir

    out = {}
    for c in cells:
        if not RunDir.of(c, root).done:
            continue
        r = RunDir.of(c, root).read_record()
        out[c.cell_id] = (
            r.final_state_digest,
            r.comm.bytes_up,
            r.comm.bytes_down,
            sorted((s.card.card_id, tuple(sorted(s.values.items()))) for s in r.scores),
        )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--grid",
        default=None,
        help="grid name or path (default: smoke, else a built-in smoke grid)",
    )
    ap.add_argument("--only", default=None)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ["WANDB_MODE"] = "disabled"

    from benchmark.grids.expand import expand_grid, load_grid, parse_only
    from benchmark.launchers.local import LocalLauncher
    from benchmark.launchers.options import RunOptions
    from benchmark.launchers.ray import RayLauncher

    tmp = Path(tempfile.mkdtemp(prefix="p5_"))
    grid_arg = args.grid
    if grid_arg is None:
        grid_arg = "smoke" if (REPO / "benchmark" / "grids" / "smoke.yaml").exists() else None
    if grid_arg is None:
        (tmp / "p5_smoke.yaml").write_text(FALLBACK_GRID)
        grid_arg = str(tmp / "p5_smoke.yaml")
    grid = load_grid(grid_arg)
    cells = expand_grid(grid, only=parse_only(args.only))
    print(
        f"grid {grid.name!r}: {len(cells)} cells; machine: {os.cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.1f}"
    )

    t0 = time.perf_counter()
    local = list(
        LocalLauncher(options=RunOptions(device="cpu"), workers=1).launch(
            cells, tmp / "local", grid=grid.name
        )
    )
    t_local = time.perf_counter() - t0

    import ray

    t0 = time.perf_counter()
    ray.init(
        num_cpus=args.workers,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": str(REPO), "RAY_USAGE_STATS_ENABLED": "0"}},
    )
    t_start = time.perf_counter() - t0
    t1 = time.perf_counter()
    remote = list(
        RayLauncher(cpus_per_cell=1, options=RunOptions(device="cpu")).launch(
            cells, tmp / "ray", grid=grid.name
        )
    )
    t_ray = time.perf_counter() - t1
    ray.shutdown()

    bad = [o for o in local + remote if o.status not in ("done", "diverged")]
    a, b = _comparable(cells, tmp / "local"), _comparable(cells, tmp / "ray")
    same = a == b and len(a) > 0
    n = len(cells)
    print(
        f"local launcher (1 process)        : {n / t_local * 3600:8.1f} cells/hour  ({t_local:.1f} s)"
    )
    print(
        f"ray, {args.workers} workers, incl. start-up : {n / (t_start + t_ray) * 3600:8.1f} cells/hour  "
        f"({t_start + t_ray:.1f} s, start-up {t_start:.1f} s)"
    )
    print(
        f"ray, {args.workers} workers, grid only      : {n / t_ray * 3600:8.1f} cells/hour  ({t_ray:.1f} s)"
    )
    print(
        f"speed-up (grid only): {t_local / t_ray:.2f}x; records identical across launchers: {same} ({len(a)} records each)"
    )
    if bad:
        print(
            "failed cells (counted in cells/hour; failures are kept, the grid goes on): "
            + "; ".join(f"{o.cell_id}: {(o.error or '')[:120]}" for o in bad)
        )
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
