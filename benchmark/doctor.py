"""``python -m benchmark doctor``: verify the reduced-precision path on this machine in minutes, before GPU-days.

For each method, one tiny digits cell (the conformance check's smoke cell) pre-trains for a few rounds in fp32 and
in the precision to check (default: bf16 where the device supports it, else fp16 with its gradient scaler), on the
device the grid would use. The per-round mean losses print side by side with their ratio; a round whose ratio
leaves ``1 ± tolerance``, a non-finite loss or a step the fp16 scaler skipped is flagged and the exit code is 1.
On the CPU it runs the fp32 / bf16 pair (torch runs bf16 autocast there), which is what CI checks.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

DEFAULT_TOLERANCE = 0.10  # reduced precision moves a few-round mean loss by well under 10 % on a healthy path


@dataclass(frozen=True)
class DoctorRow:
    method: str
    round: int
    loss_fp32: float
    loss_other: float
    skipped: float  # fp16 steps the loss scaler skipped in that round

    @property
    def ratio(self) -> float:
        if not (math.isfinite(self.loss_fp32) and math.isfinite(self.loss_other)) or self.loss_fp32 == 0:
            return math.nan
        return self.loss_other / self.loss_fp32

    def ok(self, tolerance: float) -> bool:
        if math.isnan(self.loss_fp32) and math.isnan(self.loss_other):
            return True  # a method that trains nothing (no_pretrain): nothing to compare
        return math.isfinite(self.ratio) and abs(self.ratio - 1) <= tolerance and self.skipped == 0


def default_precision(device: str) -> str:
    """bf16 where it runs natively (CPU autocast, CUDA with bf16 support), else fp16 with a scaler."""
    import torch

    dev = torch.device("cuda" if device == "auto" and torch.cuda.is_available() else
                       ("cpu" if device == "auto" else device))
    if dev.type == "cuda" and not torch.cuda.is_bf16_supported():
        return "fp16"
    return "bf16"


def _losses(method: str, precision: str, rounds: int, device: str, root: Path) -> list[dict[str, float]]:
    from benchmark.conformance import smoke_cell
    from benchmark.device import DeviceConfig
    from benchmark.rundir import PretrainDir
    from benchmark.stages import prepare, pretrain

    cell = smoke_cell(method, rounds=rounds, tasks=[], precision=precision)
    prep = prepare(cell, device=DeviceConfig(device=device).resolve())
    pre = pretrain(prep, PretrainDir(root / f"{method}-{precision}"))
    if pre is None or pre.status != "ok":
        return [{"round": float(rounds), "loss": math.nan}]
    return list(pre.history)


def doctor(methods: Sequence[str] | None = None, *, rounds: int = 3, device: str = "auto",
           precision: str | None = None) -> tuple[str, list[DoctorRow]]:
    """(precision checked, one row per method and round)."""
    from benchmark.registries import METHODS, load_builtins

    load_builtins()
    other = precision or default_precision(device)
    rows: list[DoctorRow] = []
    with tempfile.TemporaryDirectory(prefix="fssl-doctor-") as tmp:
        for name in methods or METHODS.names():
            a = _losses(name, "fp32", rounds, device, Path(tmp))
            b = _losses(name, other, rounds, device, Path(tmp))
            for ra, rb in zip(a, b, strict=False):
                rows.append(DoctorRow(name, int(ra["round"]), ra.get("loss", math.nan), rb.get("loss", math.nan),
                                      rb.get("scaler_skipped_steps", 0.0)))
    return other, rows


def render(other: str, rows: Sequence[DoctorRow], tolerance: float = DEFAULT_TOLERANCE) -> str:
    lines = [f"{'method':<16} {'round':>5} {'loss fp32':>10} {'loss ' + other:>10} {'ratio':>7}  check",
             "-" * 60]
    for r in rows:
        flag = "ok" if r.ok(tolerance) else ("SKIPPED STEPS" if r.skipped else "CHECK")
        lines.append(f"{r.method:<16} {r.round:>5} {r.loss_fp32:>10.4f} {r.loss_other:>10.4f} {r.ratio:>7.3f}  {flag}")
    bad = sum(not r.ok(tolerance) for r in rows)
    lines.append(f"{len(rows) - bad} of {len(rows)} rounds within {tolerance:.0%} of fp32" +
                 (f"; {bad} to check" if bad else ""))
    return "\n".join(lines)
