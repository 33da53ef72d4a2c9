"""``python -m benchmark`` — the parser and the table of subcommands (``COMMANDS``: a name → the
``cmd_*`` of its module in benchmark/commands/, one module per subcommand); the work lives there.

Exit codes (docs/grids.md; accept and collect: docs/submitting.md): 0 every cell done or skipped as
finished; 1 some cell failed or diverged, in this run or in an earlier one left alone (``status``:
any such cell); 2 bad input (an unknown name or option value, a grid with an unknown key or a wrong
type, α ≤ 0, more clients than samples, an unusable device or root, absent data; a bundle or record
that accept or collect refuses): one line naming the problem, before anything is written."""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence
from typing import Any

from benchmark import __version__
from benchmark.commands.accept import cmd_accept
from benchmark.commands.check_method import cmd_check_method
from benchmark.commands.collect import cmd_collect
from benchmark.commands.doctor import cmd_doctor
from benchmark.commands.ledger import cmd_ledger
from benchmark.commands.listing import cmd_list
from benchmark.commands.new_method import cmd_new_method
from benchmark.commands.new_task import cmd_new_task
from benchmark.commands.plan import cmd_plan
from benchmark.commands.prefetch import cmd_prefetch
from benchmark.commands.run import EXIT_BAD_INPUT, cmd_run
from benchmark.commands.show import cmd_show
from benchmark.commands.status import cmd_status
from benchmark.commands.submit import cmd_submit
from benchmark.commands.verify import cmd_verify
from benchmark.contracts.method import API_VERSION
from benchmark.core.errors import UsageError, lines_of

CALIBRATION_HELP = (
    "with --dry-run (run) or plan: the `doctor --calibrate` report that costs the cells (default: "
    "$FSSL_CALIBRATION, else the report of the device the run would use in $FSSL_CALIBRATION_DIR or "
    "~/.cache/fssl-bench/calibration; none: plan's FLOP model on an H200)"
)


ADD_METHOD_HELP = (
    "add this registered method (a plugin's) to the grid's method axis, with the grid's other "
    "settings: the cells the grid's track ranks (repeatable)"
)
ADD_TASK_HELP = (
    "add this registered task (a plugin's) to every task list of the grid's cells, with its "
    "defaults; the cells pre-train as the grid's own (a finished pre-training is reused; "
    "repeatable)"
)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmark",
        description="fssl-bench: federated SSL benchmark",
        epilog="exit codes (run, status): 0 every cell done or skipped as finished; 1 some cell failed or diverged "
        "(now, or earlier and left alone: --retry-failed); 2 usage error, found before any cell ran (one line, "
        "nothing written)",
    )
    p.add_argument(
        "--version",
        action="version",
        version=f"fssl-bench {__version__} (plugin API {API_VERSION})",
    )
    sub = p.add_subparsers(dest="command", required=True)

    _add_run(sub)
    lst = sub.add_parser("list", help="list registered components or grids")
    lst.add_argument(
        "what",
        choices=["methods", "datasets", "partitioners", "tasks", "grids", "backbones", "tracks"],
        help="what to list",
    )

    _add_plan(sub)
    show = sub.add_parser("show", help="show a cell's configuration and record")
    show.add_argument("cell_id", help="a cell id (or a unique prefix of one)")
    show.add_argument("--root", default="runs", help="run root (default: runs/)")

    status = sub.add_parser("status", help="done, failed, running and pending cells of a grid")
    status.add_argument("--grid", required=True, help="grid name or path")
    status.add_argument("--root", default="runs", help="run root (default: runs/)")
    status.add_argument("--only", default=None, help="filter, e.g. method=fedema")
    status.add_argument("--add-method", action="append", default=[], help=ADD_METHOD_HELP)
    status.add_argument("--add-task", action="append", default=[], help=ADD_TASK_HELP)
    status.add_argument(
        "--seeds",
        default=None,
        help="comma-separated training seeds replacing the grid's, e.g. 0,1,2",
    )

    col = sub.add_parser("collect", help="validate records and copy them into results/")
    col.add_argument(
        "--from", dest="source", required=True, help="a run root, or wandb:ENTITY/PROJECT"
    )
    col.add_argument(
        "--results", default="results", help="where validated records are copied (default results/)"
    )
    col.add_argument(
        "--release",
        action="store_true",
        help="the release check: also refuse records made from a tree with uncommitted changes "
        "(env.git_dirty) or without a commit (the repository's shipped records are collected so)",
    )

    _add_prefetch(sub)
    _add_tools(sub)
    _add_submission(sub)
    _add_doctor(sub)
    _add_verify(sub)
    return p


