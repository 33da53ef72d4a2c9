"""``python -m benchmark verify``: re-run shipped cells on this machine and compare their numbers
with the records.

By default seed 0 of the quickstart grid (26 cells, 6.5 minutes on 2 CPU cores) against
``results/``: each cell runs from scratch in a temporary run root (``--root`` keeps it), on the CPU,
in the kernel mode its grid asks for (the quickstart: portable, docs/reproducibility.md);
every score and the final-state digest (with the partition digest, rounds, bytes and backbone
fingerprint: ``benchmark.records.compare``) must equal the shipped record's. One line per cell,
identical or different, with the kernel settings and CPU of both sides; exit 0 when every cell is
identical, 1 otherwise (a cell without a shipped record, with a record that fails its integrity
check, or one that failed here, is not identical).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark.commands.run import parse_seeds
from benchmark.core.errors import UsageError
from benchmark.portable.mode import describe
from benchmark.records.compare import differences
from benchmark.records.store import load_records, verify_record


@dataclass(frozen=True)
class Verdict:
    cell_id: str
    label: str
    # identical | different | missing (no shipped record) | invalid (the shipped record fails its
    # integrity check) | failed (did not finish here)
    status: str
    lines: tuple[str, ...] = ()  # what differs, or why it is missing / failed
    shipped: str = ""  # the shipped record's kernel settings and CPU
    here: str = ""  # this run's

    @property
    def ok(self) -> bool:
        return self.status == "identical"


def _side(record: Any) -> str:
    return f"{describe(record.env.kernels)} on {record.env.machine or 'an unrecorded CPU'}"


def verify(
    grid: str = "quickstart",
    *,
    results: Path = Path("results"),
    only: str | None = None,
    seeds: Sequence[int] | None = (0,),
    limit: int | None = None,
    root: Path | None = None,
    workers: int = 0,
    progress: Callable[[Verdict], None] | None = None,
) -> list[Verdict]:
    """Re-run the chosen cells of ``grid`` into ``root`` (a temporary folder when None) and compare
    each with the record of the same cell id under ``results``. Cells without a shipped record are
    reported, not run."""
    from benchmark.commands.run import load_cells
    from benchmark.launchers.local import LocalLauncher
    from benchmark.launchers.options import RunOptions
    from benchmark.runroot.rundir import RunDir

    _, cells = load_cells(grid, only=only, seeds=seeds)
    cells = cells[:limit] if limit is not None else cells
    shipped = {r.cell_id: r for _, r in load_records([Path(results)])[0]}
    verdicts: dict[str, Verdict] = {}
    for cell in cells:
        if cell.cell_id not in shipped:
            verdicts[cell.cell_id] = Verdict(
                cell.cell_id, cell.label(), "missing", (f"no record of this cell under {results}",)
            )
        elif problems := verify_record(shipped[cell.cell_id]):  # edited after the runner sealed it
            verdicts[cell.cell_id] = Verdict(
                cell.cell_id, cell.label(), "invalid", tuple(problems), _side(shipped[cell.cell_id])
            )
    from benchmark.engine.sharing import computed_and_copies
    from benchmark.launchers.order import longest_first

    # the cells that compute longest first (their shipped records' times, as `run`), then the cells
    # that copy another's numbers (benchmark.engine.sharing), after the cells they copy
    computed, copies = computed_and_copies([c for c in cells if c.cell_id not in verdicts])
    took = {c.cell_id: shipped[c.cell_id].compute.wall_time_s for c in computed}
    todo = longest_first(computed, took) + copies
    with tempfile.TemporaryDirectory(prefix="fssl-verify-") as tmp:
        run_root = Path(root) if root is not None else Path(tmp)
        launcher = LocalLauncher(options=RunOptions(device="cpu", wandb=False), workers=workers)
        by_id = {c.cell_id: c for c in todo}
        for outcome in launcher.launch(todo, run_root, grid=f"verify:{grid}"):
            cell, theirs = by_id[outcome.cell_id], shipped[outcome.cell_id]
            rd = RunDir.of(cell, run_root)
            if not rd.done:
                v = Verdict(
                    cell.cell_id,
                    cell.label(),
                    "failed",
                    (f"{outcome.status}: {outcome.error}",),
                    _side(theirs),
                )
            else:
                ours = rd.read_record()
                diff = differences(theirs, ours)
                v = Verdict(
                    cell.cell_id,
                    cell.label(),
                    "different" if diff else "identical",
                    tuple(diff),
                    _side(theirs),
                    _side(ours),
                )
            verdicts[cell.cell_id] = v
            if progress is not None:
                progress(v)
    return [verdicts[c.cell_id] for c in cells]


def render(v: Verdict) -> str:
    lines = [f"{v.status:9s}  {v.cell_id}  {v.label}"]
    if v.shipped:
        lines.append(f"           shipped: {v.shipped}")
    if v.here:
        lines.append(f"           here:    {v.here}")
    lines += [f"           {line}" for line in v.lines]
    return "\n".join(lines)


def summary(verdicts: Sequence[Verdict]) -> str:
    statuses = ("identical", "different", "missing", "invalid", "failed")
    counts = {s: sum(v.status == s for v in verdicts) for s in statuses}
    text = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    return f"{len(verdicts)} cells: {text or 'none chosen'}"


__all__ = ["Verdict", "render", "summary", "verify"]


KERNELS_HINT = (
    "some cells differ: `python -m benchmark verify --kernels` names, in seconds, the operations "
    "this CPU computes otherwise than the machine that made the records (put its output in a "
    "bug report)"
)


def _results(args: argparse.Namespace) -> Path:
    results = Path(args.results)
    if not results.is_dir():
        raise UsageError(
            f"no results folder at {results.resolve()}: run verify from a checkout of the "
            "repository (its results/ holds the shipped records) or name one with --results"
        )
    return results


def cmd_verify(args: argparse.Namespace) -> int:
    if args.write and not args.kernels:
        raise UsageError("--write makes the kernel fingerprint: use it with --kernels")
    if args.kernels:
        return cmd_kernels(args)

    if args.limit is not None and args.limit < 1:
        raise UsageError(f"--limit must be >= 1, got {args.limit}")
    results = _results(args)
    verdicts = verify(
        args.grid,
        results=results,
        only=args.only,
        seeds=parse_seeds(args.seeds),
        limit=args.limit,
        root=Path(args.root) if args.root else None,
        workers=args.workers,
        progress=lambda v: print(render(v), flush=True),
    )
    for v in verdicts:
        if v.status in ("missing", "invalid"):  # not run, so not printed as they finished
            print(render(v))
    print(summary(verdicts))
    if any(v.status == "different" for v in verdicts):
        print(KERNELS_HINT)
    return 0 if verdicts and all(v.ok for v in verdicts) else 1


def cmd_kernels(args: argparse.Namespace) -> int:
    """``verify --kernels [--write]``: 0 every operation the same, 1 one differs, 2 no check."""
    from benchmark.commands import kernel_fingerprint as kf

    path = Path(args.fingerprint) if args.fingerprint else _results(args) / kf.FINGERPRINT
    if args.write:
        kf.make(
            args.grid, parse_seeds(args.seeds), path, workers=args.workers or os.cpu_count() or 1
        )
        return 0
    body = kf.load(path)  # a missing or edited file is refused before anything runs
    if (reason := kf.applicability(args.device)) is not None:
        raise UsageError(f"the kernel fingerprint does not apply here: {reason}")
    print(
        f"fingerprint: {len(body['calls'])} calls of the {body['grid']} grid's "
        f"{body['cells']} cells, made on {body['machine']} (torch {body['torch']}, "
        f"{body['kernels']} kernels)",
        flush=True,
    )
    verdicts, notes = kf.check(body)
    for line in kf.render(verdicts) + notes:
        print(line)
    print(kf.summary(verdicts, notes))
    return 0 if all(v.same for v in verdicts) and not notes else 1
