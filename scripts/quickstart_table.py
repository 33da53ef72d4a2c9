"""The table of the embedded default (README, docs/quickstart.md), computed from records: ``python
scripts/quickstart_table.py [ROOT]``

ROOT (default ``results``) holds the quickstart's records. Prints two markdown tables: per
configuration, mean kNN and linear top-1 over the seeds by partition, the kNN margins over
``no_pretrain`` and ``no_pretrain_bn`` of the same backbone paired by seed with their 95 % Student-t
intervals (``leaderboard.margins``), and the bytes moved (IID); then the fine-tuned top-1 of the
ViTs and FedMAE's paired margin over the random ViT. Nothing is typed by hand.

``--facts`` prints, instead, the numbers the prose of docs/quickstart.md quotes: every per-seed kNN
margin over ``no_pretrain`` that is not positive, the random init's kNN per seed, the mean part of
the margin that BatchNorm calibration alone gives, which intervals exclude zero, FedMAE's fine-tune
margin per seed, the input itself's (``pixels``) kNN and linear top-1 and how many configurations
score below it, and the records' machines and kernel modes.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

PARTS = ("iid", "dir 0.1")
# the reference points and the supervised baseline; FedMAE is read against the random ViT
NOT_SSL = ("dec_sl", "no_pretrain", "no_pretrain_bn", "fedmae", "pixels")
# the input itself (methods/pixels.py): its row has no margin (no random init of its "backbone")
PIXELS = "pixels"


def _part(partition_name: str) -> str:
    return "iid" if partition_name == "iid" else "dir 0.1"


def _frame(root: Path):
    from benchmark.grids.expand import expand_grid, load_grid
    from benchmark.records.store import load_records
    from leaderboard.loading import records_frame

    ids = {c.cell_id for c in expand_grid(load_grid("quickstart"))}
    records = [(p, r) for p, r in load_records([root])[0] if r.cell_id in ids]
    frame = records_frame(records)
    frame["part"] = frame["partition_name"].map(_part)
    return frame[frame["eval_split"] == "test"], len(records)


def _margins(frame, task: str, baseline: str) -> dict[tuple, dict]:
    """(method, backbone, part) -> that configuration's row of ``leaderboard.margins``."""
    from leaderboard.margins import paired_margins

    table = paired_margins(frame, task=task, baseline=baseline)
    return {(r["method"], r["backbone"], _part(r["partition"])): r for _, r in table.iterrows()}


def _margin_text(row) -> str:
    return f"{row['margin']:+.1f} [{row['ci_low']:+.1f}, {row['ci_high']:+.1f}]"


def _margin_cells(frame, task: str, baseline: str) -> dict[tuple, str]:
    return {key: _margin_text(row) for key, row in _margins(frame, task, baseline).items()}