def _add_prefetch(sub: Any) -> None:
    """``prefetch``: one dataset, or every dataset of a grid."""
    pre = sub.add_parser(
        "prefetch",
        help="download a dataset, or every dataset of a grid (--grid), once into the data root "
        "(needs network)",
        epilog="exit codes: 0 everything fetched or already there (--grid ends by printing the run "
        "command); 2 unknown name, unreachable source or missing hub login, said before anything is "
        "downloaded",
    )
    pre.add_argument(
        "dataset",
        nargs="?",
        default=None,
        help="a registered dataset name (python -m benchmark list datasets)",
    )
    pre.add_argument(
        "--grid",
        default=None,
        help="fetch every dataset this grid reads (listed first with sizes and which need a login); "
        "complete ones are skipped, interrupted ones resumed",
    )
    pre.add_argument(
        "--data-root", default=None, help="where datasets live (default: $FSSL_DATA_ROOT)"
    )


def _add_plan(sub: Any) -> None:
    """``plan``: a grid's cells and what they cost."""
    plan = sub.add_parser("plan", help="cells, rounds, client steps and estimated cost of a grid")
    plan.add_argument("--grid", required=True, help="grid name (benchmark/grids/NAME.yaml) or path")
    plan.add_argument("--only", default=None, help="filter, e.g. method=fedema,partition=iid")
    plan.add_argument(
        "--seeds",
        default=None,
        help="comma-separated training seeds replacing the grid's, e.g. 0,1,2",
    )
    plan.add_argument(
        "--throughput", type=float, default=None, help="device images/s for the cost estimate"
    )
    plan.add_argument(
        "--device",
        default="auto",
        help="the device whose calibration costs the grid (auto | cpu | cuda | cuda:N)",
    )
    plan.add_argument("--calibration", default=None, help=CALIBRATION_HELP)
    plan.add_argument("--add-method", action="append", default=[], help=ADD_METHOD_HELP)
    plan.add_argument("--add-task", action="append", default=[], help=ADD_TASK_HELP)


def _add_run(sub: Any) -> None:
    """``run``: its options and the launcher's."""
    run = sub.add_parser(
        "run", help="run the cells of a grid (skips finished cells, resumes interrupted ones)"
    )
    run.add_argument("--grid", required=True, help="grid name (benchmark/grids/NAME.yaml) or path")
    run.add_argument("--add-method", action="append", default=[], help=ADD_METHOD_HELP)
    run.add_argument("--add-task", action="append", default=[], help=ADD_TASK_HELP)
    run.add_argument("--root", default="runs", help="run root (default: runs/)")
    run.add_argument(
        "--only",
        default=None,
        help="filter, e.g. method=fedema,partition=dirichlet or cell=<id prefix>",
    )
    run.add_argument(
        "--seeds",
        default=None,
        help="comma-separated training seeds replacing the grid's, e.g. 0,1,2",
    )
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="list and validate the cells and say what they cost, run nothing",
    )
    run.add_argument("--calibration", default=None, help=CALIBRATION_HELP)
    run.add_argument("--no-wandb", action="store_true", help="do not log to Weights & Biases")
    run.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    run.add_argument(
        "--data-root", default=None, help="where datasets live (default: $FSSL_DATA_ROOT)"
    )
    run.add_argument("--launcher", default="local", help="local | ray | slurm")
    run.add_argument(
        "--workers",
        type=int,
        default=0,
        help="local launcher: cells in this many worker processes (default 0: one per core, on CUDA "
        "one per GPU x --cells-per-gpu; each cell runs on one CPU thread, so the records are the "
        "same as with 1). 1 runs the cells one at a time: in this process, except a cell whose "
        "kernel mode this process cannot enter (torch already imported in another), which runs "
        "in a fresh worker process. A worker dies with this process (killed, it leaves its cell "
        "claimed by a dead pid; the next run takes the cell over and resumes it)",
    )
    run.add_argument(
        "--cells-per-gpu",
        type=int,
        default=1,
        help="local launcher on CUDA: cell processes per GPU (default 1: one per visible GPU); "
        "more than 1 is checked against each GPU's free memory",
    )
    run.add_argument(
        "--gpu-mem-per-cell",
        type=float,
        default=0.0,
        help="local launcher on CUDA: GiB one cell takes on the GPU, for --cells-per-gpu above 1 "
        "(default: the device calibration's largest measured peak x 1.25)",
    )
    run.add_argument("--retry-failed", action="store_true", help="re-run cells that failed before")
    run.add_argument(
        "--site", default=None, help="build the leaderboard site here when the grid ends"
    )
    _add_launcher_options(run)


