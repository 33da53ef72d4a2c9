"""``python -m benchmark doctor --calibrate [--tiny] [--out REPORT.json]``: the first GPU the project
meets gives its numbers (docs/performance.md, "On a GPU").

On the present device, in one command and a bounded time (about 8 minutes on one H100-class GPU;
``--tiny`` under 3 minutes on 2 CPU cores, which CI runs):

1. **checks** the environment (``benchmark.calibration.device_checks``): device and driver, fp32 / TF32 /
   bf16 / fp16 with the gradient scaler, that the portable kernel mode says it does not apply on a
   GPU, and which optional parts are installed (each missing one named with how to get it);
2. **runs** the smoke grid's cells on the device in fp32 and in bf16 through the launcher a real run
   uses: every record must be written, sealed, verify, say it ran on this device and carry a score
   for every task (evaluated on the device); the detection cell runs once, in fp32, where
   Detectron2 is installed, and gives the Detectron2 figures (its iterations and their time);
3. **measures** one short cell per pre-training configuration of the GPU grids
   (``benchmark.calibration.cells``) on data in each hub dataset's exact format generated here:
   images per second and step time inside the engine's loop, the same step in a bare PyTorch loop,
   their ratio, seconds per client update outside the loop, peak device memory;
4. **projects** every shipped grid's pre-training cost on this device, per grid and per leaderboard
   track, with the assumptions (``benchmark.calibration.projection``), writes one JSON report and prints
   the table.

Every phase (smoke, detection, measurements, projection) runs inside one time budget: the smoke grid
starts no cell once ``SMOKE_SHARE`` of it is spent, the measurements start none once less than
``RESERVE_S`` is left (the first configuration is always measured). Each measurement is the median
of ``REPEATS`` client updates and bare loops, with its spread. On CUDA, the smoke grid and the
measurements run under ``torch.cuda.set_sync_debug_mode("warn")`` and the report lists the host
synchronisations caught (``benchmark.calibration.sync``).

Exit code: 0 when every check passed and every planned smoke cell and configuration ran; 1 when a
check failed (each named); 3 when none failed but the budget left a smoke cell unrun or a planned
configuration unmeasured ("incomplete", each named); 2 on a usage error.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmark.calibration.device_checks import FAILED, INCOMPLETE, OK, Check

if TYPE_CHECKING:
    from benchmark.contracts.cell import Cell

BUDGET_S = {"full": 450.0, "tiny": 160.0}  # the whole command, every phase
RESERVE_S = 20.0  # left for the projection and the report when the measurements stop
# the smoke grid (and its detection cell) stops starting cells once this share of the budget is
# spent; the measurements take the rest (the first configuration is always measured)
SMOKE_SHARE = 0.4
EXIT_OK, EXIT_FAILED, EXIT_INCOMPLETE = 0, 1, 3  # 2: a usage error (benchmark.core.errors)


@dataclass
class Clock:
    """Elapsed time and progress lines: ``[  12.3 s] what is happening``."""

    budget_s: float
    log: Callable[[str], None] = print
    start: float = field(default_factory=time.perf_counter)

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def say(self, msg: str) -> None:
        self.log(f"[{self.elapsed:6.1f} s] {msg}")

    def left(self) -> float:
        return self.budget_s - self.elapsed


# ------------------------------------------------------------------------------------------------
# the smoke grid


def _detection_ready() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("detectron2", "pycocotools"))


def _has_detection(cell: Cell) -> bool:
    return any(t.name == "coco_detection" for t in cell.tasks)


def _record_problems(cell: Cell, root: Path, device: str) -> list[str]:
    """Why a smoke cell's record is not a valid sealed record of a run on ``device`` with every
    task scored ([] when it is)."""
    from benchmark.records.store import verify_record
    from benchmark.runroot.rundir import RunDir

    rd = RunDir.of(cell, root)
    if not rd.done:
        return [f"no record ({rd.error_reason() if rd.failed else 'not run'})"]
    rec = rd.read_record()
    problems = list(verify_record(rec))
    if rec.status != "ok":
        problems.append(f"status {rec.status}")
    if rec.env.device.split(":")[0] != device.split(":")[0]:
        problems.append(f"ran on {rec.env.device}, not {device}")
    problems += [f"no {t.name} score" for t in cell.tasks if rec.score(t.name) is None]
    return problems


def smoke_cells(precisions: Sequence[str], device: str, root: Path) -> dict[str, list[Any]]:
    """The smoke grid's cells in each precision, validated as ``run`` validates them; the detection
    cell in fp32 only (its task evaluates in fp32 whatever the pre-training) and only where
    Detectron2 is installed."""
    from benchmark.commands.run import plan_run
    from benchmark.grids.expand import load_grid
    from benchmark.launchers.options import RunOptions

    spec = load_grid("smoke")
    out = {}
    for precision in precisions:
        grid = dataclasses.replace(spec, base={**spec.base, "precision": precision})
        plan = plan_run(grid, root=root, options=RunOptions(device=device, wandb=False))
        detection = precision == "fp32" and _detection_ready()
        out[precision] = [c for c in plan.cells if detection or not _has_detection(c)]
    return out


def smoke_passes(
    precisions: Sequence[str],
    device: str,
    root: Path,
    clock: Clock,
    deadline_s: float = math.inf,
) -> tuple[list[Check], dict[str, Any]]:
    """The smoke grid on ``device`` in each precision, in one launch through the launcher a real
    run uses, no cell started after ``deadline_s`` on the clock: (one check per precision, their
    part of the report)."""
    from benchmark.commands.run import build_launcher
    from benchmark.launchers.local import default_workers
    from benchmark.launchers.options import RunOptions

    t0 = time.perf_counter()
    by_precision = smoke_cells(precisions, device, root)
    cells = [c for p in precisions for c in by_precision[p]]
    # one process on a GPU (the cells share it); one worker per core on a CPU
    workers = 1 if device.startswith("cuda") else default_workers()
    launcher = build_launcher("local", RunOptions(device=device, wandb=False), {"workers": workers})
    done = [0]

    def progress(cell: Cell, outcome: Any) -> None:
        done[0] += 1
        clock.say(
            f"smoke {done[0]}/{len(cells)} {cell.method.name} {cell.precision}: {outcome.status}"
        )

    ran = launch_until(
        launcher.launch(cells, root, grid="smoke", progress=progress), deadline_s, clock
    )
    seconds = round(time.perf_counter() - t0, 1)
    checks, parts = [], {}
    for precision in precisions:
        mine = by_precision[precision]
        unrun = [c.cell_id for c in mine if c.cell_id not in ran]
        bad = {
            c.cell_id: p
            for c in mine
            if c.cell_id in ran and (p := _record_problems(c, root, device))
        }
        parts[precision] = {
            "cells": len(mine),
            "valid_records": len(mine) - len(bad) - len(unrun),
            "problems": {cid: "; ".join(p) for cid, p in bad.items()},
            "not_run": unrun,
            "detection_cell": any(_has_detection(c) and c.cell_id in ran for c in mine),
        }
        checks.append(_smoke_check(precision, len(mine), bad, unrun, device, seconds))
    parts["seconds"] = seconds
    return checks, parts


def launch_until(outcomes: Iterator[Any], deadline_s: float, clock: Clock) -> set[str]:
    """The ids of the cells the launch finished before the clock passed ``deadline_s``: no cell
    starts after it (the cells running then finish; the launcher cancels the rest)."""
    ran: set[str] = set()
    try:
        for outcome in outcomes:
            ran.add(outcome.cell_id)
            if clock.elapsed >= deadline_s:
                clock.say(f"the smoke grid's share of the budget ({deadline_s:.0f} s) is spent")
                break
    finally:
        close = getattr(outcomes, "close", None)
        if close is not None:
            close()
    return ran


def _smoke_check(
    precision: str, n: int, bad: dict, unrun: list[str], device: str, seconds: float
) -> Check:
    detail = f"{n - len(bad) - len(unrun)}/{n} cells wrote valid sealed records on {device}"
    if bad:
        detail += ": " + "; ".join(f"{cid[:8]} {'; '.join(p)}" for cid, p in bad.items())
    if unrun:
        detail += f"; {len(unrun)} not run: the time budget ended"
    status = FAILED if bad else INCOMPLETE if unrun else OK
    return Check(f"smoke {precision}", status, detail, seconds)


def detection_figures(root: Path) -> dict[str, Any]:
    """Detectron2's iterations on the shapes fixture (COCO format), from the fp32 smoke pass's
    detection cell; or why there are none."""
    from benchmark.commands.run import load_cells
    from benchmark.grids.expand import load_grid
    from benchmark.runroot.rundir import RunDir

    if not _detection_ready():
        return {"status": "missing", "detail": "Detectron2 or pycocotools not installed"}
    _, cells = load_cells(load_grid("smoke"))
    cell = next(c for c in cells if _has_detection(c))
    rd = RunDir.of(cell, root)
    if not rd.done:
        return {"status": "failed", "detail": rd.error_reason() if rd.failed else "not run"}
    s = rd.read_record().score("coco_detection")
    iters = int(s.card.settings.get("max_iter", 0) or 0)
    return {
        "status": "ok",
        "iterations": iters,
        "images_per_iteration": s.card.settings.get("ims_per_batch"),
        "task_seconds": round(s.wall_time_s, 2),
        "values": dict(s.values),
    }


# ------------------------------------------------------------------------------------------------
# the measurements


def measure_all(
    grids: dict[str, Sequence[Any]], device: str, tiny: bool, work: Path, clock: Clock
) -> tuple[list[Any], list[Check]]:
    """Every target measured (in order, until the budget's end) or said why not."""
    from benchmark.calibration import cells as cc
    from benchmark.calibration.projection import Measurement

    settings = cc.TINY if tiny else cc.FULL
    chosen = cc.targets({g: grids[g] for g in cc.gpu_grids()})
    chosen = cc.tiny_targets(chosen) if tiny else chosen
    plan = cc.plan_data(chosen, settings)
    clock.say(f"{len(chosen)} pre-training configurations to measure; writing their data")
    cc.write_data(plan, work / "data", clock.say)
    out, checks = [], []
    for i, t in enumerate(chosen, 1):
        # the first configuration is measured whatever the clock says: every run measures one
        tried = any(not m.status.startswith("not measured") for m in out)
        if t.key in plan.refused or (tried and clock.left() < RESERVE_S):
            why = plan.refused.get(t.key, "the time budget ended")
            out.append(Measurement(t.key, t.family, f"not measured: {why}", t.cell.cell_id, t.grid))
            continue
        root = plan.root(work / "data", t.key)
        m = cc.measure_target(t, plan.cells[t.key], settings, root, device)
        rate = f"{m.images_per_s:,.0f} img/s" if m.ok else m.status
        clock.say(
            f"measured {i}/{len(chosen)} {t.family} [{t.key[:8]}]: {rate} ({m.seconds:.1f} s)"
        )
        out.append(m)
        if m.status.startswith("failed"):
            checks.append(Check(f"measure {t.family} [{t.key[:8]}]", FAILED, m.status, m.seconds))
    checks.insert(0, measurements_check(out, device))
    return out, checks


def measurements_check(out: Sequence[Any], device: str) -> Check:
    """ok when every planned configuration was measured; incomplete (listing what was not, and
    why) otherwise. Running out of device memory counts as measured: it is the answer, for some
    configurations; when no configuration at all was measured the check fails (nothing was
    measured that a projection could use, whatever the reason)."""
    ok = sum(m.ok for m in out)
    detail = f"{ok} of {len(out)} configurations measured on {device}"
    if out and not ok:
        why: dict[str, int] = {}
        for m in out:
            why[m.status] = why.get(m.status, 0) + 1
        return Check(
            "measurements",
            FAILED,
            detail + "".join(f"; {n} {status}" for status, n in why.items()),
        )
    missing = [m for m in out if not m.ok and not m.status.startswith(("failed", "out of memory"))]
    if not missing and out:
        return Check("measurements", OK, detail)
    why: dict[str, int] = {}
    for m in missing:
        why[m.status] = why.get(m.status, 0) + 1
    detail += "".join(f"; {n} {status}" for status, n in why.items()) if why else ": none planned"
    return Check("measurements", INCOMPLETE, detail)


def project(grids: dict[str, Sequence[Any]], measurements: list[Any], meta: dict) -> dict:
    from benchmark.calibration.projection import Calibration, projection
    from benchmark.core.paths import TRACKS_FILE
    from benchmark.records.tracks import load_tracks

    cal = Calibration(
        device=meta["name"],
        tiny=False,  # a --tiny report projects from its own (micro) figures, labelled as such
        created_at="",
        measurements={m.key: m for m in measurements},
    )
    tracks = load_tracks(TRACKS_FILE) if TRACKS_FILE.exists() else []
    return projection(grids, cal, tracks)


# ------------------------------------------------------------------------------------------------
# the command


def _threads(device: str) -> int | None:
    """A CPU run measures one intra-op thread per cell, as the launchers run cells."""
    from benchmark.launchers.options import RunOptions

    return RunOptions(device=device).cell_threads()


def guarded(
    name: str, clock: Clock, fn: Callable[[], Any], default: Any
) -> tuple[Any, list[Check]]:
    """``fn()``, or ``default`` and a failed check named ``name`` when it raises: one phase that
    breaks (a missing dependency, a CUDA error) must not lose the others' results."""
    import traceback

    try:
        return fn(), []
    except Exception as exc:  # noqa: BLE001 - reported as the phase's failed check, by name
        clock.say(f"{name} FAILED: {type(exc).__name__}: {exc}")
        clock.log(traceback.format_exc())
        return default, [Check(name, FAILED, f"{type(exc).__name__}: {exc}")]


def _run_phases(device: str, tiny: bool, clock: Clock, checks: list[Check]) -> dict[str, Any]:
    """The smoke grid, Detectron2's figures, the measurements and the projection."""
    import torch

    from benchmark.calibration.sync import sync_check, sync_watch
    from benchmark.commands.run import load_cells

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="fssl-calibrate-") as tmp:
        work = Path(tmp)
        bf16 = all(c.status == OK for c in checks if c.name == "bf16")
        precisions = ("fp32", "bf16") if bf16 else ("fp32",)
        deadline = clock.budget_s * SMOKE_SHARE
        out["sync"] = {}
        with sync_watch(device, out["sync"]):
            (more, out["smoke"]), failed = guarded(
                "smoke",
                clock,
                lambda: smoke_passes(precisions, device, work / "smoke", clock, deadline),
                ([], {}),
            )
            checks += more + failed
            out["detection"], failed = guarded(
                "detection", clock, lambda: detection_figures(work / "smoke"), {}
            )
            checks += failed
            grids = {g: load_cells(g)[1] for g in _grid_names()}
            threads = torch.get_num_threads()
            torch.set_num_threads(_threads(device) or threads)
            try:
                (out["measurements"], more), failed = guarded(
                    "measurements",
                    clock,
                    lambda: measure_all(grids, device, tiny, work, clock),
                    ([], []),
                )
            finally:
                torch.set_num_threads(threads)
            checks += more + failed
        clock.say(f"host synchronisations caught: {out['sync'].get('detail', '-')}")
        checks.append(sync_check(out["sync"]))
    clock.say("projecting every shipped grid's cost")
    return {**out, "grids": grids}


