"""``python -m benchmark`` — argument parsing and dispatch only; the work lives in the layers it calls.

Exit codes (docs/grids.md; accept and collect: docs/submitting.md): 0 every cell done or skipped as
finished; 1 some cell failed or diverged, in this run or in an earlier one left alone (``status``:
any such cell); 2 bad input (an unknown name or option value, a grid with an unknown key or a wrong
type, α ≤ 0, more clients than samples, an unusable device or root, absent data; a bundle or record
that accept or collect refuses): one line naming the problem, before anything is written. """

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmark import __version__
from benchmark.errors import UsageError
from benchmark.method import API_VERSION

EXIT_BAD_INPUT = 2  # bad input (UsageError and the config / registry / partition errors): one line, nothing written


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmark", description="fssl-bench: federated SSL benchmark",
        epilog="exit codes (run, status): 0 every cell done or skipped as finished; 1 some cell failed or diverged "
               "(now, or earlier and left alone: --retry-failed); 2 usage error, found before any cell ran (one line, "
               "nothing written)")
    p.add_argument("--version", action="version",
                   version=f"fssl-bench {__version__} (plugin API {API_VERSION})")
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
    run.add_argument("--workers", type=int, default=0,
                     help="local launcher: cells in this many worker processes (default 0: one per core; each cell "
                          "runs on one CPU thread, so the records are the same as with 1, which runs the cells one "
                          "after another in this process)")
    run.add_argument("--retry-failed", action="store_true", help="re-run cells that failed before")
    run.add_argument("--site", default=None, help="build the leaderboard site here when the grid ends")
    _add_launcher_options(run)

    lst = sub.add_parser("list", help="list registered components or grids")
    lst.add_argument("what", choices=["methods", "datasets", "partitioners", "tasks", "grids", "backbones", "tracks"],
                     help="what to list")

    plan = sub.add_parser("plan", help="cells, rounds, client steps and estimated cost of a grid")
    plan.add_argument("--grid", required=True, help="grid name (benchmark/grids/NAME.yaml) or path")
    plan.add_argument("--only", default=None, help="filter, e.g. method=fedema,partition=iid")
    plan.add_argument("--seeds", default=None, help="comma-separated training seeds replacing the grid's, e.g. 0,1,2")
    plan.add_argument("--throughput", type=float, default=None, help="device images/s for the cost estimate")

    show = sub.add_parser("show", help="show a cell's configuration and record")
    show.add_argument("cell_id", help="a cell id (or a unique prefix of one)")
    show.add_argument("--root", default="runs", help="run root (default: runs/)")

    status = sub.add_parser("status", help="done, failed, running and pending cells of a grid")
    status.add_argument("--grid", required=True, help="grid name or path")
    status.add_argument("--root", default="runs", help="run root (default: runs/)")
    status.add_argument("--only", default=None, help="filter, e.g. method=fedema")
    status.add_argument("--seeds", default=None, help="comma-separated training seeds replacing the grid's, e.g. 0,1,2")

    col = sub.add_parser("collect", help="validate records and copy them into results/")
    col.add_argument("--from", dest="source", required=True, help="a run root, or wandb:ENTITY/PROJECT")
    col.add_argument("--results", default="results", help="where validated records are copied (default results/)")

    pre = sub.add_parser("prefetch", help="download a hub dataset once into the data root (needs network)")
    pre.add_argument("dataset", help="a registered dataset name (python -m benchmark list datasets)")
    pre.add_argument("--data-root", default=None, help="where datasets live (default: $FSSL_DATA_ROOT)")

    new = sub.add_parser("new-method", help="scaffold methods/NAME.py, its tests and a smoke grid (--plugin: an "
                                            "installable package of the three)")
    new.add_argument("name", help="the method's registry name (lower-case snake_case)")
    new.add_argument("--out", default=None, help="write under this folder instead of the repository")
    new.add_argument("--force", action="store_true", help="replace existing scaffold files")
    new.add_argument("--class-name", default=None,
                     help="the method's class name (default: CamelCase of NAME, "
                          "fed_sim_siam → FedSimSiam)")
    new.add_argument("--plugin", action="store_true",
                     help="an installable package fssl-NAME/ (entry point fssl_bench.methods; the method imports only "
                          "benchmark.api; tests and a digits smoke grid) instead of files in the repository")

    chk = sub.add_parser("check-method", help="conformance checks of a registered method on digits (CPU, minutes)")
    chk.add_argument("name", help="a registered method name")
    chk.add_argument("--rounds", type=int, default=2, help="rounds of the smoke cells (>= 1, default 2)")
    chk.add_argument("--no-knn", action="store_true", help="skip the kNN-above-no_pretrain check")

    _add_submission(sub)
    _add_doctor(sub)
    return p