def _add_tools(sub: Any) -> None:
    """``new-method`` and ``check-method``: the method author's tools."""
    new = sub.add_parser(
        "new-method",
        help="scaffold methods/NAME.py, its tests and a smoke grid (--plugin: an "
        "installable package of the three)",
    )
    new.add_argument("name", help="the method's registry name (lower-case snake_case)")
    new.add_argument(
        "--out",
        default=None,
        help="write under this folder instead of the repository (--plugin: the package is written "
        "into this folder itself; default ./fssl-NAME/)",
    )
    new.add_argument("--force", action="store_true", help="replace existing scaffold files")
    new.add_argument(
        "--class-name",
        default=None,
        help="the method's class name (default: CamelCase of NAME, fed_sim_siam → FedSimSiam)",
    )
    new.add_argument(
        "--plugin",
        action="store_true",
        help="an installable package fssl-NAME/ (underscores in NAME become hyphens there: fed_foo -> "
        "fssl-fed-foo/, import package fssl_fed_foo; entry point fssl_bench.methods; the method imports "
        "only benchmark.api; tests and a digits smoke grid) instead of files in the repository",
    )

    task = sub.add_parser(
        "new-task",
        help="scaffold a downstream task as an installable package (--plugin; docs/adding-a-task.md)",
    )
    task.add_argument("name", help="the task's registry name (lower-case snake_case)")
    task.add_argument("--plugin", action="store_true", help="an installable package (required)")
    task.add_argument("--out", default=None, help="the package folder (default ./fssl-NAME/)")
    task.add_argument("--force", action="store_true", help="replace existing scaffold files")
    task.add_argument("--class-name", default=None, help="the task's class name")

    chk = sub.add_parser(
        "check-method",
        help="conformance checks of a registered method on digits (CPU, one thread, ~20 s)",
    )
    chk.add_argument("name", help="a registered method name")
    chk.add_argument(
        "--rounds", type=int, default=2, help="rounds of the smoke cells (>= 1, default 2)"
    )
    chk.add_argument("--no-knn", action="store_true", help="skip the kNN-above-no_pretrain check")
    chk.add_argument(
        "--no-live",
        action="store_true",
        help="skip the live-settings check (every config field moves the first round)",
    )
    chk.add_argument(
        "--unboxed",
        action="store_true",
        help="where no box can run (no bubblewrap): run a plugin's checks without one (only for "
        "code you trust; a plugin's code otherwise runs in the box, docs/integrity.md)",
    )


