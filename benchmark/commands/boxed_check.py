"""``check-method`` of a plugin method, in the box (issue 52 item 3).

A maintainer may run ``check-method`` on a stranger's plugin: its import and every call into it
then happen in a boxed child (``benchmark.submission.box``; the child is this module, run as
``python -m benchmark.commands.boxed_check /box``, job ``check``: own scratch folder as
working directory and home, an environment without credentials, no network, rlimits, a wall-clock
deadline; the embedded digits data is the one data set it sees). This process trusts only the
report the child writes, validated here: a child that exits without one, whatever its exit code,
is a refusal in one line. Where no box can run, a plugin is refused unless ``--unboxed`` (the same
child, without the namespaces). Built-in methods are the project's own code: they run in this
process as before.
"""

from __future__ import annotations

import math
from typing import Any

from benchmark.core.errors import UsageError

STATUSES = ("pass", "fail", "skip")
MAX_CHECKS = 200
MAX_DETAIL_CHARS = 2000


def is_plugin(name: str) -> bool:
    """Whether ``name`` is registered by an installed distribution rather than built in (read from
    the entry points' metadata, nothing imported). An unknown name is left to ``check-method``."""
    from benchmark.contracts.registries import METHODS
    from benchmark.core.registry import BUILT_IN

    return METHODS.origin(name) not in (BUILT_IN, None)


def check_in_box(name: str, *, rounds: int, knn: bool, live: bool, unboxed: bool = False) -> Any:
    """``check_method(name, ...)`` run in the box; the validated
    :class:`~benchmark.commands.check_method.ConformanceReport`. UsageError (one line) when no box
    can run and not ``unboxed``, or the child gives no valid report."""
    from benchmark.submission.box import BoxRefused, box_unavailable, run_boxed

    why = box_unavailable()
    if why is not None and not unboxed:
        raise UsageError(
            f"check-method {name}: a plugin's code runs in a box and none can run here ({why}): "
            "pass --unboxed only if you trust that code"
        )
    try:
        raw = run_boxed(
            {"kind": "check", "method": name, "rounds": rounds, "knn": knn, "live": live},
            what=f"check-method {name} in the box",
            unboxed=why is not None,
            embedded_data=True,
            child="benchmark.commands.boxed_check",
        )
    except BoxRefused as exc:
        raise UsageError(str(exc)) from None
    return report_of(raw, name)


def report_of(raw: Any, name: str) -> Any:
    """The ConformanceReport the child's answer ``raw`` describes, every field checked."""
    from benchmark.commands.check_method import ConformanceReport
    from benchmark.commands.check_result import CheckResult
    from benchmark.core.terminal import printable

    what = f"check-method {name} in the box"
    results = raw.get("results") if isinstance(raw, dict) else None
    method = raw.get("method") if isinstance(raw, dict) else None
    if not isinstance(method, str) or not isinstance(results, list) or not results:
        raise UsageError(f"{what}: the child's answer is not a report")
    if len(results) > MAX_CHECKS or len(method) > 200:
        raise UsageError(f"{what}: the child's report is larger than any check-method's")
    out = []
    for r in results:
        if (
            not isinstance(r, dict)
            or set(r) != {"name", "status", "detail", "seconds"}
            or not isinstance(r["name"], str)
            or len(r["name"]) > 100
            or r["status"] not in STATUSES
            or not isinstance(r["detail"], str)
            or not isinstance(r["seconds"], (int, float))
            or isinstance(r["seconds"], bool)
            or not math.isfinite(r["seconds"])
            or not 0 <= r["seconds"] < 1e7
        ):
            raise UsageError(f"{what}: the child's answer is not a report")
        detail = printable(r["detail"])[:MAX_DETAIL_CHARS]
        out.append(CheckResult(printable(r["name"]), r["status"], detail, float(r["seconds"])))
    return ConformanceReport(printable(method), tuple(out))


def _check(job: dict[str, Any], _box: Any) -> dict[str, Any]:
    """The child's job: the checks, as plain values."""
    import dataclasses

    from benchmark.commands.check_method import check_method

    report = check_method(
        str(job["method"]), rounds=int(job["rounds"]), knn=bool(job["knn"]), live=bool(job["live"])
    )
    return {"method": report.method, "results": [dataclasses.asdict(r) for r in report.results]}


__all__ = ["check_in_box", "is_plugin", "report_of"]


if __name__ == "__main__":
    import sys
    from pathlib import Path

    from benchmark.submission.box_child import serve

    sys.exit(serve(Path(sys.argv[1]), {"check": _check}))