def calibrate(
    *, device: str = "auto", tiny: bool = False, budget_s: float | None = None, log=print
) -> dict[str, Any]:
    """The whole calibration on ``device``; the report (``passed``, ``failed``: the checks that
    failed, by name)."""
    from benchmark.calibration.device_checks import device_info, environment_checks, resolve_device
    from benchmark.calibration.projection import REPORT_KIND, REPORT_VERSION
    from benchmark.core.canonical import to_plain
    from benchmark.portable.mode import state as kernel_state
    from benchmark.records.env_info import collect_env

    device = resolve_device(device)
    clock = Clock(budget_s or BUDGET_S["tiny" if tiny else "full"], log)
    clock.say(f"doctor --calibrate{' --tiny' if tiny else ''} on {device}")
    meta = device_info(device)
    checks = environment_checks(device, clock.say)
    phases = _run_phases(device, tiny, clock, checks)
    projected, failed = guarded(
        "projection",
        clock,
        lambda: project(phases["grids"], phases["measurements"], meta),
        {"assumptions": [], "grids": {}, "tracks": {}},
    )
    checks += failed
    report: dict[str, Any] = {"kind": REPORT_KIND, "version": REPORT_VERSION, "tiny": tiny}
    report.update(
        device=meta,
        env=to_plain(collect_env(device, kernels=kernel_state(device))),
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        checks=[asdict(c) for c in checks],
        smoke=phases["smoke"],
        detection=phases["detection"],
        measurements=[asdict(m) for m in phases["measurements"]],
        projection=projected,
        failed=[c.name for c in checks if c.failed],
        incomplete=[c.name for c in checks if c.status == INCOMPLETE],
        sync=phases["sync"],
        elapsed_s=round(clock.elapsed, 1),
        budget_s=clock.budget_s,
    )
    report["passed"] = not report["failed"]
    report["complete"] = not report["incomplete"]
    return report