def _add_verify(sub: Any) -> None:
    ver = sub.add_parser(
        "verify",
        help="re-run shipped cells here (default: seed 0 of the quickstart) and compare every "
        "score and final-state digest with results/",
        epilog="exit codes: 0 every chosen cell identical (--kernels: every operation the same); "
        "1 some cell different, without a (valid) shipped record, or failed here (--kernels: an "
        "operation or the torch / NumPy version differs); 2 usage error (--kernels: the "
        "fingerprint is missing or edited, or does not apply to this machine)",
    )
    ver.add_argument("--grid", default="quickstart", help="grid name or path (default quickstart)")
    ver.add_argument("--results", default="results", help="the shipped records (default results/)")
    ver.add_argument(
        "--only", default=None, help="filter, e.g. method=fedema,partition=iid or cell=<id prefix>"
    )
    ver.add_argument("--seeds", default="0", help="comma-separated training seeds (default 0)")
    ver.add_argument(
        "--limit", type=int, default=None, help="at most this many cells (the first ones)"
    )
    ver.add_argument(
        "--root", default=None, help="run root to keep the re-run in (default: a temporary folder)"
    )
    ver.add_argument(
        "--workers", type=int, default=0, help="worker processes (default 0: one per core)"
    )
    ver.add_argument(
        "--kernels",
        action="store_true",
        help="instead of re-running cells, replay every operation they call (seconds) and print "
        "per operation whether this CPU computes it as the records' machine did",
    )
    ver.add_argument(
        "--fingerprint",
        default=None,
        help="with --kernels: the fingerprint (default RESULTS/records/kernel-fingerprint.json)",
    )
    ver.add_argument(
        "--write",
        action="store_true",
        help="with --kernels: make the fingerprint from a census of the grid's cells of --seeds "
        "(maintainers, on the machine that makes the shipped records)",
    )
    ver.add_argument(
        "--device",
        default="auto",
        choices=["auto", "cpu", "cuda"],
        help="with --kernels: the device runs would use (auto: cuda when present); the "
        "fingerprint covers CPU kernels only",
    )


def _add_submission(sub: Any) -> None:
    """``submit`` (contributors) and ``accept`` (maintainers): a bundle's way onto the
    leaderboard."""
    _add_submit(sub)
    _add_accept(sub)
    _add_ledger(sub)


def _add_ledger(sub: Any) -> None:
    led = sub.add_parser(
        "ledger",
        help="maintainers: the checkpoint ledger of a results folder (every accepted checkpoint "
        "and final state, and the training it was accepted for)",
        epilog="exit codes: 0 done (--check: every entry present); 1 a checkpoint or final state "
        "claimed for two trainings (no entry written for it), or --check found entries missing; "
        "2 usage error",
    )
    what = led.add_mutually_exclusive_group(required=True)
    what.add_argument(
        "--backfill",
        action="store_true",
        help="write the entries the folder's records (shipped runs, earlier acceptances) call "
        "for and the ledger lacks; idempotent",
    )
    what.add_argument(
        "--check", action="store_true", help="write nothing: list the entries the ledger lacks"
    )
    led.add_argument("--results", default="results", help="results folder (default results/)")


def _add_submit(sub: Any) -> None:
    sbm = sub.add_parser(
        "submit", help="validate records for a leaderboard track and write a submission bundle"
    )
    sbm.add_argument("records", nargs="+", help="record files or folders (run roots, results/)")
    sbm.add_argument(
        "--track", default=None, help="leaderboard track id (leaderboard/site_config.yaml)"
    )
    sbm.add_argument(
        "--tracks", default=None, help="tracks file (default: leaderboard/site_config.yaml)"
    )
    sbm.add_argument("--out", default=None, help="bundle folder, or a .tar.gz file")
    sbm.add_argument(
        "--against", action="append", default=[], help="results folder already on the leaderboard"
    )
    sbm.add_argument(
        "--no-reevaluate",
        dest="reevaluate",
        action="store_false",
        help="do not re-run the tasks from the final checkpoints (by default every score is re-evaluated "
        "and must be reproduced within its task's tolerance). What is lost: the check that the "
        "checkpoint gives the scores the record claims; until the maintainers' accept step only the "
        "record's word vouches for them, and the manifest says NOT re-evaluated by the submitter",
    )
    sbm.add_argument("--data-root", default=None, help="where datasets live, for re-evaluation")
    sbm.add_argument(
        "--strict",
        action="store_true",
        help="reject (no bundle) when a record is not on the track, instead of leaving it out "
        "(by default such records are listed as left out and the others bundled)",
    )
    sbm.add_argument(
        "--plugin-source",
        action="append",
        default=[],
        metavar="WHEEL|'NAME @ git+URL@COMMIT'",
        help="where the maintainers get a plugin the records ran: a wheel file (copied into the "
        "bundle; its sources must be the ones the records ran) or a VCS URL pinned to a commit; "
        "without it they need the exact version on PyPI (docs/submitting.md)",
    )