def tables(root: Path) -> str:
    frame, n = _frame(root)
    means = frame.groupby(["method", "backbone", "task", "part"])["value"].mean()
    knn0, knnbn = (
        _margin_cells(frame, "knn", "no_pretrain"),
        _margin_cells(frame, "knn", "no_pretrain_bn"),
    )
    mb = frame[(frame["part"] == "iid")].groupby(["method", "backbone"])["bytes"].mean() / 1e6
    configs = sorted(
        {(m, b) for m, b in zip(frame["method"], frame["backbone"])},
        key=lambda mb_: (-means.get((mb_[0], mb_[1], "knn", "iid"), 0.0), mb_),
    )

    def v(m, b, task, part):
        x = means.get((m, b, task, part))
        return "—" if x is None else f"{x:.1f}"

    lines = [
        f"{n} records of the quickstart grid under {root}.",
        "",
        "| method | backbone | kNN iid | kNN dir 0.1 | linear iid | linear dir 0.1 | kNN − no_pretrain iid | "
        "kNN − no_pretrain dir 0.1 | kNN − no_pretrain_bn iid | kNN − no_pretrain_bn dir 0.1 | MB up+down (iid) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for m, b in configs:
        cells = [v(m, b, "knn", p) for p in PARTS] + [v(m, b, "linear_probe", p) for p in PARTS]
        cells += [knn0.get((m, b, p), "—") for p in PARTS] + [
            knnbn.get((m, b, p), "—") for p in PARTS
        ]
        lines.append(f"| {m} | {b} | " + " | ".join(cells) + f" | {mb.get((m, b), 0.0):.1f} |")
    ft = _margin_cells(frame, "finetune", "no_pretrain")
    ft_rows = sorted(
        {
            (m, b)
            for m, b, t in zip(frame["method"], frame["backbone"], frame["task"])
            if t == "finetune"
        }
    )
    if ft_rows:
        lines += [
            "",
            "| method | backbone | fine-tune iid | fine-tune dir 0.1 | − random ViT iid | − random ViT dir 0.1 |",
            "|---|---|---|---|---|---|",
        ]
        for m, b in ft_rows:
            cells = [v(m, b, "finetune", p) for p in PARTS] + [
                ft.get((m, b, p), "—") for p in PARTS
            ]
            lines.append(f"| {m} | {b} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def fact_values(root: Path) -> dict:
    """The numbers the prose of docs/quickstart.md quotes, computed from the records (``facts``
    prints them; tests/test_quickstart_numbers.py holds the page to them)."""
    frame, n = _frame(root)
    knn = _margins(frame, "knn", "no_pretrain")
    ssl = sorted({m for m, b, _ in knn if b == "resnet_micro"} - set(NOT_SSL))
    pairs = [
        (m, p, int(s), float(v))
        for m in ssl
        for p in PARTS
        for s, v in sorted(knn[(m, "resnet_micro", p)]["per_seed"].items())
    ]
    rn = frame[(frame["method"] == "no_pretrain") & (frame["task"] == "knn")]
    rn = rn[rn["part"] == "iid"].sort_values("seed")
    calibration = {p: knn[("no_pretrain_bn", "resnet_micro", p)]["per_seed"] for p in PARTS}
    ft = _margins(frame, "finetune", "no_pretrain")
    return {
        **_pixel_facts(frame),
        "records": n,
        "ssl": ssl,
        "pairs": pairs,
        # a margin that prints as 0.0 or less is not "ahead"
        "not_ahead": [(m, p, s, v) for m, p, s, v in pairs if round(v, 1) <= 0],
        "no_pretrain_knn": {b: list(g["value"]) for b, g in rn.groupby("backbone")},
        "calibration": {p: sum(v.values()) / len(v) for p, v in calibration.items()},
        "above_zero": [key for key, row in knn.items() if row["ci_low"] > 0],
        "margins": {
            ("knn", "no_pretrain"): {k: _margin_text(r) for k, r in knn.items()},
            ("knn", "no_pretrain_bn"): _margin_cells(frame, "knn", "no_pretrain_bn"),
            ("finetune", "no_pretrain"): {k: _margin_text(r) for k, r in ft.items()},
        },
        "fedmae_finetune": {p: dict(ft[("fedmae", "vit_micro", p)]["per_seed"]) for p in PARTS},
        "envs": sorted(
            {(r.env.machine, (r.env.kernels or {}).get("mode")) for r in frame["record"]}
        ),
    }


def _pixel_facts(frame) -> dict:
    """The input itself: its mean kNN and linear top-1 per partition, and every other configuration
    (method, backbone) whose mean is below it on that task in both partitions. Empty before its
    records exist."""
    means = frame.groupby(["method", "backbone", "task", "part"])["value"].mean()
    mine = {k[2:]: float(v) for k, v in means.items() if k[0] == PIXELS}
    if not mine:
        return {"pixels": {}, "below_pixels": {}}
    configs = sorted({(m, b) for m, b, _, _ in means.index if m != PIXELS})
    below = {
        task: [
            c
            for c in configs
            if all(means.get((*c, task, p), float("inf")) < mine[(task, p)] for p in PARTS)
        ]
        for task in ("knn", "linear_probe")
    }
    return {"pixels": mine, "below_pixels": below, "configs": configs}


def facts(root: Path) -> str:
    f = fact_values(root)
    not_ahead = [f"{m} seed {s} {p} {v:+.1f}" for m, p, s, v in f["not_ahead"]]
    lines = [
        f"{f['records']} records of the quickstart grid under {root}.",
        f"kNN over no_pretrain, SSL methods on the ResNet ({', '.join(f['ssl'])}): "
        f"{len(f['pairs']) - len(not_ahead)} of {len(f['pairs'])} seed pairs positive; not positive: "
        + ("; ".join(not_ahead) or "none"),
    ]
    for b, values in f["no_pretrain_knn"].items():
        lines.append(f"no_pretrain {b} kNN per seed: " + ", ".join(f"{x:.1f}" for x in values))
    lines.append(
        "no_pretrain_bn - no_pretrain kNN (calibration alone): "
        + ", ".join(f"{p} {v:+.1f}" for p, v in f["calibration"].items())
    )
    lines.append(
        "kNN margin over no_pretrain with its 95 % interval above zero: "
        + ", ".join(f"{m} {p}" for m, _, p in f["above_zero"])
    )
    for p, per in f["fedmae_finetune"].items():
        lines.append(
            f"fedmae fine-tune - random ViT {p} per seed: "
            + ", ".join(f"seed {int(s)} {v:+.1f}" for s, v in sorted(per.items()))
        )
    if f["pixels"]:
        px = f["pixels"]
        for task in ("knn", "linear_probe"):
            lines.append(
                f"pixels {task}: "
                + ", ".join(f"{p} {px[(task, p)]:.1f}" for p in PARTS)
                + f"; {len(f['below_pixels'][task])} of {len(f['configs'])} configurations below "
                "it in both partitions"
            )
    lines.append("machines and kernel modes: " + ", ".join(f"{m} {k}" for m, k in f["envs"]))
    return "\n".join(lines)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--facts"]
    root = Path(args[0]) if args else REPO / "results"
    print(facts(root) if "--facts" in sys.argv[1:] else tables(root))
