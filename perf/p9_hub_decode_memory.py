"""P9 hub decode memory: peak RAM of decoding a hub image split, whole column against slices (issue
32 item 11).

python perf/p9_hub_decode_memory.py [--images 1500] [--width 500] [--height 375] [--size 64]

Builds, offline, an ImageNet-100-format fixture (``datasets`` Image + ClassLabel, JPEG bytes of
``--width`` x ``--height``, ImageNet's typical size) and decodes its train split to ``--size`` px in
three fresh subprocesses:

- ``column``: ``split[:][image]``, the whole column decoded into a list of PIL images first: what
the loaders' old ``split[column]`` did under ``datasets`` < 4.0 (which pyproject allows); -
``column_lazy``: the old loop ``for img in split[column]`` under the installed ``datasets`` (>= 4.0
returns a lazy Column); - ``slices``: the loader's own ``_decode`` (``DECODE_SLICE`` rows at a time,
each image closed once stored into preallocated arrays).

Prints each mode's peak anonymous RSS (``RssAnon``, sampled every 2 ms from /proc; Linux) above its
value before decoding: the pages of the memory-mapped Arrow file are file-backed and not counted.
Nothing here is asserted in tests."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

CHILD = r"""
import json, sys, threading, time
import numpy as np, datasets
from benchmark.data.hub_datasets import ImageNet100, resize_center_crop

def rss_kb():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssAnon:"))

mode, folder, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
split = datasets.load_from_disk(folder)["train"]
cfg = ImageNet100(size=size)
before = rss_kb()
peak, done = [before], []

# the import-time peak (ru_maxrss) hides the decode's, so the RSS is sampled while it runs
def sample():
    while not done:
        peak[0] = max(peak[0], rss_kb())
        time.sleep(0.002)

threading.Thread(target=sample, daemon=True).start()
if mode == "column":
    imgs = split[:]["image"]
    x = np.stack([resize_center_crop(im, size) for im in imgs])
elif mode == "column_lazy":
    x = np.stack([resize_center_crop(im, size) for im in split["image"]])
else:
    x, _ = cfg._decode(split)
peak[0] = max(peak[0], rss_kb())
done.append(True)
print(json.dumps({"mode": mode, "images": len(split),
                  "peak_above_start_mb": (peak[0] - before) / 1024,
                  "datasets": datasets.__version__}))
"""


def build(folder: Path, n: int, width: int, height: int) -> Path:
    import datasets

    from benchmark.data.hub_datasets import imagenet100_names
    from tests.benchmark.data import hub_fixtures as fx

    feats = datasets.Features(
        {"image": datasets.Image(), "label": datasets.ClassLabel(names=imagenet100_names())}
    )
    rows = {"image": [], "label": []}
    for i in range(0, n, 100):  # 100 at a time: the builder itself stays small
        k = min(100, n - i)
        rows["image"] += fx.jpeg_cells(fx.pil_images(k, width, height, seed=i))
        rows["label"] += [j % 100 for j in range(i, i + k)]
    dd = datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows, features=feats)})
    dd.save_to_disk(str(folder))
    return folder


def measure(mode: str, folder: Path, size: int) -> dict:
    env = {
        "PYTHONPATH": str(REPO),
        "PATH": "/usr/bin:/bin",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
    }
    out = subprocess.run(
        [sys.executable, "-c", CHILD, mode, str(folder), str(size)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=1500)
    ap.add_argument("--width", type=int, default=500)
    ap.add_argument("--height", type=int, default=375)
    ap.add_argument(
        "--size", type=int, default=64, help="stored resolution (small: the decode is measured)"
    )
    args = ap.parse_args()
    decoded_mb = args.images * args.width * args.height * 3 / 2**20
    size = f"{args.width}x{args.height}"
    print(f"{args.images} JPEGs of {size}: {decoded_mb:.0f} MB decoded at full size")
    with tempfile.TemporaryDirectory() as tmp:
        folder = build(Path(tmp) / "imagenet100", args.images, args.width, args.height)
        for mode in ("column", "column_lazy", "slices"):
            r = measure(mode, folder, args.size)
            peak, version = r["peak_above_start_mb"], r["datasets"]
            print(f"{mode:12s} peak anonymous RSS +{peak:.0f} MB (datasets {version})")


if __name__ == "__main__":
    main()
