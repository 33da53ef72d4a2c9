"""kNN with few labels per class on the embedded default (docs/quickstart.md): ``python
scripts/fewlabel_knn.py [--methods pixels,no_pretrain,...] [--seeds 0,1,2] [--labels 1,5,10]``

A measurement beside the shipped protocol, not a change of it: each chosen quickstart cell (IID) is
pre-trained exactly as ``benchmark run --grid quickstart`` trains it (same cell, the portable kernel
mode), its frozen features are extracted as ``knn@v1`` extracts them, and the kNN vote of
``knn@v1`` (cosine, t = 0.1, k = min(200, bank)) is scored on the whole test split with a bank of only
``n`` labelled training images per class (``draws`` class-stratified draws per seed, drawn with a
fixed generator from the seed and the draw). The full-bank column is ``knn@v1`` itself and equals the
records' kNN. Prints a markdown table: per method and n, the mean over seeds and draws.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

DEFAULT_METHODS = (
    "pixels",
    "no_pretrain",
    "no_pretrain_bn",
    "fedavg_simclr",
    "central_ssl",
    "dec_sl",
)


def stratified_bank(labels, n: int, num_classes: int, seed: int):
    """Indices of ``n`` training images per class, drawn without replacement by ``seed``."""
    import numpy as np

    rng = np.random.default_rng(seed)
    picks = [
        rng.choice(np.flatnonzero(labels == c), size=n, replace=False) for c in range(num_classes)
    ]
    return np.sort(np.concatenate(picks))


def features(cell, root: Path):
    """(train features, test features, splits) of the cell's exported encoder, trained as the grid
    trains it."""
    import torch

    from benchmark.engine.stages import export_encoder, prepare, pretrain
    from benchmark.portable import mode as portable
    from benchmark.runroot.rundir import PretrainDir
    from tasks.features import extract_features

    portable.activate(cell.kernels, "cpu")
    prep = prepare(cell, device=torch.device("cpu"))
    pre = pretrain(prep, PretrainDir(root / cell.cell_id))
    enc = export_encoder(prep.method, pre.server, pre.client_states())
    cpu = torch.device("cpu")
    ds = prep.dataset
    train = extract_features(enc.module, ds.train, enc.mean, enc.std, cpu)
    test = extract_features(enc.module, ds.test, enc.mean, enc.std, cpu)
    return train, test, ds


def measure(methods, seeds, labels, draws: int) -> dict:
    import numpy as np

    from benchmark.grids.expand import expand_grid, load_grid
    from tasks.probes.knn import knn_top1

    cells = [
        c
        for c in expand_grid(load_grid("quickstart"))
        if c.method.name in methods
        and c.partition.name == "iid"
        and c.seed in seeds
        and c.backbone.name != "vit_micro"
    ]
    out: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for cell in cells:
            train, test, ds = features(cell, Path(tmp))
            ytr, yte = np.asarray(ds.train.labels), np.asarray(ds.test.labels)
            row = out.setdefault(cell.method.name, {})
            full = knn_top1(train, ytr, test, yte, ds.num_classes)
            row.setdefault("all", []).append(full)
            for n in labels:
                for d in range(draws):
                    idx = stratified_bank(ytr, n, ds.num_classes, seed=1000 * cell.seed + d)
                    acc = knn_top1(train[idx], ytr[idx], test, yte, ds.num_classes)
                    row.setdefault(n, []).append(acc)
            print(f"{cell.method.name} seed {cell.seed}: full bank {full:.2f}", file=sys.stderr)
    return out


def table(out: dict, labels) -> str:
    cols = [*labels, "all"]
    head = "| method | " + " | ".join(
        f"{n} label{'s' if n != 1 else ''} / class" if n != "all" else "all labels (knn@v1)"
        for n in cols
    )
    lines = [head + " |", "|---" * (len(cols) + 1) + "|"]
    for method in sorted(out, key=lambda m: -sum(out[m]["all"]) / len(out[m]["all"])):
        cells = [f"{sum(out[method][n]) / len(out[method][n]):.1f}" for n in cols]
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _in_portable_mode() -> None:
    """Re-start this script in the portable kernel mode the quickstart's cells run in (torch reads
    the kernel settings once, when it starts)."""
    from benchmark.portable import mode as portable

    env = portable.environment("portable")
    if all(os.environ.get(k) == v for k, v in env.items()):
        return
    merged = {k: v for k, v in os.environ.items() if not (k in env and env[k] is None)}
    merged.update({k: v for k, v in env.items() if v is not None})
    os.execve(sys.executable, [sys.executable, *sys.argv], merged)


def main(argv=None) -> int:
    _in_portable_mode()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--methods", default=",".join(DEFAULT_METHODS))
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--labels", default="1,5,10")
    p.add_argument("--draws", type=int, default=5, help="bank draws per seed and n")
    args = p.parse_args(argv)
    labels = [int(x) for x in args.labels.split(",")]
    out = measure(
        set(args.methods.split(",")), {int(s) for s in args.seeds.split(",")}, labels, args.draws
    )
    print(table(out, labels))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
