"""``python -m benchmark.commands.tuning``: the quickstart's per-method settings, chosen from a
``quickstart_tune`` run.

Validation records only (``dataset.eval_split: validation``; a test-split record is refused). Scores
are paired by (partition, seed) with the reference point of the same backbone and the same task
settings:

- every method but FedMAE: its kNN top-1 minus ``no_pretrain``'s (the ResNet);
- FedMAE (its paper's claim is fine-tuned accuracy): its fine-tune top-1 minus the random ViT's,
  fine-tuned alike. The fine-tune schedule (epochs) is sized on the data first — the number of
  epochs at which the random ViT's own validation accuracy is highest (not the one that flatters
  FedMAE's margin) — and FedMAE's variant is chosen at it.

Per method, among the variants (batch size x learning rate) whose mean paired margin over both
partitions and all seeds is within ``TIE`` points of the best, the one with the largest batch size
(the fewest client steps, so the cheapest) is chosen, then the highest margin: the quickstart has to
fit its time budget, and a difference inside validation noise buys nothing for its cost.
``--finetune`` chooses FedMAE's fine-tune recipe from a ``quickstart_finetune_tune`` run instead:
the recipe under which the random ViT does best. ``--write FILE`` stores the whole table and the
choice as JSON; a test holds the quickstart grid to that file. Only the records of the grid's
current cells count (a root may hold cells of an older version of it).
"""

from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from benchmark.core.docstrings import summary
from benchmark.records.store import load_records

TUNED_KEYS = ("batch_size", "local_batch_size", "lr", "local_lr", "distill_lr", "blr")
# validation kNN points: differences below this are within the sweep's seed noise (2 seeds x 2
# partitions)
TIE = 1.0
BASELINE = "no_pretrain"


def _variant(record: Any) -> dict[str, Any]:
    params = record.cell["method"]["params"]
    return {k: params[k] for k in TUNED_KEYS if k in params}


def _scores(record: Any) -> Iterable[tuple[str, float]]:
    """(task key, top-1) of the record: "knn", or "finetune@E" for a fine-tune of E epochs."""
    for s in record.scores:
        if "top1" not in s.values:
            continue
        if s.task == "finetune":
            yield f"finetune@{int(s.card.settings.get('epochs'))}", float(s.values["top1"])
        elif s.task == "knn":
            yield "knn", float(s.values["top1"])


def _grid_records(roots: list[Path], grid: str, add_method: Sequence[str] = ()) -> list[Any]:
    from benchmark.grids.expand import expand_grid, load_grid, with_methods

    ids = {c.cell_id for c in expand_grid(with_methods(load_grid(grid), list(add_method)))}
    records, _ = load_records([Path(r) for r in roots])
    return [r for _, r in records if r.cell_id in ids]


