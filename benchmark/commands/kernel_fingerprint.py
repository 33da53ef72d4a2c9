"""``python -m benchmark verify --kernels``: whether this CPU computes every operation of the
shipped cells as the machine that made them did, in seconds, one line per operation.

The fingerprint (``results/records/kernel-fingerprint.json``, made with ``--write`` on the machine
that made the shipped records) lists every ATen operation the cells of a grid call, once per shape
and dtype (the census, ``benchmark.commands.kernel_census``), each with the digest of its result on
inputs made from integers (``benchmark.portable.ops``). ``verify --kernels`` replays every call
here, in a fresh process in the fingerprint's kernel mode, and prints per operation ``same`` or
``differs`` (with how many of its shapes); exit 0 when every operation is the same, 1 when one
differs (or the torch or NumPy version does), 2 when the check cannot be made: the mode does not
apply here (a GPU run, a CPU that is not x86-64 with AVX2) or the fingerprint is missing or edited.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark.core.canonical import digest
from benchmark.core.errors import UsageError
from benchmark.portable import mode as portable
from benchmark.records.env_info import machine_model

SCHEMA = 1
KIND = "fssl-bench kernel fingerprint"
FINGERPRINT = Path("records") / "kernel-fingerprint.json"  # under the results folder


class FingerprintError(UsageError):
    """The fingerprint file is missing, not one, or edited after it was made."""


@dataclass(frozen=True)
class OpVerdict:
    op: str
    calls: int
    differing: int
    errors: tuple[str, ...] = ()

    @property
    def same(self) -> bool:
        return self.differing == 0


def _versions() -> dict[str, str]:
    import numpy
    import torch

    return {"torch": torch.__version__.split("+")[0], "numpy": numpy.__version__}


# ----------------------------------------------------------------------------- the file


def integrity(body: Mapping[str, Any]) -> str:
    return digest({k: v for k, v in body.items() if k != "integrity"})


def load(path: Path) -> dict[str, Any]:
    """The fingerprint at ``path``; ``FingerprintError`` (one line) when it is missing, not a
    fingerprint of this schema, or edited after it was made."""
    path = Path(path)
    if not path.is_file():
        raise FingerprintError(
            f"no kernel fingerprint at {path} (it ships beside the records; "
            "`python -m benchmark verify --kernels --write` makes one)"
        )
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FingerprintError(f"{path} is not a kernel fingerprint: {exc}") from None
    if not isinstance(body, dict) or body.get("kind") != KIND or body.get("schema") != SCHEMA:
        raise FingerprintError(f"{path} is not a kernel fingerprint of schema {SCHEMA}")
    if body.get("integrity") != integrity(body):
        raise FingerprintError(
            f"{path} was edited after it was made (its integrity digest does not match); "
            "refused: restore it from the repository"
        )
    return body


def write(path: Path, body: dict[str, Any]) -> None:
    body = {**body, "integrity": integrity(body)}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(body, sort_keys=True, separators=(",", ":")) + "\n", "utf-8")
    os.replace(tmp, path)


# ----------------------------------------------------------------------------- the processes


def _child(args: list[str], kernels: str, timeout: float | None = None) -> None:
    """``python -m benchmark.commands.kernel_fingerprint ARGS`` in a fresh process of ``kernels``
    mode (its variables are read when torch starts)."""
    cmd = [sys.executable, "-m", "benchmark.commands.kernel_fingerprint", *args]
    # the child's environment as a copy: the census starts several children from threads at once,
    # and this process's own environment (its kernel mode) must not change under them
    env = {**portable.child_env(kernels), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, env=env, timeout=timeout, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise RuntimeError(f"{' '.join(args[:1])} process failed: {tail[0]}")


def replay_calls(calls: Sequence[Mapping[str, Any]], kernels: str) -> list[str]:
    """The digest of every call, replayed in a fresh process of ``kernels`` mode."""
    with tempfile.TemporaryDirectory(prefix="fssl-kernels-") as tmp:
        src, dst = Path(tmp) / "calls.json", Path(tmp) / "digests.json"
        src.write_text(json.dumps(list(calls)), "utf-8")
        _child(["replay", str(src), str(dst)], kernels)
        return json.loads(dst.read_text("utf-8"))


def _replay_main(src: str, dst: str) -> None:
    import torch

    from benchmark.portable.ops import replay

    portable.activate(portable.process_kernels(), "cpu")
    torch.set_num_threads(1)
    calls = json.loads(Path(src).read_text("utf-8"))
    Path(dst).write_text(json.dumps([replay(c) for c in calls]), "utf-8")


def _census_main(grid: str, seeds: str, part: str, dst: str) -> None:
    from benchmark.commands.kernel_census import census_cells
    from benchmark.commands.run import load_cells

    index, count = (int(x) for x in part.split("/"))
    _, cells = load_cells(grid, seeds=[int(s) for s in seeds.split(",")])
    census = census_cells(cells[index::count])
    found = {"calls": census.calls, "skipped": census.skipped, "vml": census.vml}
    Path(dst).write_text(json.dumps(found), "utf-8")


# ----------------------------------------------------------------------------- make and check


def make(
    grid: str,
    seeds: Sequence[int],
    out: Path,
    *,
    workers: int = 1,
    progress: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Census ``grid``'s cells of ``seeds`` (``workers`` processes), replay every call and write
    the fingerprint to ``out``."""
    from benchmark.commands.run import load_cells

    _, cells = load_cells(grid, seeds=list(seeds))
    modes = {c.kernels for c in cells}
    if len(modes) != 1:
        raise UsageError(f"grid {grid} mixes kernel modes {sorted(modes)}: one fingerprint each")
    kernels = modes.pop()
    if (reason := portable.not_applicable("cpu")) is not None and kernels == portable.PORTABLE:
        raise UsageError(f"the portable kernel mode does not apply here: {reason}")
    workers = max(1, min(workers, len(cells)))
    progress(f"census: {len(cells)} cells of {grid} in {workers} process(es)")
    calls, counts = _census(grid, seeds, workers, kernels)
    if counts["vml"] and kernels == portable.PORTABLE:
        progress(
            "warning: these operations ran in MKL's vector maths, whose bits depend on the CPU's "
            f"vendor even under the portable mode: {counts['vml']} (benchmark.portable.math_ops)"
        )
    progress(f"census: {len(calls)} calls; replaying them")
    digests = replay_calls(calls, kernels)
    kept = [{**c, "digest": d} for c, d in zip(calls, digests) if not d.startswith("error")]
    failed = sorted({c["op"] for c, d in zip(calls, digests) if d.startswith("error")})
    body = {
        "kind": KIND,
        "schema": SCHEMA,
        "grid": grid,
        "seeds": list(seeds),
        "cells": len(cells),
        "kernels": kernels,
        "machine": machine_model("cpu"),
        "state": _child_state(kernels),
        **_versions(),
        "calls": kept,
        "not_written": counts["skipped"],
        "vml": counts["vml"],
        "not_replayable": failed,
    }
    write(out, body)
    progress(f"wrote {out}: {len(kept)} calls of {len({c['op'] for c in kept})} operations")
    return body