def exit_code(report: dict[str, Any]) -> int:
    """0 every check passed and every planned phase ran; 1 a check failed; 3 nothing failed but
    the budget left something unmeasured or unrun ("incomplete")."""
    if report["failed"]:
        return EXIT_FAILED
    return EXIT_OK if report.get("complete", True) else EXIT_INCOMPLETE


def _grid_names() -> list[str]:
    from benchmark.grids.expand import grid_names

    return grid_names()


def write_report(report: dict[str, Any], path: Path) -> Path:
    import json

    from benchmark.records.files import atomic_write_text

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(report, indent=2, sort_keys=True, allow_nan=False) + "\n")
    return path


def default_out(report: dict[str, Any]) -> Path:
    """Where the report goes without ``--out``: the calibration folder's file for this device (where
    ``run --dry-run`` and ``plan`` look); a ``--tiny`` report beside it, never in its place."""
    from benchmark.calibration.projection import default_calibration_path

    path = default_calibration_path(report["device"]["name"])
    return path.with_name(path.stem + "-tiny.json") if report["tiny"] else path


# ------------------------------------------------------------------------------------------------
# the printed table


def _fmt(value: Any, spec: str, none: str = "-") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return none
    return format(value, spec)


def render_checks(report: dict[str, Any]) -> list[str]:
    lines = ["checks"]
    for c in report["checks"]:
        lines.append(f"  {c['status']:<11} {c['name']:<28} {c['detail']}")
    det = report.get("detection") or {}
    if det.get("status") == "ok":
        lines.append(
            f"  detection (Detectron2, shapes fixture in COCO format): {det['iterations']} iterations of "
            f"{det['images_per_iteration']} images, task {det['task_seconds']} s (training, then "
            f"evaluation), {', '.join(f'{k} {v:.2f}' for k, v in det['values'].items())}"
        )
    else:
        lines.append(f"  detection: {det.get('status', '-')}: {det.get('detail', '')}")
    return lines


