"""``python -m benchmark`` — argument parsing and dispatch only; the work lives in the layers it calls.

Bad input (an unknown name, a grid with an unknown key or a wrong type, α ≤ 0, more clients than samples) exits
with code 2 and one line naming the problem, before anything is written.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

EXIT_BAD_INPUT = 2


class BadInput(ValueError):
    pass


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmark", description="fssl-bench: federated SSL benchmark")
    sub = p.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the cells of a grid (skips finished cells, resumes interrupted ones)")
    run.add_argument("--grid", required=True, help="grid name (benchmark/grids/NAME.yaml) or path")
    run.add_argument("--root", default="runs", help="run root (default: runs/)")
    run.add_argument("--only", default=None, help="filter, e.g. method=fedema,partition=dirichlet or cell=<id prefix>")
    run.add_argument("--seeds", default=None, help="comma-separated training seeds replacing the grid's, e.g. 0,1,2")
    run.add_argument("--dry-run", action="store_true", help="list and validate the cells, run nothing")
    run.add_argument("--no-wandb", action="store_true", help="do not log to Weights & Biases")
    run.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    run.add_argument("--data-root", default=None, help="where datasets live (default: $FSSL_DATA_ROOT)")
    run.add_argument("--launcher", default="local", help="local | ray | slurm")
    run.add_argument("--retry-failed", action="store_true", help="re-run cells that failed before")
    run.add_argument("--site", default=None, help="build the leaderboard site here when the grid ends")
    run.add_argument("--ray-address", default=None)
    run.add_argument("--cpus-per-cell", type=float, default=1.0)
    run.add_argument("--gpus-per-cell", type=float, default=0.0)
    run.add_argument("--slurm-partition", default=None)
    run.add_argument("--slurm-time", type=int, default=60 * 24, help="minutes per job")
    run.add_argument("--slurm-parallelism", type=int, default=32)
    run.add_argument("--slurm-folder", default=None)
    run.add_argument("--slurm-cluster", default=None, help="submitit cluster: slurm | local | debug")

    lst = sub.add_parser("list", help="list registered components or grids")
    lst.add_argument("what", choices=["methods", "datasets", "partitioners", "tasks", "grids", "backbones"])

    plan = sub.add_parser("plan", help="cells, rounds, client steps and estimated cost of a grid")
    plan.add_argument("--grid", required=True)
    plan.add_argument("--only", default=None)
    plan.add_argument("--seeds", default=None, help="comma-separated training seeds replacing the grid's, e.g. 0,1,2")
    plan.add_argument("--throughput", type=float, default=None, help="device images/s for the cost estimate")

    show = sub.add_parser("show", help="show a cell's configuration and record")
    show.add_argument("cell_id")
    show.add_argument("--root", default="runs")

    status = sub.add_parser("status", help="done, failed, running and pending cells of a grid")
    status.add_argument("--grid", required=True)
    status.add_argument("--root", default="runs")
    status.add_argument("--only", default=None)
    status.add_argument("--seeds", default=None, help="comma-separated training seeds replacing the grid's, e.g. 0,1,2")

    col = sub.add_parser("collect", help="validate records and copy them into results/")
    col.add_argument("--from", dest="source", required=True, help="a run root, or wandb:ENTITY/PROJECT")
    col.add_argument("--results", default="results")

    pre = sub.add_parser("prefetch", help="download a hub dataset once into the data root (needs network)")
    pre.add_argument("dataset")
    pre.add_argument("--data-root", default=None)

    new = sub.add_parser("new-method", help="scaffold methods/NAME.py, its tests and a smoke grid")
    new.add_argument("name")
    new.add_argument("--out", default=None, help="write under this folder instead of the repository")
    new.add_argument("--force", action="store_true", help="replace existing scaffold files")

    chk = sub.add_parser("check-method", help="conformance checks of a registered method on digits (CPU, minutes)")
    chk.add_argument("name")
    chk.add_argument("--rounds", type=int, default=2)
    chk.add_argument("--no-knn", action="store_true", help="skip the kNN-above-no_pretrain check")

    sbm = sub.add_parser("submit", help="validate records for a leaderboard track and write a submission bundle")
    sbm.add_argument("records", nargs="+", help="record files or folders (run roots, results/)")
    sbm.add_argument("--track", default=None, help="leaderboard track id (leaderboard/tracks.yaml)")
    sbm.add_argument("--tracks", default=None, help="tracks file (default: leaderboard/tracks.yaml)")
    sbm.add_argument("--out", default=None, help="bundle folder, or a .tar.gz file")
    sbm.add_argument("--against", action="append", default=[], help="results folder already on the leaderboard")
    sbm.add_argument("--reevaluate", action="store_true", help="re-run the tasks from the final checkpoints")
    sbm.add_argument("--data-root", default=None)
    return p


def _load_cells(grid_arg: str, only: str | None, seeds: str | None = None) -> tuple[Any, list[Any]]:
    from benchmark.grid import expand_grid, load_grid, parse_only, with_seeds

    grid = load_grid(grid_arg)
    if seeds is not None:
        grid = with_seeds(grid, parse_seeds(seeds))
    cells = expand_grid(grid, only=parse_only(only))
    return grid, cells


def parse_seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise BadInput(f"--seeds must be comma-separated integers, got {text!r}") from None
    if not seeds or any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
        raise BadInput(f"--seeds must list distinct non-negative integers, got {text!r}")
    return seeds


def preflight(cells: Sequence[Any], data_root: str | None) -> list[str]:
    """Check data availability and partition constraints before anything is written.

    Returns the list of missing datasets (each with how to get it); raises ``BadInput`` for impossible partitions.
    """
    from benchmark.config import from_mapping
    from benchmark.data.datasets import default_data_root, load_dataset_splits
    from benchmark.registries import DATASETS, TASKS
    from benchmark.runner import build_partition

    root = Path(data_root) if data_root else default_data_root()
    missing: dict[str, str] = {}
    checked: set[tuple[str, str]] = set()
    for cell in cells:
        for spec in cell.tasks:  # data a task reads besides the cell's own (transfer targets, COCO)
            task_cls = TASKS.get(spec.name)
            needs = getattr(task_cls, "required_datasets", None)
            for name in needs(from_mapping(task_cls.Config, dict(spec.params))) if needs else ():
                extra = from_mapping(DATASETS.get(name), {})
                if not extra.available(root):
                    missing[name] = extra.how_to_get(root)
        ds_cfg = from_mapping(DATASETS.get(cell.dataset.name), dict(cell.dataset.params))
        if not ds_cfg.available(root):
            missing[cell.dataset.name] = ds_cfg.how_to_get(root)
            continue
        key = (json.dumps(cell.dataset.params, sort_keys=True) + cell.dataset.name,
               json.dumps([cell.partition.name, cell.partition.params, cell.fl.num_clients, cell.partition_seed,
                           cell.public and cell.public.name, cell.public and cell.public.params], sort_keys=True))
        if key in checked:
            continue
        checked.add(key)
        ds = load_dataset_splits(cell.dataset.name, dict(cell.dataset.params), data_root)
        try:
            build_partition(cell, ds.train.labels)
        except ValueError as exc:
            raise BadInput(f"{cell.partition.label()} with {cell.fl.num_clients} clients on {cell.dataset.name}: "
                           f"{exc}") from None
    return [missing[k] for k in sorted(missing)]


def _task_data_needs() -> Any:
    """``tasks/data_needs.py`` loaded by path: importing it through the ``tasks`` package would import every task,
    and torch with them."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "tasks" / "data_needs.py"
    spec = importlib.util.spec_from_file_location("_fssl_task_data_needs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fast_missing_datasets(grid: Any, data_root: str | None) -> list[str]:
    """The datasets a grid's cells and tasks name that are absent, found without importing torch or any method, so
    that a run on a machine without the data stops at once (the full preflight then checks partitions)."""
    import benchmark.data.datasets  # noqa: F401  (registers the dataset classes; torch-free at import)
    import benchmark.data.hub_datasets  # noqa: F401
    from benchmark.config import from_mapping
    from benchmark.data.datasets import default_data_root
    from benchmark.registries import DATASETS

    values = [grid.base.get("dataset"), *grid.axes.get("dataset", [])]
    for axis in grid.axes.values():
        values += [v["with"].get("dataset") for v in axis if isinstance(v, dict) and isinstance(v.get("with"), dict)]
    needs = _task_data_needs()
    values += [name for task, params in needs.task_specs([dict(grid.base), dict(grid.axes)])
               for name in needs.extra_datasets(task, params)]
    root = Path(data_root) if data_root else default_data_root()
    missing: dict[str, str] = {}
    for value in values:
        if value is None:
            continue
        comp = {"name": value} if isinstance(value, str) else dict(value)
        name = comp.pop("name", None)
        comp.pop("with", None)
        if not isinstance(name, str) or name not in DATASETS:
            continue  # unknown names are reported by the full expansion
        cfg = from_mapping(DATASETS.get(name), comp)
        if not cfg.available(root):
            missing[DATASETS.canonical(name)] = cfg.how_to_get(root)
    return [missing[k] for k in sorted(missing)]


def _report_missing(grid_name: str, missing: list[str]) -> int:
    print(f"error: {len(missing)} dataset(s) missing for grid {grid_name!r}:", file=sys.stderr)
    for line in missing:
        print(f"  - {line}", file=sys.stderr)
    return EXIT_BAD_INPUT


def cmd_run(args: argparse.Namespace) -> int:
    from benchmark.grid import load_grid

    if not args.dry_run:
        missing = fast_missing_datasets(load_grid(args.grid), args.data_root)
        if missing:
            return _report_missing(load_grid(args.grid).name, missing)

    from tqdm import tqdm

    from benchmark.runner import cell_paths

    grid, cells = _load_cells(args.grid, args.only, args.seeds)
    root = Path(args.root)
    if args.dry_run:
        for cell in cells:
            paths = cell_paths(cell, root)
            state = "done" if paths.record.exists() else ("failed" if paths.error.exists() else "pending")
            print(f"{cell.cell_id}  {state:8s}  {cell.label()}  tasks={','.join(t.name for t in cell.tasks)}")
        print(f"{len(cells)} cells in grid {grid.name!r} (all validated)")
        return 0
    missing = preflight(cells, args.data_root)
    if missing:
        return _report_missing(grid.name, missing)
    todo = []
    skipped = 0
    for cell in cells:
        paths = cell_paths(cell, root)
        if paths.record.exists():
            skipped += 1
        elif paths.error.exists() and not args.retry_failed:
            skipped += 1
        else:
            todo.append(cell)
    if args.retry_failed:
        for cell in todo:
            cell_paths(cell, root).error.unlink(missing_ok=True)
    print(f"grid {grid.name!r}: {len(cells)} cells, {skipped} already finished or failed, {len(todo)} to run "
          f"(root {root})")
    launcher = _launcher(args)
    counts: Counter[str] = Counter()
    bar = tqdm(total=len(todo), desc="cells", unit="cell", disable=not todo)
    for outcome in launcher.launch(todo, root, grid=grid.name):
        counts[outcome.status] += 1
        bar.update(1)
        if outcome.status == "failed":
            tqdm.write(f"  failed {outcome.cell_id}: {outcome.error}")
        elif outcome.status == "diverged":
            tqdm.write(f"  diverged {outcome.cell_id}: {outcome.error}")
    bar.close()
    print(f"done: {counts['done']}  diverged: {counts['diverged']}  failed: {counts['failed']}  "
          f"skipped: {skipped + counts['skipped']}")
    if args.site:
        try:
            from leaderboard.build import build_site

            index = build_site([root], Path(args.site))
            print(f"leaderboard: {index}")
        except ImportError as exc:  # the leaderboard is optional for a run
            print(f"leaderboard not built: {exc}", file=sys.stderr)
    return 0


def _launcher(args: argparse.Namespace) -> Any:
    from benchmark.registries import LAUNCHERS

    wandb = not args.no_wandb
    if args.launcher == "local":
        return LAUNCHERS.get("local")(device=args.device, wandb=wandb, data_root=args.data_root)
    cls = LAUNCHERS.get(args.launcher)
    return cls.from_args(args)


def cmd_list(args: argparse.Namespace) -> int:
    from benchmark.grid import grid_names, load_grid
    from benchmark.registries import BACKBONES, DATASETS, METHODS, PARTITIONERS, TASKS, load_builtins

    load_builtins()
    if args.what == "grids":
        for name in grid_names():
            g = load_grid(name)
            print(f"{name:24s} {g.description.splitlines()[0] if g.description else ''}")
        return 0
    reg = {"methods": METHODS, "datasets": DATASETS, "partitioners": PARTITIONERS, "tasks": TASKS,
           "backbones": BACKBONES}[args.what]
    aliases: dict[str, list[str]] = {}
    for alias, target in reg.aliases().items():
        aliases.setdefault(target, []).append(alias)
    for name in reg.names():
        obj = reg.get(name)
        doc = (obj.__doc__ or "").strip().splitlines()[0] if obj.__doc__ else ""
        extra = f" (aliases: {', '.join(sorted(aliases[name]))})" if name in aliases else ""
        print(f"{name:24s} {doc}{extra}")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from benchmark.plan import plan_grid

    grid, cells = _load_cells(args.grid, args.only, args.seeds)
    print(plan_grid(grid, cells, throughput=args.throughput))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    root = Path(args.root)
    hits = [p for p in root.glob(f"*/{args.cell_id}*") if p.is_dir() and not p.parent.name.startswith("_")]
    if not hits:
        raise BadInput(f"no cell {args.cell_id!r} under {root}")
    for cell_dir in hits:
        print(f"# {cell_dir}")
        for name in ("cell.json", "record.json", "error.json"):
            path = cell_dir / name
            if path.exists():
                print(f"## {name}")
                print(path.read_text())
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from benchmark.status import grid_status

    grid, cells = _load_cells(args.grid, args.only, args.seeds)
    print(grid_status(cells, Path(args.root)))
    return 0


def cmd_collect(args: argparse.Namespace) -> int:
    from benchmark.records.store import collect

    if args.source.startswith("wandb:"):
        from benchmark.wandb_collect import collect_wandb

        copied, skipped = collect_wandb(args.source[len("wandb:"):], Path(args.results))
    else:
        source = Path(args.source)
        if not source.exists():
            raise BadInput(f"{source} does not exist")
        copied, skipped = collect(source, Path(args.results))
    for path in copied:
        print(f"collected {path}")
    for s in skipped:
        print(f"skipped {s.path}: {s.reason}", file=sys.stderr)
    print(f"{len(copied)} records collected into {args.results}, {len(skipped)} skipped")
    return 0


def cmd_prefetch(args: argparse.Namespace) -> int:
    from benchmark.config import from_mapping
    from benchmark.data.datasets import default_data_root
    from benchmark.registries import DATASETS, load_builtins

    load_builtins()
    cfg = from_mapping(DATASETS.get(args.dataset), {})
    if not hasattr(cfg, "prefetch"):
        print(f"{args.dataset} ships with its dependency; nothing to fetch")
        return 0
    out = cfg.prefetch(Path(args.data_root) if args.data_root else default_data_root())
    print(f"saved {args.dataset} to {out}")
    return 0


def cmd_new_method(args: argparse.Namespace) -> int:
    from benchmark.scaffold import ScaffoldError, next_steps, write_scaffold

    try:
        written = write_scaffold(args.name, Path(args.out) if args.out else None, force=args.force)
    except ScaffoldError as exc:
        raise BadInput(str(exc)) from None
    for path in written:
        print(f"wrote {path}")
    print(next_steps(args.name))
    return 0


def cmd_check_method(args: argparse.Namespace) -> int:
    from benchmark.conformance import check_method

    report = check_method(args.name, rounds=args.rounds, knn=not args.no_knn)
    print(report.format())
    return 0 if report.ok else 1


def cmd_submit(args: argparse.Namespace) -> int:
    from benchmark.submit import SubmitError, submit

    try:
        report = submit(args.records, track=args.track, out=args.out,
                        tracks_file=Path(args.tracks) if args.tracks else None, against=args.against,
                        reevaluate=args.reevaluate, data_root=args.data_root)
    except SubmitError as exc:
        raise BadInput(str(exc)) from None
    print(report.format())
    return 0 if report.ok else 1


COMMANDS = {"run": cmd_run, "list": cmd_list, "plan": cmd_plan, "show": cmd_show, "status": cmd_status,
            "collect": cmd_collect, "prefetch": cmd_prefetch, "new-method": cmd_new_method,
            "check-method": cmd_check_method, "submit": cmd_submit}


def main(argv: Sequence[str] | None = None) -> int:
    from benchmark.config import ConfigError
    from benchmark.data.partition import PartitionError
    from benchmark.registry import RegistryError

    args = _parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except (BadInput, ConfigError, RegistryError, PartitionError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("interrupted; finished cells are kept and the next run resumes the rest", file=sys.stderr)
        return 130