def _census(
    grid: str, seeds: Sequence[int], workers: int, kernels: str
) -> tuple[list[dict[str, Any]], dict[str, dict[str, int]]]:
    """(every call, in key order; {"skipped": ..., "vml": ...} counts by operator) of the grid's
    cells, split over ``workers`` processes."""
    from concurrent.futures import ThreadPoolExecutor

    with tempfile.TemporaryDirectory(prefix="fssl-census-") as tmp:
        outs = [Path(tmp) / f"part{i}.json" for i in range(workers)]
        seed_arg = ",".join(str(s) for s in seeds)
        with ThreadPoolExecutor(workers) as pool:
            jobs = [
                pool.submit(_child, ["census", grid, seed_arg, f"{i}/{workers}", str(o)], kernels)
                for i, o in enumerate(outs)
            ]
            for job in jobs:
                job.result()
        parts = [json.loads(o.read_text("utf-8")) for o in outs]
    merged: dict[str, dict[str, Any]] = {}
    counts: dict[str, dict[str, int]] = {"skipped": {}, "vml": {}}
    for part in parts:
        for key, call in part["calls"].items():
            merged.setdefault(key, call)
        for what, total in counts.items():
            for op, n in part[what].items():
                total[op] = total.get(op, 0) + n
    return [merged[k] for k in sorted(merged)], {
        k: dict(sorted(v.items())) for k, v in counts.items()
    }


