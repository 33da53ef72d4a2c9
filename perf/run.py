"""The performance suite (issues 10, 23, 34): P1-P8 and P10, each a ratio measured side by side in
one run, with its target.

    python perf/run.py [--only P1,...,P10] [--quick] [--threads 1] [--markdown] [--json F]
                             [--flower-python PATH]

P1 engine vs bare training loop, P2 batched vs PIL augmentation, P3 cached vs re-embedding
evaluation (each in this process, variants interleaved, CPU-time ratios: see perf/_timing.py),
P4 peak RSS of FedEMA with 100 vs 10 clients (perf/p4_memory.py, one subprocess per setting),
P5 cells/hour of the smoke grid, local launcher vs Ray with 2 workers
(perf/p5_grid_throughput.py), P6 the same cell through Flower's simulation engine, ours and a
bare loop in fresh processes (perf/p6_flower.py; Flower from the ``bench`` extra, its
interpreter given by ``--flower-python``), P7 10,000 vs 100 registered clients
(perf/p7_registered.py), P8 1,000 sampled clients of 10 images, engine vs bare loop
(perf/p8_client_overhead.py), P10 quickstart cells per hour with portable vs native kernels,
ABBA (perf/p10_portable_cost.py). Prints the machine first (CPU model, cores, torch version
and threads, load average), then one line per benchmark: the ratio, its target and whether it is
met. ``--markdown`` also prints the table of docs/performance.md. A benchmark that cannot run here
(say Ray missing) is reported as such; the others go on.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "perf"))


def machine() -> dict:
    import torch

    model = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "load_avg_start": round(os.getloadavg()[0], 1),
    }


def _sub(script: str, args: list[str], timeout: int) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO), "WANDB_MODE": "disabled"}
    out = subprocess.run(
        [sys.executable, str(REPO / "perf" / script), *args],
        check=False,
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if out.returncode not in (0, 1):
        raise RuntimeError(
            f"{script} exited {out.returncode}: {(out.stderr or out.stdout).strip()[-400:]}"
        )
    return out.stdout


def p1(quick: bool, log) -> dict:
    from p1_engine_overhead import TARGET, measure

    r = measure(reps=3 if quick else 7, rounds=1, log=log)
    return {
        "name": "P1 engine overhead",
        "value": f"{r['ratio']:.3f}x bare",
        "target": f">= {TARGET}x",
        "met": r["met"],
        "detail": f"{r['setting']}; engine CPU time in client loops {r['in_loop_share']:.1%}; "
        f"best-of {r['ratio_best']:.3f}, wall {r['ratio_wall']:.3f}; same first loss {r['same_first_loss']}",
        "raw": r,
    }


def p2(quick: bool, log) -> dict:
    from p2_augment import TARGET_SHARE, TARGET_SPEEDUP, measure

    r = measure(reps=3 if quick else 7, step_reps=1 if quick else 2, log=log)
    return {
        "name": "P2 augmentation",
        "value": f"{r['speedup']:.2f}x PIL; {r['share_measured']:.1%} of a step",
        "target": f">= {TARGET_SPEEDUP:g}x, <= {TARGET_SHARE:.0%}",
        "met": r["met"],
        "detail": f"batch {r['batch']} 32x32 two views: tensor {r['tensor_ms']:.0f} ms vs PIL {r['pil_ms']:.0f} ms "
        f"CPU (wall ratio {r['speedup_wall']:.2f}x); step = resnet18_cifar width {r['width']} "
        f"({r['step_s']:.1f} s CPU), width 64 estimated {r['share_w64_est']:.2%}",
        "raw": r,
    }


def p3(quick: bool, log) -> dict:
    from p3_eval import TARGET, measure

    r = measure(reps=2 if quick else 3, log=log)
    return {
        "name": "P3 evaluation",
        "value": f"{r['ratio']:.1f}x re-embedding",
        "target": f">= {TARGET:g}x",
        "met": r["met"],
        "detail": f"{r['setting']}; cached {r['cached_cpu_s']:.2f} s vs re-embed "
        f"{r['reembed_cpu_s']:.2f} s CPU (wall ratio {r['ratio_wall']:.1f}x); same top-1 {r['same_top1']}",
        "raw": r,
    }


def p4(quick: bool, log) -> dict:
    if not (REPO / "perf" / "p4_memory.py").exists():
        raise RuntimeError("perf/p4_memory.py is missing")
    args = ["--rounds-large", "15"] if quick else []
    out = _sub("p4_memory.py", args, timeout=3600)
    for line in out.splitlines():
        log("  P4 " + line)
    m = re.search(r"ratio.*?=\s*([0-9.]+)", out)
    if not m:
        raise RuntimeError(f"no ratio in p4_memory.py output: {out[-300:]}")
    ratio = float(m.group(1))
    rows = [
        json.loads(line.split(None, 1)[1]) for line in out.splitlines() if line.startswith("K=")
    ]
    detail = "; ".join(
        f"K={r['clients']}: {r['peak_rss_mb']:.0f} MB peak, {r['stateful']} stateful clients of "
        f"{r['state_mb']:.2f} MB"
        for r in rows
    )
    return {
        "name": "P4 memory",
        "value": f"{ratio:.2f}x peak RSS",
        "target": "<= 1.5x",
        "met": ratio <= 1.5,
        "detail": "FedEMA, 100 vs 10 clients (10 trained per round): " + detail,
        "raw": {"ratio": ratio, "runs": rows},
    }


def p5(quick: bool, log) -> dict:
    args = ["--only", "method=fedavg_simclr"] if quick else []
    out = _sub("p5_grid_throughput.py", args, timeout=5400)
    # the script's own summary lines, not the cells' chatter (Detectron2 logs)
    for line in out.splitlines():
        if line.startswith(("grid ", "local launcher", "ray,", "speed-up", "failed cells")):
            log("  P5 " + line)

    def rate(label: str) -> float:
        m = re.search(re.escape(label) + r".*?:\s*([0-9.]+) cells/hour", out)
        if not m:
            raise RuntimeError(f"no {label!r} line in p5 output: {out[-300:]}")
        return float(m.group(1))

    local, ray_all, ray_grid = rate("local launcher"), rate("incl. start-up"), rate("grid only")
    same = "records identical across launchers: True" in out
    return {
        "name": "P5 grid throughput",
        "value": f"ray/local {ray_grid / local:.2f}x",
        "target": "none (reported)",
        "met": None,
        "detail": f"smoke grid: local {local:.0f} cells/h, Ray 2 workers {ray_grid:.0f} cells/h "
        f"(incl. start-up {ray_all:.0f}); records identical {same}",
        "raw": {
            "local": local,
            "ray_grid": ray_grid,
            "ray_with_startup": ray_all,
            "same_records": same,
        },
    }


def p6(quick: bool, log, flower_python: str | None = None) -> dict:
    from p6_flower import measure

    r = measure(flower_python, reps=1 if quick else 2, rounds=3 if quick else 4, log=log)
    a, b = r["shapes"]
    value = f"Flower/ours {a['steady_flower_ours']:.2f}x, {b['steady_flower_ours']:.2f}x per round"

    def shape(s: dict) -> str:
        return (
            f"{s['shape']}: steady round Flower/ours {s['steady_flower_ours']:.2f}x, ours/bare "
            f"{s['steady_ours_bare']:.3f}x; end to end Flower {s['flower_wall']:.1f} s vs ours {s['ours_wall']:.1f} s "
            f"vs bare {s['bare_wall']:.1f} s wall ({s['e2e_flower_ours']:.2f}x; CPU {s['cpu_flower_ours']:.2f}x); "
            f"peak RSS (tree) {s['flower_peak_rss_mb']:.0f} vs {s['ours_peak_rss_mb']:.0f} vs "
            f"{s['bare_peak_rss_mb']:.0f} MB; same first-round losses {s['same_first_losses']}"
        )

    return {
        "name": "P6 Flower side by side",
        "value": value,
        "target": "> 1x (steady and end to end)",
        "met": r["met"],
        "detail": f"FedAvg-SimCLR quickstart cell, {r['versions']}, {r['rounds']} rounds, "
        f"{r['reps']} rep(s) each in a fresh process, 1 torch thread; "
        + "; ".join(shape(s) for s in r["shapes"]),
        "raw": r,
    }


def p7(quick: bool, log) -> dict:
    from p7_registered import TARGET, measure

    r = measure(reps=1 if quick else 2, rounds=5 if quick else 8, log=log)
    rows = "; ".join(
        f"{x['method']} {x['per_round']} sampled: RSS {x['rss_ratio']:.3f}x, round {x['round_ratio']:.3f}x"
        for x in r["results"]
    )
    parts = ", ".join(f"{p['name']} {p['s']:.2f} s" for p in r["partitioners"] if "tries" in p)
    return {
        "name": "P7 registered clients",
        "value": f"<= {r['worst']:.3f}x (10,000 vs 100)",
        "target": f"<= {TARGET}x",
        "met": r["met"],
        "detail": f"peak RSS and steady round, 10,000 vs 100 registered (digits tiled to 100k, 10 images a client): "
        f"{rows}; partitioners at K = 10,000 on 100k labels: {parts}",
        "raw": r,
    }


def p8(quick: bool, log) -> dict:
    from p8_client_overhead import TARGET, measure

    r = measure(reps=2 if quick else 4, log=log)
    return {
        "name": "P8 per-client overhead",
        "value": f"{r['ratio']:.3f}x bare",
        "target": f">= {TARGET}x",
        "met": r["met"],
        "detail": f"{r['setting']}; {r['engine_ms_per_client']:.2f} vs {r['bare_ms_per_client']:.2f}"
        f" ms CPU a client; best-of {r['ratio_best']:.3f}, wall {r['ratio_wall']:.3f}; same first loss "
        f"{r['same_first_loss']}",
        "raw": r,
    }


def p10(quick: bool, log) -> dict:
    from p10_portable_cost import DEFAULT_ONLY, measure, step_costs

    only = "method=fedavg_simclr,partition=iid" if quick else DEFAULT_ONLY
    r = measure(only, pairs=1, log=log)
    r["step_ms"] = step_costs(repeats=1 if quick else 3)
    steps = ", ".join(f"{k} {v:.1f}" for k, v in r["step_ms"].items())
    return {
        "name": "P10 portable kernels",
        "value": f"{r['ratio']:.2f}x native cells/h",
        "target": "none (reported)",
        "met": None,
        "detail": f"quickstart seed 0, {only}: {r['cells']} cells an arm, ABBA (native, portable, "
        f"portable, native) in fresh processes; portable {r['portable_cells_h']:.0f} vs "
        f"native {r['native_cells_h']:.0f} cells/h (cell wall time); arms {r['order']}; "
        f"where: ms CPU a resnet_micro w8 step (B 128, 16x16) {steps}",
        "raw": r,
    }


BENCHES = {
    "P1": p1,
    "P2": p2,
    "P3": p3,
    "P4": p4,
    "P5": p5,
    "P6": p6,
    "P7": p7,
    "P8": p8,
    "P10": p10,
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=",".join(BENCHES), help="comma-separated subset, e.g. P1,P3")
    ap.add_argument(
        "--quick", action="store_true", help="fewer repetitions (a smoke run of the suite)"
    )
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads for P1-P3 (1: CPU-time ratios free of OpenMP spinning)",
    )
    ap.add_argument(
        "--markdown", action="store_true", help="also print the table of docs/performance.md"
    )
    ap.add_argument("--json", default=None, help="write every figure to this file")
    ap.add_argument(
        "--flower-python",
        default=None,
        help="P6: interpreter with flwr[simulation] installed (default: this one, or $FSSL_BENCH_PYTHON)",
    )
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    info = machine()
    print(
        f"machine: {info['cpu']}, {info['cores']} cores, torch {info['torch']} ({info['threads']} thread(s) for "
        f"P1-P3, P6-P8), Python {info['python']}, load average {info['load_avg_start']} at start",
        flush=True,
    )

    def log(msg: str, **_: object) -> None:
        print(msg, flush=True)

    results = []
    for key in [k.strip().upper() for k in args.only.split(",") if k.strip()]:
        t0 = time.perf_counter()
        try:
            res = (
                p6(args.quick, log, args.flower_python)
                if key == "P6"
                else BENCHES[key](args.quick, log)
            )
        except Exception as exc:  # noqa: BLE001 - a benchmark that cannot run here is reported, the others go on
            res = {
                "name": key,
                "value": "not run",
                "target": "",
                "met": False,
                "detail": f"{type(exc).__name__}: {exc}",
            }
        res["seconds"] = round(time.perf_counter() - t0, 1)
        res["load_avg"] = round(os.getloadavg()[0], 1)
        results.append(res)
        log(
            f"{res['name']}: {res['value']}  (target {res['target'] or '-'}: {_met(res['met'])})  [{res['detail']}]"
        )
    info["load_avg_end"] = round(os.getloadavg()[0], 1)
    print(
        "\nsummary ("
        + f"load average {info['load_avg_start']} -> {info['load_avg_end']} on {info['cores']} cores)"
    )
    for r in results:
        print(
            f"  {r['name']:<22} {r['value']:<40} target {r['target'] or '-':<22} {_met(r['met'])}"
        )
    if args.markdown:
        print("\n| | measured | target | met | setting and details |\n|---|---|---|---|---|")
        for r in results:
            print(
                f"| {r['name']} | {r['value']} | {r['target']} | {_met(r['met'])} | {r['detail']} |"
            )
    if args.json:
        Path(args.json).write_text(
            json.dumps({"machine": info, "results": results}, indent=2, default=str) + "\n"
        )
    return 0


def _met(met: bool | None) -> str:
    return "n/a" if met is None else ("met" if met else "NOT met")


if __name__ == "__main__":
    raise SystemExit(main())
