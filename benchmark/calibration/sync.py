"""What ``doctor --calibrate`` catches of host synchronisation on CUDA: the smoke grid and the
measurements run under ``torch.cuda.set_sync_debug_mode("warn")``, which warns at every CUDA call
that blocks the host on the device (a ``.item()``, a blocking copy, a ``nonzero``); the warnings
are collected, grouped by where they came from, and reported (count and sites), so that the first
GPU run says which loops still wait on the GPU. Off CUDA the watch says it does not apply.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

SITES = 20  # sites listed in the report, most frequent first


def _torch_setter(mode: str) -> None:
    import torch

    torch.cuda.set_sync_debug_mode(mode)


def _torch_getter() -> Any:
    import torch

    return torch.cuda.get_sync_debug_mode()


def is_sync_warning(message: str) -> bool:
    return "synchronizing" in message.lower() or "synchronization" in message.lower()


def _in_steps() -> bool:
    from benchmark.building_blocks.local_train import in_step_loop

    return in_step_loop()


@contextmanager
def sync_watch(
    device: str,
    report: dict[str, Any],
    setter: Callable[[str], None] = _torch_setter,
    getter: Callable[[], Any] = _torch_getter,
    in_steps: Callable[[], bool] = _in_steps,
) -> Iterator[dict[str, Any]]:
    """Within the block, on CUDA: sync debug mode "warn", every synchronisation warning caught and
    whether it came from inside a local update's step loop (``in_steps``, asked as it is raised);
    ``report`` filled with {mode, caught, in_steps, sites: [{where, message, count, in_steps}]} on
    the way out (the previous mode restored). Off CUDA: {mode: "n/a", ...}. :func:`sync_check`
    turns the report into the calibration's check."""
    if not device.startswith("cuda"):
        report.update(
            mode="n/a", caught=0, in_steps=0, sites=[], detail=f"not applicable on {device}"
        )
        yield report
        return
    before = getter()
    caught: list[tuple[warnings.WarningMessage, bool]] = []
    with warnings.catch_warnings(record=True) as log:
        warnings.simplefilter("always")
        record = warnings.showwarning  # catch_warnings(record=True) put its recorder here

        def show(message, category, filename, lineno, file=None, line=None) -> None:
            w = warnings.WarningMessage(message, category, filename, lineno, file, line)
            if is_sync_warning(str(message)):
                caught.append((w, in_steps()))
            else:
                record(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        setter("warn")
        try:
            yield report
        finally:
            setter(before if isinstance(before, str) else "default")
    for w in log:  # other warnings go on to where they would have gone, once the watch is off
        warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    report.update(summarise([w for w, _ in caught], [step for _, step in caught]))


def summarise(
    caught: list[warnings.WarningMessage], in_steps: list[bool] | None = None
) -> dict[str, Any]:
    flags = in_steps if in_steps is not None else [False] * len(caught)
    sites = Counter(
        (f"{w.filename}:{w.lineno}", str(w.message).splitlines()[0], step)
        for w, step in zip(caught, flags)
    )
    stepping = sum(flags)
    return {
        "mode": "warn",
        "caught": len(caught),
        "in_steps": stepping,
        "sites": [
            {"where": where, "message": msg, "count": n, "in_steps": step}
            for (where, msg, step), n in sites.most_common(SITES)
        ],
        "detail": f"{len(caught)} host synchronisation(s) at {len(sites)} site(s), "
        f"{stepping} inside a step loop",
    }


def sync_check(report: dict[str, Any]) -> Any:
    """The watch as a check: failed when a local update's step loop synchronised the host (the
    training loops take none, issue 45), ok when none did (those outside the steps are listed, not
    failed), n/a off CUDA."""
    from benchmark.calibration.device_checks import FAILED, NA, OK, Check

    if report.get("mode") != "warn":
        return Check("host synchronisation", NA, report.get("detail", "not watched"))
    if report.get("in_steps", 0):
        where = sorted({s["where"] for s in report.get("sites", []) if s.get("in_steps")})
        return Check(
            "host synchronisation",
            FAILED,
            f"{report['in_steps']} inside a step loop, at {', '.join(where) or '-'}",
        )
    return Check("host synchronisation", OK, report.get("detail", ""))


__all__ = ["SITES", "is_sync_warning", "summarise", "sync_check", "sync_watch"]
