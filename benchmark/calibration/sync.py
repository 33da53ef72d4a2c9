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


@contextmanager
def sync_watch(
    device: str,
    report: dict[str, Any],
    setter: Callable[[str], None] = _torch_setter,
    getter: Callable[[], Any] = _torch_getter,
) -> Iterator[dict[str, Any]]:
    """Within the block, on CUDA: sync debug mode "warn", every synchronisation warning caught;
    ``report`` filled with {mode, caught, sites: [{where, message, count}]} on the way out (the
    previous mode restored). Off CUDA: {mode: "n/a", ...}."""
    if not device.startswith("cuda"):
        report.update(mode="n/a", caught=0, sites=[], detail=f"not applicable on {device}")
        yield report
        return
    before = getter()
    caught: list[warnings.WarningMessage] = []
    with warnings.catch_warnings(record=True) as log:
        warnings.simplefilter("always")
        setter("warn")
        try:
            yield report
        finally:
            setter(before if isinstance(before, str) else "default")
            caught = [w for w in log if is_sync_warning(str(w.message))]
            # other warnings go on to where they would have gone
            for w in log:
                if w not in caught:
                    warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    report.update(summarise(caught))


def summarise(caught: list[warnings.WarningMessage]) -> dict[str, Any]:
    sites = Counter((f"{w.filename}:{w.lineno}", str(w.message).splitlines()[0]) for w in caught)
    return {
        "mode": "warn",
        "caught": len(caught),
        "sites": [
            {"where": where, "message": msg, "count": n}
            for (where, msg), n in sites.most_common(SITES)
        ],
        "detail": f"{len(caught)} host synchronisation(s) at {len(sites)} site(s)",
    }


__all__ = ["SITES", "is_sync_warning", "summarise", "sync_watch"]
