"""Paired margins over a baseline method: ``python -m leaderboard margins --results DIR --task
knn``.

Seed-to-seed noise can swamp a method's gain: on the embedded default the random-init network alone
moves by several kNN points between training seeds. A margin is therefore computed *per seed*,
against the baseline run with the same seed and everything else that defines the comparison the same
(dataset, backbone with its parameters, federation, partition, protocol card), and only then
averaged. The table holds, per configuration and partition, the per-seed margins, their mean, sample
std and Student-t interval (``stats.summarize``), the number of seeds with a positive margin, and
the mean score itself.

The default baseline is ``no_pretrain`` (random init), the reference the issues state their margins
against. A baseline that does not train (``no_pretrain``) gives the same number under every
partition; when no baseline record has the method's partition, one of the same seed under another
partition is used, and the row says so. Scores whose card selects on the test set are left out.
Torch-free: records and pandas only.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pandas as pd

from leaderboard import stats
from leaderboard.formatting import alpha_number, finite

# what must be equal for a baseline score to pair with a method's score (besides seed and partition)
PAIR_KEYS = (
    "dataset",
    "eval_split",
    "backbone_key",
    "fl_num_clients",
    "fl_participation",
    "task",
    "card_id",
)

MARGIN_COLUMNS = [
    "method",
    "variant",
    "backbone",
    "eval_split",
    "partition",
    "partition_label",
    "config_key",
    "n",
    "mean",
    "margin",
    "margin_std",
    "ci_low",
    "ci_high",
    "positive",
    "per_seed",
    "baseline_partition",
]


def _pair_key(row: pd.Series) -> tuple:
    return (*(row[k] for k in PAIR_KEYS), int(row["seed"]))


def paired_margins(
    frame: pd.DataFrame, *, task: str, baseline: str = "no_pretrain"
) -> pd.DataFrame:
    """One row per (configuration, partition) of every method but ``baseline`` on ``task`` (see the
    module doc).

    ``frame`` is :func:`leaderboard.build.records_frame`. ``per_seed`` maps seed -> margin; seeds
    without a baseline partner are dropped (and so do not count in ``n``)."""
    ok = frame[
        (frame["task"] == task)
        & (frame["status"] == "ok")
        & frame["value"].map(finite)
        & ~frame["selects_on_test"].astype(bool)
    ]
    base = ok[ok["method"] == baseline]
    runs = ok[ok["method"] != baseline]
    variants = _variants(runs)
    index: dict[tuple, dict[str, float]] = {}
    for _, b in base.iterrows():
        index.setdefault(_pair_key(b), {})[b["partition_label"]] = b["value"]
    rows: list[dict[str, Any]] = []
    for (ckey, part), g in runs.groupby(["config_key", "partition_label"], sort=False):
        per_seed: dict[int, float] = {}
        values: list[float] = []
        other_partition = False
        for _, r in g.sort_values("seed").iterrows():
            partners = index.get(_pair_key(r), {})
            if not partners:
                continue
            if part in partners:
                ref = partners[part]
            else:
                ref = partners[min(partners)]
                other_partition = True
            per_seed[int(r["seed"])] = float(r["value"]) - float(ref)
            values.append(float(r["value"]))
        if not per_seed:
            continue
        s = stats.summarize(list(per_seed.values()))
        first = g.iloc[0]
        rows.append(
            {
                "method": first["method"],
                "variant": variants[ckey],
                "backbone": first["backbone"],
                "eval_split": first["eval_split"],
                "partition": _short_partition(first["partition_name"], first["alpha"], part),
                "partition_label": part,
                "config_key": ckey,
                "n": s.n,
                "mean": math.fsum(values) / len(values),
                "margin": s.mean,
                "margin_std": s.std,
                "ci_low": s.ci_low,
                "ci_high": s.ci_high,
                "positive": sum(m > 0 for m in per_seed.values()),
                "per_seed": per_seed,
                "baseline_partition": "other" if other_partition else "same",
            }
        )
    out = pd.DataFrame(rows, columns=MARGIN_COLUMNS)
    return out.sort_values(
        ["backbone", "method", "variant", "partition_label"], kind="mergesort"
    ).reset_index(drop=True)


def _variants(runs: pd.DataFrame) -> dict[str, str]:
    """config_key -> the method parameters that tell it from the method's other configurations on
    the same backbone (e.g. ``lr=0.32`` in a learning-rate sweep); "" when the method has one
    configuration."""
    out: dict[str, str] = {}
    for _, g in runs.groupby(["method", "backbone_key"], sort=False):
        configs = {
            k: json.loads(p)
            for k, p in g.groupby("config_key", sort=False)["method_params"].first().items()
        }
        varying = sorted(
            {
                k
                for p in configs.values()
                for k in p
                if len({json.dumps(q.get(k), sort_keys=True) for q in configs.values()}) > 1
            }
        )
        for ckey, params in configs.items():
            out[ckey] = ", ".join(f"{k}={_short(params.get(k))}" for k in varying)
    return out


def _label(row: pd.Series) -> str:
    """The method with its variant, e.g. ``fedu (lr=0.32)``."""
    return f"{row['method']} ({row['variant']})" if row["variant"] else row["method"]


def _short(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else json.dumps(value, sort_keys=True)


def select_best(table: pd.DataFrame) -> pd.DataFrame:
    """Per method and backbone, its configuration (variant) with the highest margin averaged over
    the partitions it ran under. Only variants scored under every partition any variant of that
    method ran under compete, so one missing cell cannot win by leaving out a hard partition. Meant
    for validation runs (``eval_split: validation``); on test-split records it would select on the
    test set, so it refuses them."""
    if (table["eval_split"] != "validation").any():
        raise ValueError(
            "select_best chooses hyperparameters: give it validation runs (dataset eval_split: "
            "validation), not test-split records"
        )
    rows = []
    for _, g in table.groupby(["method", "backbone"], sort=False):
        parts = set(g["partition_label"])
        scored = {
            v: vg
            for v, vg in g.groupby("variant", sort=False)
            if set(vg["partition_label"]) == parts
        }
        averages = {v: math.fsum(vg["margin"]) / len(vg) for v, vg in scored.items()}
        best = max(averages, key=lambda v: averages[v]) if averages else None
        for v, vg in g.groupby("variant", sort=False):
            rows.append(
                {
                    "method": vg.iloc[0]["method"],
                    "backbone": vg.iloc[0]["backbone"],
                    "variant": v,
                    "partitions": {r["partition"]: r["margin"] for _, r in vg.iterrows()},
                    "average": averages.get(v, float("nan")),
                    "chosen": v == best,
                }
            )
    return pd.DataFrame(
        rows, columns=["method", "backbone", "variant", "partitions", "average", "chosen"]
    )


def selection_markdown(selection: pd.DataFrame, *, task: str, baseline: str) -> str:
    lines = [
        f"| method | backbone | variant | {task} margin over {baseline} per partition | average | chosen |",
        "|---|---|---|---|---|---|",
    ]
    for _, r in selection.iterrows():
        parts = ", ".join(f"{p}: {_signed(m)}" for p, m in r["partitions"].items())
        avg = _signed(r["average"]) if finite(r["average"]) else "— (a partition is missing)"
        lines.append(
            f"| {r['method']} | {r['backbone']} | {r['variant'] or '—'} | {parts} | {avg} | "
            f"{'**yes**' if r['chosen'] else ''} |"
        )
    return "\n".join(lines)


def markdown(table: pd.DataFrame, *, task: str, baseline: str) -> str:
    """The table as Markdown: one line per configuration and partition, margins with their per-seed
    values."""
    lines = [
        (
            f"| method | backbone | partition | seeds | {task} mean | margin over {baseline} (per seed) | "
            f"95 % CI | seeds > 0 |"
        ),
        "|---|---|---|---|---|---|---|---|",
    ]
    if (table["eval_split"] != "test").any():
        lines.insert(
            0,
            "Scored on the validation split (eval_split: validation), for choosing hyperparameters.\n",
        )
    for _, r in table.iterrows():
        seeds = ", ".join(f"{_signed(v)}" for _, v in sorted(r["per_seed"].items()))
        if r["baseline_partition"] == "other":
            seeds += "; baseline from another partition"
        lines.append(
            f"| {_label(r)} | {r['backbone']} | {r['partition']} | {r['n']} | {r['mean']:.1f} | "
            f"{_signed(r['margin'])} ({seeds}) | {_ci_text(r)} | {r['positive']}/{r['n']} |"
        )
    return "\n".join(lines)


def to_json(table: pd.DataFrame) -> str:
    return json.dumps(
        [
            {k: (v if not isinstance(v, float) or finite(v) else None) for k, v in row.items()}
            for row in table.to_dict(orient="records")
        ],
        indent=1,
        default=str,
    )


def _short_partition(name: Any, alpha: Any, label: str) -> str:
    if name == "iid":
        return "iid"
    return f"{name} α={alpha_number(alpha)}" if finite(alpha) else label


def _ci_text(row: pd.Series) -> str:
    return (
        "—"
        if not finite(row["ci_low"])
        else f"[{_signed(row['ci_low'])}, {_signed(row['ci_high'])}]"
    )


def _signed(x: float) -> str:
    return f"{x:+.1f}".replace("-", "−")


def margin_rows(table: pd.DataFrame) -> list[dict[str, Any]]:
    """The table as display rows (text already formatted) for the track page."""
    out = []
    for _, r in table.iterrows():
        seeds = ", ".join(f"s{k}: {_signed(v)}" for k, v in sorted(r["per_seed"].items()))
        out.append(
            {
                "method": _label(r),
                "backbone": r["backbone"],
                "partition": r["partition"],
                "n": int(r["n"]),
                "margin": _signed(r["margin"]),
                "margin_sort": r["margin"],
                "ci": _ci_text(r),
                "per_seed": seeds,
                "positive": f"{r['positive']}/{r['n']}",
                "other_partition": r["baseline_partition"] == "other",
            }
        )
    return out