def _add_accept(sub: Any) -> None:
    from benchmark.submission.bundle import DEFAULT_LIMITS as limits
    from benchmark.submission.bundle import MB

    acc = sub.add_parser(
        "accept",
        help="maintainers: re-evaluate a submission bundle from its checkpoints and, when "
        "every score is reproduced, copy its records into results/ marked "
        "re-evaluated",
        epilog="exit codes: 0 every record re-evaluated within tolerance (docs/integrity.md), copied "
        "with its acceptance file; 1 one line per failing check or score (reported vs "
        "reproduced), nothing written; 2 refused before anything is re-run "
        "(not a bundle, over a limit, a bad manifest, a path outside the "
        "bundle, a record that fails its checks, its track or card, has no "
        "scores, or needs a plugin not installed here; --results is a "
        "file): one line, nothing written (docs/submitting.md)",
    )
    acc.add_argument("bundle", help="a bundle written by submit (folder or .tar.gz)")
    acc.add_argument(
        "--results",
        default="results",
        help="where accepted records and their acceptance files go (default results/)",
    )
    acc.add_argument(
        "--data-root", default=None, help="where datasets live (default: $FSSL_DATA_ROOT)"
    )
    acc.add_argument(
        "--track", default=None, help="the track to accept for (default: the manifest's)"
    )
    acc.add_argument(
        "--tracks", default=None, help="tracks file (default: leaderboard/tracks.yaml)"
    )
    acc.add_argument(
        "--unboxed",
        action="store_true",
        help="where no box can run (no bubblewrap or user namespaces): run the bundle's plugin code "
        "and re-training in a plain child process anyway; also lets a plugin partitioner run in "
        "accept's own process (the partition is rebuilt there); the rows accepted so are badged "
        "unboxed (docs/integrity.md). Without it such a bundle is refused",
    )
    acc.add_argument(
        "--max-total-mb",
        type=int,
        default=limits.max_total_bytes // MB,
        help=f"uncompressed size a bundle may hold (default {limits.max_total_bytes // MB})",
    )
    acc.add_argument(
        "--max-file-mb",
        type=int,
        default=limits.max_file_bytes // MB,
        help=f"size one file of a bundle may hold (default {limits.max_file_bytes // MB})",
    )
    acc.add_argument(
        "--max-members",
        type=int,
        default=limits.max_members,
        help=f"files a bundle may hold (default {limits.max_members})",
    )
    acc.add_argument(
        "--max-encoder-mb",
        type=int,
        default=limits.max_encoder_bytes // MB,
        help="parameters and buffers the models a record's re-evaluation builds may hold, "
        f"sized before they are built (default {limits.max_encoder_bytes // MB})",
    )


def _add_launcher_options(run: Any) -> None:
    run.add_argument(
        "--ray-address",
        default=None,
        help="ray launcher: cluster address (default: start a local Ray)",
    )
    run.add_argument(
        "--cpus-per-cell",
        type=float,
        default=1.0,
        help="ray launcher: CPUs reserved per cell (default 1)",
    )
    run.add_argument(
        "--gpus-per-cell",
        type=float,
        default=0.0,
        help="ray launcher: GPUs reserved per cell (default 0)",
    )
    run.add_argument(
        "--slurm-partition", default=None, help="slurm launcher: partition to submit to"
    )
    run.add_argument("--slurm-time", type=int, default=60 * 24, help="minutes per job")
    run.add_argument(
        "--slurm-parallelism",
        type=int,
        default=32,
        help="slurm launcher: array jobs running at once",
    )
    run.add_argument(
        "--slurm-folder",
        default=None,
        help="slurm launcher: submitit log folder (default under --root)",
    )
    run.add_argument(
        "--slurm-cluster", default=None, help="submitit cluster: slurm | local | debug"
    )


