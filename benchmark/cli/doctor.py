"""``doctor``: what this machine can run (the loss check), and ``doctor --calibrate``: what it
costs here."""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmark.core.errors import UsageError

LOSS_CHECK_ONLY = ("methods", "precision")
CALIBRATION_ONLY = ("tiny", "out", "budget")


def cmd_doctor(args: argparse.Namespace) -> int:
    if args.calibrate:
        return _calibrate(args)
    given = [f"--{n}" for n in CALIBRATION_ONLY if getattr(args, n) not in (None, False)]
    if given:
        raise UsageError(f"{', '.join(given)} go(es) with --calibrate")
    from benchmark.commands.doctor import doctor, render
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
    from benchmark.calibration.measure import main_calibrate
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