def _add_submission(sub: Any) -> None:
    """``submit`` (contributors) and ``accept`` (maintainers): a bundle's way onto the leaderboard."""
    from benchmark.bundle import DEFAULT_LIMITS as limits  # torch-free, small
    from benchmark.bundle import MB

    sbm = sub.add_parser("submit", help="validate records for a leaderboard track and write a submission bundle")
    sbm.add_argument("records", nargs="+", help="record files or folders (run roots, results/)")
    sbm.add_argument("--track", default=None, help="leaderboard track id (leaderboard/tracks.yaml)")
    sbm.add_argument("--tracks", default=None, help="tracks file (default: leaderboard/tracks.yaml)")
    sbm.add_argument("--out", default=None, help="bundle folder, or a .tar.gz file")
    sbm.add_argument("--against", action="append", default=[], help="results folder already on the leaderboard")
    sbm.add_argument("--no-reevaluate", dest="reevaluate", action="store_false",
                     help="do not re-run the tasks from the final checkpoints (by default every score is re-evaluated "
                          "and must be reproduced within its task's tolerance). What is lost: the check that the "
                          "checkpoint gives the scores the record claims; until the maintainers' accept step only the "
                          "record's word vouches for them, and the manifest says NOT re-evaluated by the submitter")
    sbm.add_argument("--data-root", default=None, help="where datasets live, for re-evaluation")
    acc = sub.add_parser("accept", help="maintainers: re-evaluate a submission bundle from its checkpoints and, when "
                                        "every score is reproduced, copy its records into results/ marked "
                                        "re-evaluated",
                         epilog="exit codes: 0 every record re-evaluated within tolerance (docs/integrity.md), copied "
                                "with its acceptance file; 1 one line per failing check or score (reported vs "
                                "reproduced), nothing written; 2 refused before anything is re-run "
                                "(not a bundle, over a limit, a bad manifest, a path outside the "
                                "bundle, a record that fails its checks, its track or card, has no "
                                "scores, or needs a plugin not installed here; --results is a "
                                "file): one line, nothing written (docs/submitting.md)")
    acc.add_argument("bundle", help="a bundle written by submit (folder or .tar.gz)")
    acc.add_argument("--results", default="results",
                     help="where accepted records and their acceptance files go (default results/)")
    acc.add_argument("--data-root", default=None, help="where datasets live (default: $FSSL_DATA_ROOT)")
    acc.add_argument("--track", default=None,
                     help="the track to accept for (default: the manifest's)")
    acc.add_argument("--max-total-mb", type=int, default=limits.max_total_bytes // MB,
                     help="uncompressed size a bundle may hold "
                          f"(default {limits.max_total_bytes // MB})")
    acc.add_argument("--max-file-mb", type=int, default=limits.max_file_bytes // MB,
                     help=f"size one file of a bundle may hold (default "
                          f"{limits.max_file_bytes // MB})")
    acc.add_argument("--max-members", type=int, default=limits.max_members,
                     help=f"files a bundle may hold (default {limits.max_members})")


def _add_launcher_options(run: Any) -> None:
    run.add_argument("--ray-address", default=None, help="ray launcher: cluster address (default: start a local Ray)")
    run.add_argument("--cpus-per-cell", type=float, default=1.0, help="ray launcher: CPUs reserved per cell (default 1)")
    run.add_argument("--gpus-per-cell", type=float, default=0.0, help="ray launcher: GPUs reserved per cell (default 0)")
    run.add_argument("--slurm-partition", default=None, help="slurm launcher: partition to submit to")
    run.add_argument("--slurm-time", type=int, default=60 * 24, help="minutes per job")
    run.add_argument("--slurm-parallelism", type=int, default=32, help="slurm launcher: array jobs running at once")
    run.add_argument("--slurm-folder", default=None, help="slurm launcher: submitit log folder (default under --root)")
    run.add_argument("--slurm-cluster", default=None, help="submitit cluster: slurm | local | debug")