def render_measurements(report: dict[str, Any]) -> list[str]:
    head = (
        f"  {'key':<8} {'method backbone@px precision':<38} {'img/s':>9} {'±':>5} {'step ms':>8} "
        f"{'bare ms':>8} {'±':>5} {'eng/bare':>8} {'upd ms':>7} {'peak GiB':>8} {'host GiB':>8} "
        f"{'outside':>7}  status"
    )
    lines = [
        "measured pre-training configurations (one short cell each, the median of its repeats; "
        "img/s inside the step loop)"
    ]
    lines.append(head)
    for m in report["measurements"]:
        peak, host = m.get("peak_mem_bytes"), m.get("peak_host_mem_bytes")
        lines.append(
            f"  {m['key'][:8]:<8} {m['family']:<38} {_fmt(m.get('images_per_s'), ',.0f'):>9} "
            f"{_fmt(m.get('images_per_s_spread'), '.0%'):>5} "
            f"{_fmt(m.get('step_s') and m['step_s'] * 1e3, '.1f'):>8} "
            f"{_fmt(m.get('bare_step_s') and m['bare_step_s'] * 1e3, '.1f'):>8} "
            f"{_fmt(m.get('bare_step_s_spread'), '.0%'):>5} "
            f"{_fmt(m.get('engine_vs_bare'), '.3f'):>8} "
            f"{_fmt(m.get('update_s') and m['update_s'] * 1e3, '.0f'):>7} "
            f"{_fmt(peak and peak / 2**30, '.2f'):>8} {_fmt(host and host / 2**30, '.2f'):>8} "
            f"{_fmt(m.get('outside_share'), '.0%'):>7}  {m['status']}"
            + (f" ({m['note']})" if m.get("note") else "")
        )
    lines.append(
        "  img/s: training images (each through all of the method's views) per second inside the "
        "engine's step loop, the median of the measured client updates, ± their spread ((max - min) "
        "/ median); step ms: one optimizer step there; bare ms: the same step repeated in a bare "
        "PyTorch loop on one batch (median of as many loops, ± spread); eng/bare: bare time / the "
        "engine's client-update time for the same steps (1 = no overhead; P1's ratio on this "
        "device); upd ms: a client update's time outside its step loop (data to the device, weights "
        "in and out); peak GiB: torch.cuda.max_memory_allocated over the cell (GPU only); host GiB: "
        "the process's peak resident memory during the cell; outside: the round's share outside the "
        "client updates (the server's step) at calibration scale"
    )
    return lines


