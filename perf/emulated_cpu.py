"""The shipped numbers on an emulated CPU of another vendor: a lead, not a proof.

    python perf/emulated_cpu.py fingerprint [--cpu EPYC-Milan]
    python perf/emulated_cpu.py cells [--cpu EPYC-Milan] [--only method=fedavg_simclr] [--seeds 0]

QEMU's user-mode emulator (``qemu-x86_64``, Debian's qemu-user; 10.0 or newer: 7.2 crashes in
``grid_sample``) runs this machine's Python and torch on a CPU model of its choice: the CPUID
instruction then reports that model's vendor, family, features and cache sizes, so MKL, oneDNN and
ATen choose their code as they would on it, while every instruction is computed by QEMU's exact
software floating point. ``fingerprint`` replays the shipped kernel fingerprint
(``results/records/kernel-fingerprint.json``) there and prints ``same``/``differs`` per operation,
as ``python -m benchmark verify --kernels`` does on a real machine; ``cells`` re-runs quickstart
cells there (``python -m benchmark run``, one process; a training cell runs hundreds of times slower
than natively: a FedAvg-SimCLR cell of 15 s had not finished after 93 CPU-minutes) and compares
every number with the shipped records, as ``verify`` does.

QEMU's TCG has no AVX-512: an emulated EPYC-Genoa is a Zen 4 without it. Where this emulation
reproduces records that a real AMD EPYC made (docs/reproducibility.md says which), it is a strong
lead for what that AMD CPU computes; only a run on the real CPU proves it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmark.commands import kernel_fingerprint as kf
from benchmark.portable import mode as portable
from benchmark.records.compare import compare_roots


def _qemu(cpu: str) -> list[str]:
    exe = shutil.which("qemu-x86_64")
    if exe is None:
        sys.exit("qemu-x86_64 not found: apt-get install qemu-user (10.0 or newer)")
    return [exe, "-cpu", cpu, os.path.realpath(sys.executable)]


def _env(kernels: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in portable.PORTABLE_ENV}
    env.update({k: v for k, v in portable.environment(kernels).items() if v is not None})
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=str(REPO))
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", WANDB_MODE="disabled")
    return env


def fingerprint(cpu: str, path: Path) -> int:
    body = kf.load(path)
    with tempfile.TemporaryDirectory(prefix="fssl-emulated-") as tmp:
        src, dst = Path(tmp) / "calls.json", Path(tmp) / "digests.json"
        src.write_text(json.dumps(body["calls"]), "utf-8")
        cmd = [
            *_qemu(cpu),
            "-m",
            "benchmark.commands.kernel_fingerprint",
            "replay",
            str(src),
            str(dst),
        ]
        subprocess.run(cmd, env=_env(body["kernels"]), check=True, stderr=subprocess.DEVNULL)
        verdicts = kf.compare(body, json.loads(dst.read_text("utf-8")))
    print(f"emulated {cpu} against {body['machine']} ({len(body['calls'])} calls)")
    for line in kf.render(verdicts):
        print(line)
    print(kf.summary(verdicts, []))
    return 0 if all(v.same for v in verdicts) else 1


def cells(cpu: str, only: str | None, seeds: str, results: Path, keep: Path | None) -> int:
    with tempfile.TemporaryDirectory(prefix="fssl-emulated-") as tmp:
        root = keep or Path(tmp) / "runs"
        cmd = [*_qemu(cpu), "-m", "benchmark", "run", "--grid", "quickstart", "--seeds", seeds]
        cmd += ["--workers", "1", "--no-wandb", "--root", str(root), "--device", "cpu"]
        cmd += ["--only", only] if only else []
        subprocess.run(cmd, env=_env(portable.NATIVE), check=False, stderr=subprocess.DEVNULL)
        problems = compare_roots(results, root, subset=True)
    for line in problems:
        print(line)
    print(
        f"emulated {cpu}: "
        + ("identical numbers" if not problems else f"{len(problems)} differences")
    )
    return 1 if problems else 0


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    p.add_argument("what", choices=["fingerprint", "cells"])
    p.add_argument("--cpu", default="EPYC-Milan", help="a QEMU CPU model (qemu-x86_64 -cpu help)")
    p.add_argument("--results", default=str(REPO / "results"))
    p.add_argument("--only", default=None, help="cells: a filter as run's --only")
    p.add_argument("--seeds", default="0", help="cells: the seeds (default 0)")
    p.add_argument("--root", default=None, help="cells: keep the emulated run root here")
    a = p.parse_args(argv)
    if a.what == "fingerprint":
        return fingerprint(a.cpu, Path(a.results) / kf.FINGERPRINT)
    return cells(a.cpu, a.only, a.seeds, Path(a.results), Path(a.root) if a.root else None)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