def _add_doctor(sub: Any) -> None:
    doc = sub.add_parser("doctor", help="pre-train each method a few rounds in fp32 and in reduced precision on this "
                                        "device and compare the losses (verify the GPU path before a long run)")
    doc.add_argument("--methods", default=None, help="comma-separated method names (default: every method)")
    doc.add_argument("--rounds", type=int, default=3, help="rounds per method (default 3)")
    doc.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    doc.add_argument("--precision", default=None, choices=["bf16", "fp16"],
                     help="the precision compared with fp32 (default: bf16 where supported, else fp16)")
    doc.add_argument("--tolerance", type=float, default=0.10, help="allowed |loss ratio - 1| (default 0.10)")


def _load_cells(grid_arg: str, only: str | None, seeds: str | None = None) -> tuple[Any, list[Any]]:
    from benchmark.run_grid import load_cells

    return load_cells(grid_arg, only=only, seeds=parse_seeds(seeds) if seeds is not None else None)


def parse_seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise UsageError(f"--seeds must be comma-separated integers, got {text!r}") from None
    if not seeds or any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
        raise UsageError(f"--seeds must list distinct non-negative integers, got {text!r}")
    return seeds


def _options(args: argparse.Namespace) -> Any:
    from benchmark.options import RunOptions

    return RunOptions(device=args.device, wandb=not args.no_wandb, data_root=args.data_root)


def _launcher_config(args: argparse.Namespace) -> dict[str, Any]:
    """The chosen launcher's typed config from its command-line options (validated by ``build_launcher``)."""
    if args.launcher == "ray":
        return {"address": args.ray_address, "cpus_per_cell": args.cpus_per_cell, "gpus_per_cell": args.gpus_per_cell}
    if args.launcher in ("slurm", "submitit"):
        gpus = args.gpus_per_cell
        return {"folder": args.slurm_folder, "cluster": args.slurm_cluster, "partition": args.slurm_partition,
                "timeout_min": args.slurm_time, "gpus_per_node": int(gpus) if gpus >= 1 else 0,
                "cpus_per_task": max(1, int(args.cpus_per_cell)), "array_parallelism": args.slurm_parallelism}
    return {"workers": args.workers}


def _dry_run(args: argparse.Namespace) -> int:
    """Everything ``run`` checks at the door, nothing run or written: configuration, device, precision, data
    presence, partitions and each method's own data check (a missing dataset is exit 2, as in a real run)."""
    from benchmark.errors import MissingData
    from benchmark.run_grid import plan_run
    from benchmark.rundir import RunDir

    grid, cells = _load_cells(args.grid, args.only, args.seeds)
    for cell in cells:
        state = RunDir.of(cell, args.root).status(cell.fl.rounds).state
        print(f"{cell.cell_id}  {state:8s}  {cell.label()}  tasks={','.join(t.name for t in cell.tasks)}")
    try:
        plan = plan_run(grid, root=args.root, options=_options(args), only=args.only,
                        seeds=parse_seeds(args.seeds) if args.seeds is not None else None, retry_failed=False)
    except MissingData:
        print(f"{len(cells)} cells in grid {grid.name!r}: configuration validated; data missing, so partitions and "
              "method settings were not checked")
        raise
    print(f"{len(plan.cells)} cells in grid {plan.grid.name!r}: configuration, device, data presence and partitions "
          f"validated; {len(plan.todo)} would run")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    if args.dry_run:
        return _dry_run(args)
    from tqdm import tqdm

    from benchmark.run_grid import run_grid

    bar: Any = None

    def on_plan(plan: Any) -> None:
        nonlocal bar
        print(f"grid {plan.grid.name!r}: {len(plan.cells)} cells, {plan.skipped} already finished or failed, "
              f"{len(plan.todo)} to run (root {args.root})")
        bar = tqdm(total=len(plan.todo), desc="cells", unit="cell", disable=not plan.todo)

    def progress(cell: Any, outcome: Any) -> None:
        bar.update(1)
        if outcome.status in ("failed", "diverged"):
            tqdm.write(f"  {outcome.status} {outcome.cell_id}: {outcome.error}")

    summary = run_grid(args.grid, root=args.root, options=_options(args), launcher=args.launcher,
                       launcher_config=_launcher_config(args), only=args.only,
                       seeds=parse_seeds(args.seeds) if args.seeds is not None else None,
                       retry_failed=args.retry_failed, progress=progress, on_plan=on_plan)
    if bar is not None:
        bar.close()
    print(f"done: {summary.count('done')}  diverged: {summary.count('diverged')}  failed: {summary.count('failed')}  "
          f"skipped: {summary.count('skipped')}")
    if summary.failed_before:
        print(f"{summary.failed_before} cell(s) failed in an earlier attempt and were left alone: `python -m benchmark "
              "status` shows why; re-run them with --retry-failed", file=sys.stderr)
    if args.site:
        _build_site(Path(args.root), Path(args.site))
    return summary.exit_code