def render_projection(report: dict[str, Any]) -> list[str]:
    proj = report["projection"]
    name = report["device"]["name"]
    lines = [f"projected cost on this device ({name}): pre-training, then the rest of each cell"]
    if report["tiny"]:
        lines.append(
            "  --tiny: micro backbones at 16 px on this device; NOT the grids' cost, a check of the path"
        )
    rows = [(g, s) for g, s in proj["grids"].items()]
    rows += [(f"track {t}", s) for t, s in proj["tracks"].items()]
    width = max([len("grid / track")] + [len(name) for name, _ in rows])
    lines.append(
        f"  {'grid / track':<{width}} {'cells':>6} {'pre-train h':>11} {'measured':>9} "
        f"{'plan est.':>10} {'rest h':>9} {'total h':>10}"
    )
    for label, s in rows:
        lines.append(
            f"  {label:<{width}} {s['cells']:>6} {s['device_hours']:>11.2f} "
            f"{_fmt(s['measured_share'], '.0%'):>9} {s['plan_estimate_hours']:>10.2f} "
            f"{_fmt(s.get('other_hours'), '.2f'):>9} {_fmt(s.get('total_hours'), '.2f'):>10}"
        )
    lines.append(
        "  rest h: server steps, downstream tasks and COCO detection (the FLOP model at the "
        "measured FLOP rate); plan est.: plan's fixed estimate of the pre-training"
    )
    lines.append("  assumptions:")
    lines += [f"  - {a}" for a in proj["assumptions"]]
    return lines