def score_table(
    roots: list[Path], grid: str = "quickstart_tune", add_method: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """One row per (method, backbone, variant, task, partition, seed) with its value and paired
    margin; ``add_method``: the plugins ``run --grid GRID --add-method M`` swept beside the
    built-ins (their cells count too)."""
    records = [r for r in _grid_records(roots, grid, add_method) if r.status == "ok"]
    for r in records:
        if r.cell["dataset"]["params"].get("eval_split") != "validation":
            raise ValueError(
                f"{r.cell_id}: a test-split record; choices are made on validation records only"
            )
    base: dict[tuple, float] = {}
    for r in records:
        if r.method == BASELINE:
            for task, value in _scores(r):
                base[(r.cell["backbone"]["name"], task, r.partition_label, r.seed)] = value
    rows = []
    for r in records:
        if r.method == BASELINE:
            continue
        for task, value in _scores(r):
            ref = base.get((r.cell["backbone"]["name"], task, r.partition_label, r.seed))
            rows.append(
                {
                    "method": r.method,
                    "backbone": r.cell["backbone"]["name"],
                    "variant": _variant(r),
                    "task": task,
                    "partition": r.partition_label,
                    "seed": r.seed,
                    "value": value,
                    "margin": None if ref is None else value - ref,
                }
            )
    return rows


def _mean(values: list[float]) -> float:
    return math.fsum(values) / len(values) if values else math.nan


def finetune_epochs(
    roots: list[Path], grid: str = "quickstart_tune"
) -> tuple[int | None, dict[int, float]]:
    """The fine-tune schedule sized on the data: the epochs with the highest mean random-ViT
    validation accuracy."""
    acc: dict[int, list[float]] = defaultdict(list)
    for r in _grid_records(roots, grid):
        if r.method == BASELINE and r.status == "ok":
            for task, value in _scores(r):
                if task.startswith("finetune@"):
                    acc[int(task.split("@")[1])].append(value)
    means = {e: _mean(v) for e, v in sorted(acc.items())}
    return (max(means, key=lambda e: means[e]) if means else None), means


def select(
    roots: list[Path], grid: str = "quickstart_tune", add_method: Sequence[str] = ()
) -> dict[str, Any]:
    rows = score_table(roots, grid, add_method)
    epochs, vit_means = finetune_epochs(roots, grid)
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for row in rows:
        want = f"finetune@{epochs}" if row["method"] == "fedmae" else "knn"
        if row["task"] == want and row["margin"] is not None:
            groups[(row["method"], json.dumps(row["variant"], sort_keys=True))].append(row)
    table = []
    for (method, variant), g in sorted(groups.items()):
        table.append(
            {
                "method": method,
                "variant": json.loads(variant),
                "task": g[0]["task"],
                "n": len(g),
                "partitions": sorted({r["partition"] for r in g}),
                "mean_value": _mean([r["value"] for r in g]),
                "mean_margin": _mean([r["margin"] for r in g]),
            }
        )
    chosen: dict[str, Any] = {}
    for method in sorted({row["method"] for row in table}):
        rows = [r for r in table if r["method"] == method]
        top = max(r["mean_margin"] for r in rows)
        near = [r for r in rows if r["mean_margin"] >= top - TIE]
        chosen[method] = max(near, key=lambda r: (_batch(r["variant"]), r["mean_margin"]))
    return {
        "rule": f"per method, among the variants within {TIE:g} point of the highest mean paired validation "
        "margin over both partitions and all seeds, the one with the largest batch size (fewest client "
        "steps), then the highest margin (kNN over no_pretrain; FedMAE: fine-tune over the random ViT at "
        "the schedule where the random ViT does best)",
        "finetune_epochs": epochs,
        "random_vit_finetune_by_epochs": vit_means,
        "chosen": {
            m: {"params": r["variant"], "mean_margin": r["mean_margin"], "task": r["task"]}
            for m, r in sorted(chosen.items())
        },
        "table": table,
    }


FINETUNE_GRID = "quickstart_finetune_tune"


def finetune_recipe(settings: dict[str, Any]) -> dict[str, Any]:
    """The recipe a fine-tune card states: schedule, base lr, layer decay and the regularisers the
    sweep varies."""
    aug = settings.get("augmentation") or {}
    return {
        "epochs": int(settings["epochs"]),
        "blr": float(settings["blr"]),
        "layer_decay": float(settings["layer_decay"]),
        "rand_augment": str(aug.get("rand_augment", "")),
        "mixup": float(settings["mixup"]),
        "cutmix": float(settings["cutmix"]),
        "reprob": float((aug.get("random_erasing") or {}).get("p", 0.0)),
    }


def select_finetune_recipe(roots: list[Path], grid: str = FINETUNE_GRID) -> dict[str, Any]:
    """The fine-tune recipe for FedMAE's claim: the one under which the random ViT (``no_pretrain``)
    reaches the highest mean validation top-1 over both partitions and all seeds — sized on the
    data, not on FedMAE's margin — with every recipe's FedMAE top-1 and paired margin beside it."""
    by: dict[tuple[str, str], dict[tuple[str, int], float]] = defaultdict(dict)
    for r in _grid_records(roots, grid):
        if r.status != "ok" or r.method not in (BASELINE, "fedmae"):
            continue
        if r.cell["dataset"]["params"].get("eval_split") != "validation":
            raise ValueError(
                f"{r.cell_id}: a test-split record; choices are made on validation records only"
            )
        for s in r.scores:
            if s.task == "finetune" and "top1" in s.values:
                key = json.dumps(finetune_recipe(dict(s.card.settings)), sort_keys=True)
                by[(key, r.method)][(r.partition_label, r.seed)] = float(s.values["top1"])
    table = []
    for key in sorted({k for k, _ in by}):
        vit, mae = by.get((key, BASELINE), {}), by.get((key, "fedmae"), {})
        paired = sorted(vit.keys() & mae.keys())
        table.append(
            {
                "recipe": json.loads(key),
                "n": len(vit),
                "random_vit": _mean(list(vit.values())),
                "fedmae": _mean(list(mae.values())),
                "pairs": len(paired),
                "mean_margin": _mean([mae[k] - vit[k] for k in paired]),
            }
        )
    if not table:
        raise ValueError(
            f"no fine-tune records of grid {grid!r} under {', '.join(map(str, roots))}"
        )
    chosen = max(table, key=lambda row: row["random_vit"])
    return {
        "rule": "the recipe under which the random ViT's mean validation top-1 (both partitions, all seeds) is "
        "highest; FedMAE's top-1 and its paired margin are shown, not used",
        "chosen": chosen["recipe"],
        "table": table,
    }


def finetune_markdown(selection: dict[str, Any]) -> str:
    lines = [
        f"Rule: {selection['rule']}.",
        "",
        "| epochs | blr | layer decay | RandAugment | mixup / cutmix | erasing | random ViT top-1 | FedMAE top-1 "
        "| paired margin | chosen |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in selection["table"]:
        r = row["recipe"]
        lines.append(
            f"| {r['epochs']} | {r['blr']:g} | {r['layer_decay']:g} | {r['rand_augment'] or 'off'} | "
            f"{r['mixup']:g} / {r['cutmix']:g} | {r['reprob']:g} | {row['random_vit']:.1f} (n={row['n']}) | "
            f"{row['fedmae']:.1f} | {row['mean_margin']:+.1f} | "
            f"{'**yes**' if r == selection['chosen'] else ''} |"
        )
    return "\n".join(lines) + "\n"


def _batch(variant: dict[str, Any]) -> int:
    return int(variant.get("batch_size", variant.get("local_batch_size", 0)))


def markdown(selection: dict[str, Any]) -> str:
    lines = [
        f"Rule: {selection['rule']}.",
        "",
        f"Fine-tune schedule: {selection['finetune_epochs']} epochs (random ViT validation top-1 by epochs: "
        + ", ".join(f"{e}: {v:.1f}" for e, v in selection["random_vit_finetune_by_epochs"].items())
        + ").",
        "",
        "| method | variant | task | cells | mean validation top-1 | mean paired margin | chosen |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in selection["table"]:
        chosen = selection["chosen"][row["method"]]["params"] == row["variant"]
        variant = ", ".join(f"{k}={v:g}" for k, v in row["variant"].items())
        lines.append(
            f"| {row['method']} | {variant} | {row['task']} | {row['n']} | {row['mean_value']:.1f} | "
            f"{row['mean_margin']:+.1f} | {'**yes**' if chosen else ''} |"
        )
    return "\n".join(lines) + "\n"


def track_command(grid: str, method: str, params: dict[str, Any]) -> str:
    """The ``run`` line that runs ``method`` on the track's grid (the sweep grid's name without
    ``_tune``) at the settings the sweep chose."""
    settings = ",".join(f"{k}={v:g}" for k, v in sorted(params.items()))
    track_grid = grid.removesuffix("_tune")
    added = f"{method}:{settings}" if settings else method
    return f"python -m benchmark run --grid {track_grid} --add-method '{added}'"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmark.commands.tuning", description=summary(__doc__)
    )
    p.add_argument(
        "--root",
        action="append",
        type=Path,
        required=True,
        help="a run root of the sweep grid (quickstart_tune, or quickstart_finetune_tune with --finetune)",
    )
    p.add_argument(
        "--grid",
        default=None,
        help=f"the sweep grid whose cells count (default quickstart_tune; {FINETUNE_GRID} with --finetune)",
    )
    p.add_argument(
        "--write", type=Path, default=None, help="write the selection as JSON (and a .md beside it)"
    )
    p.add_argument(
        "--add-method",
        action="append",
        default=[],
        help="a plugin swept with `run --grid quickstart_tune --add-method M`: its cells count, "
        "chosen by the same rule, and the line to run it on the track with its choice is printed",
    )
    p.add_argument(
        "--finetune",
        action="store_true",
        help=f"choose FedMAE's fine-tune recipe from a {FINETUNE_GRID} run instead (grid default then "
        f"{FINETUNE_GRID})",
    )
    args = p.parse_args(argv)
    if args.finetune:
        grid = args.grid or FINETUNE_GRID
        selection = select_finetune_recipe(args.root, grid)
        text = finetune_markdown(selection)
        title = f"# {grid}: the choice"
    else:
        grid = args.grid or "quickstart_tune"
        selection = select(args.root, grid, args.add_method)
        text, title = markdown(selection), f"# {grid}: the choice"
        text += "".join(
            f"\n{m} on the track: {track_command(grid, m, selection['chosen'][m]['params'])}\n"
            for m in args.add_method
            if m in selection["chosen"]
        )
    print(text)
    if args.write:
        args.write.parent.mkdir(parents=True, exist_ok=True)
        args.write.write_text(json.dumps(selection, indent=2, sort_keys=True) + "\n")
        args.write.with_suffix(".md").write_text(f"{title}\n\n" + text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