def _build_site(root: Path, out: Path) -> None:
    try:
        from benchmark.registries import plugin_point

        print(f"leaderboard: {plugin_point('site_builder')([root], out)}")
    except ImportError as exc:  # the leaderboard is optional for a run
        print(f"leaderboard not built: {exc}", file=sys.stderr)


def cmd_list(args: argparse.Namespace) -> int:
    from benchmark.grid import grid_names, load_grid
    from benchmark.registries import BACKBONES, DATASETS, METHODS, PARTITIONERS, TASKS, load_builtins

    load_builtins()
    if args.what == "tracks":
        from benchmark.records.tracks import load_tracks, track_lines
        from benchmark.submit import DEFAULT_TRACKS

        print("\n".join(track_lines(load_tracks(DEFAULT_TRACKS))))
        return 0
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
    from benchmark.registry import PluginError

    for name in reg.names():
        try:
            obj = reg.get(name)
        except PluginError as exc:  # a broken plugin is one warning, the listing goes on
            print(f"warning: {exc}", file=sys.stderr)
            continue
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
    from benchmark.rundir import describe_files, find_cell_dirs

    root = Path(args.root)
    hits = find_cell_dirs(root, args.cell_id)
    if not hits:
        raise UsageError(f"no cell {args.cell_id!r} under {root}")
    for cell_dir in hits:
        print(f"# {cell_dir}")
        for name, path in describe_files(cell_dir):
            print(f"## {name}")
            print(path.read_text())
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from benchmark.status import grid_status_counts

    _, cells = _load_cells(args.grid, args.only, args.seeds)
    text, counts = grid_status_counts(cells, Path(args.root))
    print(text)
    return 1 if counts["failed"] or counts["diverged"] else 0  # the run's exit-code policy


def cmd_collect(args: argparse.Namespace) -> int:
    from benchmark.records.store import collect

    if args.source.startswith("wandb:"):
        from benchmark.wandb_collect import collect_wandb

        copied, skipped = collect_wandb(args.source[len("wandb:"):], Path(args.results))
    else:
        source = Path(args.source)
        if not source.exists():
            raise UsageError(f"{source} does not exist")
        copied, skipped = collect(source, Path(args.results))
    for path in copied:
        print(f"collected {path}")
    for s in skipped:
        print(f"skipped {s.path}: {s.reason}", file=sys.stderr)
    print(f"{len(copied)} records collected into {args.results}, {len(skipped)} skipped")
    return 0


def cmd_prefetch(args: argparse.Namespace) -> int:
    url, hub = prefetch_source(args.dataset)
    why = source_unreachable(url, hub=hub)  # torch-free so far: answers in under 2 s
    if why:
        root = args.data_root or "$FSSL_DATA_ROOT (default ~/.cache/fssl-bench/data)"
        raise UsageError(f"cannot fetch {args.dataset}: {why}. Run `python -m benchmark prefetch {args.dataset}` on "
                         f"a machine with network and copy its data folder to {root}")
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


HF_DEFAULT_ENDPOINT = "https://huggingface.co"


def prefetch_source(name: str) -> tuple[str, bool]:
    """(the URL a dataset's prefetch downloads from, whether it is the HF hub). Hub sets use
    ``HF_ENDPOINT`` (as huggingface_hub does); a set with its own ``source_url`` (COCO) is fetched
    from there. Torch-free."""
    import os

    import benchmark.data.datasets
    import benchmark.data.hub_datasets  # noqa: F401 - registers the data-root datasets
    from benchmark.registries import DATASETS

    try:
        url = getattr(DATASETS.get(name), "source_url", None)
    except KeyError:  # not a data-root set: the registry names the problem once the command goes on
        url = None
    return (url, False) if url else (os.environ.get("HF_ENDPOINT") or HF_DEFAULT_ENDPOINT, True)