def render(report: dict[str, Any]) -> str:
    d = report["device"]
    lines = [
        f"device: {d['name']} ({d['device']}); torch {d['torch']}, CUDA {d.get('cuda') or '-'}, "
        f"Python {d['python']}; {report['elapsed_s']:.0f} s of a {report['budget_s']:.0f} s budget"
    ]
    lines += render_checks(report) + [""] + render_measurements(report) + [""]
    lines += render_projection(report) + [""]
    sync = report.get("sync") or {}
    lines.append(f"host synchronisations (CUDA sync debug mode): {sync.get('detail', '-')}")
    lines += [f"  {s['count']:>6}  {s['where']}  {s['message']}" for s in sync.get("sites", [])]
    failed, incomplete = report["failed"], report.get("incomplete", [])
    if failed:
        lines.append(f"{len(failed)} check(s) failed: {', '.join(failed)}")
    elif incomplete:
        lines.append(
            f"INCOMPLETE: {', '.join(incomplete)} cut short by the {report['budget_s']:.0f} s "
            "budget (exit 3); every check that ran passed"
        )
    else:
        lines.append("every check passed, every planned configuration measured")
    return "\n".join(lines)


def main_calibrate(device: str, tiny: bool, out: str | None, budget_s: float | None) -> int:
    from benchmark.calibration.projection import default_calibration_path

    report = calibrate(device=device, tiny=tiny, budget_s=budget_s)
    path = write_report(report, Path(out) if out else default_out(report))
    print(render(report))
    own = default_calibration_path(report["device"]["name"])
    where = (
        "a --tiny report: never used for a projection"
        if tiny
        else (
            "where `run --dry-run` and `plan` look on this device"
            if path.resolve() == own.resolve()
            else f"`run --dry-run` and `plan` look for {own} (or pass --calibration {path})"
        )
    )
    print(f"report: {path} ({where})")
    return exit_code(report)


__all__ = [
    "BUDGET_S",
    "EXIT_INCOMPLETE",
    "Clock",
    "calibrate",
    "default_out",
    "detection_figures",
    "exit_code",
    "launch_until",
    "main_calibrate",
    "measure_all",
    "measurements_check",
    "render",
    "smoke_cells",
    "smoke_passes",
    "write_report",
]