def _add_doctor(sub: Any) -> None:
    doc = sub.add_parser(
        "doctor",
        help="pre-train each method a few rounds in fp32 and in reduced precision on this "
        "device and compare the losses (verify the GPU path before a long run)",
    )
    doc.add_argument(
        "--methods", default=None, help="comma-separated method names (default: every method)"
    )
    doc.add_argument("--rounds", type=int, default=3, help="rounds per method (default 3)")
    doc.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    doc.add_argument(
        "--precision",
        default=None,
        choices=["bf16", "fp16"],
        help="the precision compared with fp32 (default: bf16 where supported, else fp16)",
    )
    doc.add_argument(
        "--tolerance", type=float, default=0.10, help="allowed |loss ratio - 1| (default 0.10)"
    )
    cal = doc.add_argument_group(
        "calibration",
        "--calibrate: check this device (driver, precisions, optional parts), run the smoke grid on "
        "it in fp32 and bf16, measure one short cell per pre-training configuration of the GPU grids "
        "and project every shipped grid's cost on it (docs/performance.md, 'On a GPU'); about 8 "
        "minutes on one H100-class GPU. Exit 0 every check passed, 1 a check failed (named), 2 usage",
    )
    cal.add_argument(
        "--calibrate", action="store_true", help="calibrate this device (replaces the loss check)"
    )
    cal.add_argument(
        "--tiny",
        action="store_true",
        help="with --calibrate: micro backbones at 16 px, one configuration per backbone shape "
        "(under 3 minutes on 2 CPU cores; CI runs it). Its report is never used for a projection",
    )
    cal.add_argument(
        "--out",
        default=None,
        help="with --calibrate: the JSON report's path (default: the calibration folder's file for "
        "this device, where `run --dry-run` and `plan` look: $FSSL_CALIBRATION_DIR or "
        "~/.cache/fssl-bench/calibration/<device>.json; --tiny adds -tiny)",
    )
    cal.add_argument(
        "--budget",
        type=float,
        default=None,
        help="with --calibrate: seconds the whole command may take; configurations not reached by "
        "then fall back to plan's estimate (default 450, --tiny 160)",
    )


COMMANDS = {
    "run": cmd_run,
    "list": cmd_list,
    "plan": cmd_plan,
    "show": cmd_show,
    "status": cmd_status,
    "collect": cmd_collect,
    "prefetch": cmd_prefetch,
    "new-method": cmd_new_method,
    "new-task": cmd_new_task,
    "check-method": cmd_check_method,
    "submit": cmd_submit,
    "accept": cmd_accept,
    "ledger": cmd_ledger,
    "doctor": cmd_doctor,
    "verify": cmd_verify,
}


# What an interrupted command leaves, said in its own words (each command's clean-up guarantees it)
INTERRUPTED = {
    "run": "interrupted; finished cells are kept and the next run resumes the rest",
    "accept": "accept interrupted: nothing written under --results, the extracted bundle removed",
    "collect": "collect interrupted: every record copied so far is whole; collect again copies "
    "the rest",
    "submit": "submit interrupted: no bundle written",
}


def main(argv: Sequence[str] | None = None) -> int:
    from benchmark.core.config import ConfigError
    from benchmark.core.registry import RegistryError
    from benchmark.data.partition import PartitionError

    args = _parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except (UsageError, ConfigError, RegistryError, PartitionError) as exc:
        first, *rest = lines_of(exc)  # names from outside escaped; the project's lines kept
        print("\n".join([f"error: {first}", *rest]), file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt as exc:  # Ctrl-C, or a termination signal a command turned into one
        signum = getattr(exc, "signum", signal.SIGINT)
        message = INTERRUPTED.get(args.command, f"{args.command} interrupted")
        print(f"{message} ({signal.Signals(signum).name})", file=sys.stderr)
        return 128 + int(signum)
