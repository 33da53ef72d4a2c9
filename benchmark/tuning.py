"""``python -m benchmark.tuning``: the quickstart's per-method settings, chosen from a ``quickstart_tune`` run.

Validation records only (``dataset.eval_split: validation``; a test-split record is refused). Scores are paired by
(partition, seed) with the reference point of the same backbone and the same task settings:

- every method but FedMAE: its kNN top-1 minus ``no_pretrain``'s (the ResNet);
- FedMAE (its paper's claim is fine-tuned accuracy): its fine-tune top-1 minus the random ViT's, fine-tuned alike.
  The fine-tune schedule (epochs) is sized on the data first — the number of epochs at which the random ViT's own
  validation accuracy is highest (not the one that flatters FedMAE's margin) — and FedMAE's variant is chosen at it.

Per method, among the variants (batch size x learning rate) whose mean paired margin over both partitions and all
seeds is within ``TIE`` points of the best, the one with the largest batch size (the fewest client steps, so the
cheapest) is chosen, then the highest margin: the quickstart has to fit its time budget, and a difference inside
validation noise buys nothing for its cost. ``--write FILE`` stores the whole table and the choice as JSON; a test holds the quickstart grid
to that file. Only the records of the grid's current cells count (a root may hold cells of an older version of it).
"""

from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from benchmark.records.store import load_records

TUNED_KEYS = ("batch_size", "local_batch_size", "lr", "local_lr", "distill_lr", "blr")
TIE = 1.0  # validation kNN points: differences below this are within the sweep's seed noise (2 seeds x 2 partitions)
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


def _grid_records(roots: list[Path], grid: str) -> list[Any]:
    from benchmark.grid import expand_grid, load_grid

    ids = {c.cell_id for c in expand_grid(load_grid(grid))}
    records, _ = load_records([Path(r) for r in roots])
    return [r for _, r in records if r.cell_id in ids]


def score_table(roots: list[Path], grid: str = "quickstart_tune") -> list[dict[str, Any]]:
    """One row per (method, backbone, variant, task, partition, seed) with its value and paired margin."""
    records = [r for r in _grid_records(roots, grid) if r.status == "ok"]
    for r in records:
        if r.cell["dataset"]["params"].get("eval_split") != "validation":
            raise ValueError(f"{r.cell_id}: a test-split record; choices are made on validation records only")
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
            rows.append({"method": r.method, "backbone": r.cell["backbone"]["name"], "variant": _variant(r),
                         "task": task, "partition": r.partition_label, "seed": r.seed, "value": value,
                         "margin": None if ref is None else value - ref})
    return rows


def _mean(values: list[float]) -> float:
    return math.fsum(values) / len(values) if values else math.nan


def finetune_epochs(roots: list[Path], grid: str = "quickstart_tune") -> tuple[int | None, dict[int, float]]:
    """The fine-tune schedule sized on the data: the epochs with the highest mean random-ViT validation accuracy."""
    acc: dict[int, list[float]] = defaultdict(list)
    for r in _grid_records(roots, grid):
        if r.method == BASELINE and r.status == "ok":
            for task, value in _scores(r):
                if task.startswith("finetune@"):
                    acc[int(task.split("@")[1])].append(value)
    means = {e: _mean(v) for e, v in sorted(acc.items())}
    return (max(means, key=lambda e: means[e]) if means else None), means


def select(roots: list[Path], grid: str = "quickstart_tune") -> dict[str, Any]:
    rows = score_table(roots, grid)
    epochs, vit_means = finetune_epochs(roots, grid)
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for row in rows:
        want = f"finetune@{epochs}" if row["method"] == "fedmae" else "knn"
        if row["task"] == want and row["margin"] is not None:
            groups[(row["method"], json.dumps(row["variant"], sort_keys=True))].append(row)
    table = []
    for (method, variant), g in sorted(groups.items()):
        table.append({"method": method, "variant": json.loads(variant), "task": g[0]["task"], "n": len(g),
                      "partitions": sorted({r["partition"] for r in g}), "mean_value": _mean([r["value"] for r in g]),
                      "mean_margin": _mean([r["margin"] for r in g])})
    chosen: dict[str, Any] = {}
    for method in sorted({row["method"] for row in table}):
        rows = [r for r in table if r["method"] == method]
        top = max(r["mean_margin"] for r in rows)
        near = [r for r in rows if r["mean_margin"] >= top - TIE]
        chosen[method] = max(near, key=lambda r: (_batch(r["variant"]), r["mean_margin"]))
    return {"rule": f"per method, among the variants within {TIE:g} point of the highest mean paired validation "
                    "margin over both partitions and all seeds, the one with the largest batch size (fewest client "
                    "steps), then the highest margin (kNN over no_pretrain; FedMAE: fine-tune over the random ViT at "
                    "the schedule where the random ViT does best)",
            "finetune_epochs": epochs, "random_vit_finetune_by_epochs": vit_means,
            "chosen": {m: {"params": r["variant"], "mean_margin": r["mean_margin"], "task": r["task"]}
                       for m, r in sorted(chosen.items())},
            "table": table}


def _batch(variant: dict[str, Any]) -> int:
    return int(variant.get("batch_size", variant.get("local_batch_size", 0)))


def markdown(selection: dict[str, Any]) -> str:
    lines = [f"Rule: {selection['rule']}.", "",
             f"Fine-tune schedule: {selection['finetune_epochs']} epochs (random ViT validation top-1 by epochs: "
             + ", ".join(f"{e}: {v:.1f}" for e, v in selection["random_vit_finetune_by_epochs"].items()) + ").", "",
             "| method | variant | task | cells | mean validation top-1 | mean paired margin | chosen |",
             "|---|---|---|---|---|---|---|"]
    for row in selection["table"]:
        chosen = selection["chosen"][row["method"]]["params"] == row["variant"]
        variant = ", ".join(f"{k}={v:g}" for k, v in row["variant"].items())
        lines.append(f"| {row['method']} | {variant} | {row['task']} | {row['n']} | {row['mean_value']:.1f} | "
                     f"{row['mean_margin']:+.1f} | {'**yes**' if chosen else ''} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmark.tuning", description=__doc__.splitlines()[0])
    p.add_argument("--root", action="append", type=Path, required=True, help="a quickstart_tune run root")
    p.add_argument("--grid", default="quickstart_tune", help="the sweep grid whose cells count (default quickstart_tune)")
    p.add_argument("--write", type=Path, default=None, help="write the selection as JSON (and a .md beside it)")
    args = p.parse_args(argv)
    selection = select(args.root, args.grid)
    text = markdown(selection)
    print(text)
    if args.write:
        args.write.parent.mkdir(parents=True, exist_ok=True)
        args.write.write_text(json.dumps(selection, indent=2, sort_keys=True) + "\n")
        args.write.with_suffix(".md").write_text("# quickstart_tune: the choice\n\n" + text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