def _child_state(kernels: str) -> dict[str, Any]:
    """The kernel state (``portable.state``) a fresh process of ``kernels`` mode reports."""
    with tempfile.TemporaryDirectory(prefix="fssl-kernels-") as tmp:
        dst = Path(tmp) / "state.json"
        _child(["state", str(dst)], kernels)
        return json.loads(dst.read_text("utf-8"))


def _state_main(dst: str) -> None:
    import torch  # noqa: F401 - the state names ATen's instruction set

    portable.activate(portable.process_kernels(), "cpu")
    Path(dst).write_text(json.dumps(portable.state("cpu")), "utf-8")


def compare(body: Mapping[str, Any], digests: Sequence[str]) -> list[OpVerdict]:
    """Per operation: how many of its calls give another digest here than in ``body``."""
    by_op: dict[str, list[tuple[str, str]]] = {}
    for call, here in zip(body["calls"], digests):
        by_op.setdefault(call["op"], []).append((call["digest"], here))
    return [
        OpVerdict(
            op,
            len(pairs),
            sum(a != b for a, b in pairs),
            tuple(sorted({b for _, b in pairs if b.startswith("error")})),
        )
        for op, pairs in sorted(by_op.items())
    ]


def check(body: Mapping[str, Any]) -> tuple[list[OpVerdict], list[str]]:
    """Replay ``body`` here: (per-operation verdicts, the version lines that differ)."""
    versions = _versions()
    notes = [
        f"{name} {versions[name]} here, {body.get(name)} where the fingerprint was made: the "
        "shipped numbers need the same version"
        for name in ("torch", "numpy")
        if versions[name] != body.get(name)
    ]
    return compare(body, replay_calls(body["calls"], body["kernels"])), notes


def applicability(device: str = "cpu") -> str | None:
    """Why the fingerprint says nothing about runs on ``device`` here, or None."""
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    return portable.not_applicable(device)


def render(verdicts: Iterable[OpVerdict]) -> list[str]:
    lines = []
    for v in verdicts:
        status = "same" if v.same else "differs"
        detail = f"{v.calls} shape(s)" if v.same else f"{v.differing} of {v.calls} shapes"
        lines.append(f"{status:8s} {v.op}  ({detail})" + (f"  {v.errors[0]}" if v.errors else ""))
    return lines


def summary(verdicts: Sequence[OpVerdict], notes: Sequence[str]) -> str:
    bad = [v for v in verdicts if not v.same]
    text = f"{len(verdicts)} operations: {len(verdicts) - len(bad)} same, {len(bad)} differ"
    return text + (f"; {len(notes)} version difference(s)" if notes else "")


def main(argv: Sequence[str]) -> None:
    """The child processes' entry: ``replay SRC DST``, ``census GRID SEEDS I/N DST``,
    ``state DST``."""
    what, *rest = argv
    {"replay": _replay_main, "census": _census_main, "state": _state_main}[what](*rest)


__all__ = [
    "FINGERPRINT",
    "FingerprintError",
    "OpVerdict",
    "applicability",
    "check",
    "compare",
    "load",
    "make",
    "render",
    "replay_calls",
    "summary",
    "write",
]

if __name__ == "__main__":
    main(sys.argv[1:])
