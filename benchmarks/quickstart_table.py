"""The table of the embedded default (README, docs/quickstart.md), computed from records: ``python
benchmarks/quickstart_table.py [ROOT]``

ROOT (default ``results``) holds the quickstart's records. Prints two markdown tables: per
configuration, mean kNN and linear top-1 over the seeds by partition, the kNN margins over
``no_pretrain`` and ``no_pretrain_bn`` of the same backbone paired by seed with their 95 % Student-t
intervals (``leaderboard.margins``), and the bytes moved (IID); then the fine-tuned top-1 of the
ViTs and FedMAE's paired margin over the random ViT. Nothing is typed by hand.

``--facts`` prints, instead, the numbers the prose of docs/quickstart.md quotes: every per-seed kNN
margin over ``no_pretrain`` that is not positive, the random init's kNN per seed, the mean part of
the margin that BatchNorm calibration alone gives, which intervals exclude zero, FedMAE's fine-tune
margin per seed, and the records' machines and kernel modes.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

PARTS = ("iid", "dir 0.1")


def _frame(root: Path):
    from benchmark.grids.expand import expand_grid, load_grid
    from benchmark.records.store import load_records
    from leaderboard.build import records_frame

    ids = {c.cell_id for c in expand_grid(load_grid("quickstart"))}
    records = [(p, r) for p, r in load_records([root])[0] if r.cell_id in ids]
    frame = records_frame(records)
    frame["part"] = frame["partition_name"].map(lambda n: "iid" if n == "iid" else "dir 0.1")
    return frame[frame["eval_split"] == "test"], len(records)


def _margin_cells(frame, task: str, baseline: str) -> dict[tuple, str]:
    from leaderboard.margins import paired_margins

    table = paired_margins(frame, task=task, baseline=baseline)
    out = {}
    for _, row in table.iterrows():
        part = "iid" if row["partition"] == "iid" else "dir 0.1"
        out[(row["method"], row["backbone"], part)] = (
            f"{row['margin']:+.1f} [{row['ci_low']:+.1f}, {row['ci_high']:+.1f}]"
        )
    return out


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


def _per_seed(table, m: str, b: str, part: str) -> dict:
    row = table[(table["method"] == m) & (table["backbone"] == b)]
    row = row[row["partition"].map(lambda p: ("iid" if p == "iid" else "dir 0.1") == part)]
    return dict(row.iloc[0]["per_seed"]) if len(row) else {}


def facts(root: Path) -> str:
    from leaderboard.margins import paired_margins

    frame, n = _frame(root)
    knn = paired_margins(frame, task="knn", baseline="no_pretrain")
    ssl = sorted(set(knn["method"]) - {"dec_sl", "no_pretrain_bn", "fedmae"})
    pairs = [
        (m, p, int(s), float(v))
        for m in ssl
        for p in PARTS
        for s, v in sorted(_per_seed(knn, m, "resnet_micro", p).items())
    ]
    bad = [f"{m} seed {s} {p} {v:+.1f}" for m, p, s, v in pairs if round(v, 1) <= 0]
    lines = [
        f"{n} records of the quickstart grid under {root}.",
        f"kNN over no_pretrain, SSL methods on the ResNet ({', '.join(ssl)}): "
        f"{len(pairs) - len(bad)} of {len(pairs)} seed pairs positive; not positive: "
        + ("; ".join(bad) or "none"),
    ]
    rn = frame[(frame["method"] == "no_pretrain") & (frame["task"] == "knn")]
    for b in sorted(set(rn["backbone"])):
        per = rn[(rn["backbone"] == b) & (rn["part"] == "iid")].sort_values("seed")
        lines.append(
            f"no_pretrain {b} kNN per seed: " + ", ".join(f"{x:.1f}" for x in per["value"])
        )
    bn = _per_seed(knn, "no_pretrain_bn", "resnet_micro", "iid")
    bnd = _per_seed(knn, "no_pretrain_bn", "resnet_micro", "dir 0.1")
    lines.append(
        "no_pretrain_bn - no_pretrain kNN (calibration alone): "
        f"iid {sum(bn.values()) / len(bn):+.1f}, dir 0.1 {sum(bnd.values()) / len(bnd):+.1f}"
    )
    above = knn[knn["ci_low"] > 0]
    lines.append(
        "kNN margin over no_pretrain with its 95 % interval above zero: "
        + ", ".join(
            f"{r.method} {'iid' if r.partition == 'iid' else 'dir 0.1'}" for r in above.itertuples()
        )
    )
    ft = paired_margins(frame, task="finetune", baseline="no_pretrain")
    for p in PARTS:
        per = _per_seed(ft, "fedmae", "vit_micro", p)
        lines.append(
            f"fedmae fine-tune - random ViT {p} per seed: "
            + ", ".join(f"seed {int(s)} {v:+.1f}" for s, v in sorted(per.items()))
        )
    envs = {(r.env.machine, (r.env.kernels or {}).get("mode")) for r in frame["record"]}
    lines.append("machines and kernel modes: " + ", ".join(f"{m} {k}" for m, k in sorted(envs)))
    return "\n".join(lines)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--facts"]
    root = Path(args[0]) if args else REPO / "results"
    print(facts(root) if "--facts" in sys.argv[1:] else tables(root))