def source_unreachable(url: str, *, hub: bool = True, timeout: float = 1.5) -> str | None:
    """Why ``url`` cannot be reached, or None: the hub's offline switches (hub sources only), else
    no TCP connection within ``timeout`` seconds to the proxy that serves the URL's scheme
    (``HTTPS_PROXY`` / ``HTTP_PROXY``, unless ``NO_PROXY`` exempts the host) or, without one, to the
    host itself. A fetch that would hang or retry for tens of seconds is refused in under two; a
    proxy-only network is not refused."""
    import os
    import socket
    import urllib.parse
    import urllib.request

    if hub:
        for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
            if os.environ.get(var, "").strip().lower() in ("1", "true", "yes", "on"):
                return f"the hub is switched off ({var}={os.environ[var]})"
    parts = urllib.parse.urlsplit(url)
    host, port = parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
    proxy = urllib.request.getproxies().get(parts.scheme)
    if proxy and not urllib.request.proxy_bypass(host):
        p = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        host, port = p.hostname or "", p.port or (443 if p.scheme == "https" else 80)
        what = f"the proxy {host}:{port} (for {parts.hostname})"
    else:
        what = f"{host}:{port}"
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except OSError as exc:
        return f"{what} is unreachable ({exc.strerror or type(exc).__name__})"


def cmd_new_method(args: argparse.Namespace) -> int:
    from benchmark.scaffold import ScaffoldError, next_steps, write_scaffold

    try:
        written = write_scaffold(args.name, Path(args.out) if args.out else None, force=args.force,
                                 plugin=args.plugin, class_name=args.class_name)
    except ScaffoldError as exc:
        raise UsageError(str(exc)) from None
    for path in written:
        print(f"wrote {path}")
    print(next_steps(args.name, plugin=args.plugin))
    return 0


def cmd_check_method(args: argparse.Namespace) -> int:
    from benchmark.conformance import check_method

    if args.rounds < 1:
        raise UsageError(f"--rounds must be >= 1, got {args.rounds}")
    report = check_method(args.name, rounds=args.rounds, knn=not args.no_knn)
    print(report.format())
    return 0 if report.ok else 1


def cmd_submit(args: argparse.Namespace) -> int:
    from benchmark.submit import SubmitError, submit

    if args.track is None:
        raise UsageError("submit checks records against one leaderboard track: pass --track ID (the tracks: "
                         "python -m benchmark list tracks)")
    try:
        report = submit(args.records, track=args.track, out=args.out,
                        tracks_file=Path(args.tracks) if args.tracks else None, against=args.against,
                        reevaluate=args.reevaluate, data_root=args.data_root)
    except SubmitError as exc:
        raise UsageError(str(exc)) from None
    print(report.format())
    return 0 if report.ok else 1


def cmd_accept(args: argparse.Namespace) -> int:
    """0: every record re-evaluated within tolerance, copied with its acceptance; 1: one line per failing check or
    score (reported vs reproduced), nothing written; 2: not a bundle, or a bad --results."""
    import signal

    from benchmark.accept import accept
    from benchmark.bundle import MB, BundleLimits

    limits = BundleLimits(max_total_bytes=args.max_total_mb * MB,
                          max_file_bytes=args.max_file_mb * MB, max_members=args.max_members)

    def on_term(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)  # unwinds like Ctrl-C: the scratch folder is removed

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        report = accept(Path(args.bundle), Path(args.results), data_root=args.data_root,
                        track=args.track, limits=limits)
    finally:
        signal.signal(signal.SIGTERM, previous)
    print(report.format())
    return 0 if report.ok else 1


def cmd_doctor(args: argparse.Namespace) -> int:
    from benchmark.doctor import doctor, render
    from benchmark.registries import METHODS, load_builtins

    if args.rounds < 1:
        raise UsageError(f"--rounds must be >= 1, got {args.rounds}")
    load_builtins()
    methods = [METHODS.canonical(m.strip()) for m in args.methods.split(",")] if args.methods else None
    other, rows = doctor(methods, rounds=args.rounds, device=args.device, precision=args.precision)
    print(render(other, rows, args.tolerance))
    return 0 if all(r.ok(args.tolerance) for r in rows) else 1


COMMANDS = {"run": cmd_run, "list": cmd_list, "plan": cmd_plan, "show": cmd_show, "status": cmd_status,
            "collect": cmd_collect, "prefetch": cmd_prefetch, "new-method": cmd_new_method,
            "check-method": cmd_check_method, "submit": cmd_submit, "accept": cmd_accept,
            "doctor": cmd_doctor}


def main(argv: Sequence[str] | None = None) -> int:
    from benchmark.config import ConfigError
    from benchmark.data.partition import PartitionError
    from benchmark.registry import RegistryError

    args = _parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except (UsageError, ConfigError, RegistryError, PartitionError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("interrupted; finished cells are kept and the next run resumes the rest", file=sys.stderr)
        return 130
