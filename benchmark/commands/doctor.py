"""``python -m benchmark doctor``: verify the reduced-precision path on this machine in minutes,
before GPU-days.

For each method, one tiny digits cell (the conformance check's smoke cell) pre-trains for a few
rounds in fp32 and in the precision to check (default: bf16 where the device supports it, else fp16
with its gradient scaler), on the device the grid would use. The per-round mean losses print side by
side with their ratio; a round whose ratio leaves ``1 ± tolerance``, a non-finite loss or a step the
fp16 scaler skipped is flagged and the exit code is 1. Below the losses, each method's speed in both
precisions: local steps per second inside the clients' updates, and the share of the pre-training's
wall time spent outside them (the engine, the server's aggregation, broadcast and state store) —
where a GPU run loses time to anything but training. On the CPU it runs the fp32 / bf16 pair (torch
runs bf16 autocast there), which is what CI checks. Timings are wall clock with no synchronisation
added: a client update's time includes its asynchronous device work up to the one host read of its
losses at the end of the update.
"""

from __future__ import annotations

import argparse
import math
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmark.core.errors import UsageError

# reduced precision moves a few-round mean loss by well under 10 % on a healthy path
DEFAULT_TOLERANCE = 0.10


@dataclass(frozen=True)
class DoctorRow:
    method: str
    round: int
    loss_fp32: float
    loss_other: float
    skipped: float  # fp16 steps the loss scaler skipped in that round
    # (local steps, seconds inside the clients' updates, round seconds) per precision: the speed
    # table
    time_fp32: tuple[float, float, float] = (0.0, 0.0, 0.0)
    time_other: tuple[float, float, float] = (0.0, 0.0, 0.0)

    @property
    def ratio(self) -> float:
        if (
            not (math.isfinite(self.loss_fp32) and math.isfinite(self.loss_other))
            or self.loss_fp32 == 0
        ):
            return math.nan
        return self.loss_other / self.loss_fp32

    def ok(self, tolerance: float) -> bool:
        if math.isnan(self.loss_fp32) and math.isnan(self.loss_other):
            return True  # a method that trains nothing (no_pretrain): nothing to compare
        return math.isfinite(self.ratio) and abs(self.ratio - 1) <= tolerance and self.skipped == 0


def default_precision(device: str) -> str:
    """bf16 where it runs natively (CPU autocast, CUDA with bf16 support), else fp16 with a
    scaler."""
    import torch

    dev = torch.device(
        "cuda"
        if device == "auto" and torch.cuda.is_available()
        else ("cpu" if device == "auto" else device)
    )
    if dev.type == "cuda" and not torch.cuda.is_bf16_supported():
        return "fp16"
    return "bf16"


def _losses(
    method: str, precision: str, rounds: int, device: str, root: Path
) -> list[dict[str, float]]:
    from benchmark.building_blocks.device import DeviceConfig
    from benchmark.commands.check_method import smoke_cell
    from benchmark.engine.stages import prepare, pretrain
    from benchmark.runroot.rundir import PretrainDir

    cell = smoke_cell(method, rounds=rounds, tasks=[], precision=precision)
    prep = prepare(cell, device=DeviceConfig(device=device).resolve())
    pre = pretrain(prep, PretrainDir(root / f"{method}-{precision}"))
    if pre is None or pre.status != "ok":
        return [{"round": float(rounds), "loss": math.nan}]
    return list(pre.history)


def _timing(h: dict[str, float]) -> tuple[float, float, float]:
    return (
        float(h.get("client_steps", 0.0)),
        float(h.get("client_time_s", 0.0)),
        float(h.get("round_time_s", 0.0)),
    )


@dataclass(frozen=True)
class Speed:
    """One method's pre-training speed in one precision, summed over its rounds."""

    method: str
    precision: str
    steps: float
    client_s: float
    round_s: float

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.client_s if self.client_s > 0 and self.steps > 0 else math.nan

    @property
    def outside_share(self) -> float:
        """Share of the rounds' wall time spent outside the clients' updates."""
        return (
            max(self.round_s - self.client_s, 0.0) / self.round_s if self.round_s > 0 else math.nan
        )


def speeds(other: str, rows: Sequence[DoctorRow]) -> list[Speed]:
    """Per method, the fp32 and the checked precision's speed over every round the doctor ran."""
    out: list[Speed] = []
    for name in dict.fromkeys(r.method for r in rows):
        mine = [r for r in rows if r.method == name]
        for precision, attr in (("fp32", "time_fp32"), (other, "time_other")):
            steps, client_s, round_s = (sum(getattr(r, attr)[i] for r in mine) for i in range(3))
            out.append(Speed(name, precision, steps, client_s, round_s))
    return out


def doctor(
    methods: Sequence[str] | None = None,
    *,
    rounds: int = 3,
    device: str = "auto",
    precision: str | None = None,
) -> tuple[str, list[DoctorRow]]:
    """(precision checked, one row per method and round)."""
    from benchmark.contracts.registries import METHODS, load_builtins

    load_builtins()
    other = precision or default_precision(device)
    rows: list[DoctorRow] = []
    with tempfile.TemporaryDirectory(prefix="fssl-doctor-") as tmp:
        for name in methods or METHODS.names():
            a = _losses(name, "fp32", rounds, device, Path(tmp))
            b = _losses(name, other, rounds, device, Path(tmp))
            for ra, rb in zip(a, b, strict=False):
                rows.append(
                    DoctorRow(
                        name,
                        int(ra["round"]),
                        ra.get("loss", math.nan),
                        rb.get("loss", math.nan),
                        rb.get("scaler_skipped_steps", 0.0),
                        _timing(ra),
                        _timing(rb),
                    )
                )
    return other, rows


def render(other: str, rows: Sequence[DoctorRow], tolerance: float = DEFAULT_TOLERANCE) -> str:
    lines = [
        f"{'method':<16} {'round':>5} {'loss fp32':>10} {'loss ' + other:>10} {'ratio':>7}  check",
        "-" * 60,
    ]
    for r in rows:
        flag = "ok" if r.ok(tolerance) else ("SKIPPED STEPS" if r.skipped else "CHECK")
        lines.append(
            f"{r.method:<16} {r.round:>5} {r.loss_fp32:>10.4f} {r.loss_other:>10.4f} {r.ratio:>7.3f}  {flag}"
        )
    bad = sum(not r.ok(tolerance) for r in rows)
    lines.append(
        f"{len(rows) - bad} of {len(rows)} rounds within {tolerance:.0%} of fp32"
        + (f"; {bad} to check" if bad else "")
    )
    lines += [
        "",
        f"{'method':<16} {'precision':>9} {'steps/s':>9} {'outside clients':>16}",
        "-" * 54,
    ]
    for sp in speeds(other, rows):
        rate = f"{sp.steps_per_s:>9.2f}" if math.isfinite(sp.steps_per_s) else f"{'-':>9}"
        share = f"{sp.outside_share:>15.2%}" if math.isfinite(sp.outside_share) else f"{'-':>15}"
        lines.append(f"{sp.method:<16} {sp.precision:>9} {rate} {share}")
    lines.append(
        "steps/s: local steps per second inside the clients' updates; outside clients: share of the rounds' "
        "wall time spent elsewhere (engine, aggregation, state store)"
    )
    return "\n".join(lines)


LOSS_CHECK_ONLY = ("methods", "precision")
CALIBRATION_ONLY = ("tiny", "out", "budget")


def cmd_doctor(args: argparse.Namespace) -> int:
    if args.calibrate:
        return _calibrate(args)
    given = [f"--{n}" for n in CALIBRATION_ONLY if getattr(args, n) not in (None, False)]
    if given:
        raise UsageError(f"{', '.join(given)} go(es) with --calibrate")
    from benchmark.contracts.registries import METHODS, load_builtins

    if args.rounds < 1:
        raise UsageError(f"--rounds must be >= 1, got {args.rounds}")
    load_builtins()
    methods = (
        [METHODS.canonical(m.strip()) for m in args.methods.split(",")] if args.methods else None
    )
    other, rows = doctor(methods, rounds=args.rounds, device=args.device, precision=args.precision)
    print(render(other, rows, args.tolerance))
    return 0 if all(r.ok(args.tolerance) for r in rows) else 1


def _calibrate(args: argparse.Namespace) -> int:
    from benchmark.launchers.options import check_device

    given = [f"--{n}" for n in LOSS_CHECK_ONLY if getattr(args, n) is not None]
    if given:
        raise UsageError(f"{', '.join(given)} do(es) not go with --calibrate")
    if args.budget is not None and args.budget <= 0:
        raise UsageError(f"--budget must be > 0 seconds, got {args.budget}")
    check_device(args.device)
    if args.out is not None:
        _check_writable(Path(args.out))
    from benchmark.commands.calibrate import main_calibrate
    from benchmark.contracts.registries import load_builtins

    load_builtins()
    return main_calibrate(args.device, args.tiny, args.out, args.budget)


def _check_writable(path: Path) -> None:
    """--out must name a file that can be written, checked before minutes of measuring."""
    if path.is_dir():
        raise UsageError(f"--out {path} is a folder; name the report's file")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        probe = path.with_name(f".{path.name}.probe")
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"--out {path}: cannot write there ({exc.strerror or exc})") from None
