"""Time the leaderboard build for N synthetic records (target: 1,000 records in under 10 s on 2 CPU
cores).

    python perf/leaderboard_build.py [--records 1000] [--keep DIR]

Records are written to a temporary results folder (methods × α × seeds × several tracks), then
``leaderboard.site.build_site`` is timed end to end: loading and validating every JSON, tables,
plots and pages.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.leaderboard.lb_factory import LINEAR_CARD, make_record, write_records

METHODS = [
    "fedavg_simclr",
    "fedu",
    "fedema",
    "orchestra",
    "flesd",
    "featarc",
    "fedmae",
    "central_ssl",
    "local_ssl",
    "dec_sl",
    "no_pretrain",
]
ALPHAS = [None, 1.0, 0.5, 0.1, 0.05]
DATASETS = ["cifar10", "cifar100"]


def synthetic(n: int) -> list:
    out = []
    i = 0
    while len(out) < n:
        for dataset in DATASETS:
            for method in METHODS:
                for alpha in ALPHAS:
                    if len(out) >= n:
                        return out
                    seed = i // (len(DATASETS) * len(METHODS) * len(ALPHAS))
                    value = 40 + 30 * ((hash((method, alpha)) % 100) / 100) + (seed % 5) * 0.3
                    if i % 2:
                        out.append(
                            make_record(
                                method,
                                alpha=alpha,
                                seed=seed,
                                value=value,
                                dataset=dataset,
                                card=LINEAR_CARD,
                                task="linear_probe",
                            )
                        )
                    else:
                        out.append(
                            make_record(
                                method, alpha=alpha, seed=seed, value=value, dataset=dataset
                            )
                        )
                    i += 1
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--keep", type=Path, default=None, help="keep the built site here")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="lb-bench-"))
    try:
        write_records(tmp / "results", synthetic(args.records))
        from leaderboard.site import build_site

        with open("/proc/loadavg") if Path("/proc/loadavg").exists() else open(__file__) as fh:
            load = fh.read().split()[0] if fh.name == "/proc/loadavg" else "?"
        print(f"load average before the build: {load}")

        t0, c0 = time.perf_counter(), time.process_time()
        index = build_site([tmp / "results"], args.keep or tmp / "site")
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
        pages = sum(1 for _ in index.parent.rglob("*.html"))
        print(
            f"leaderboard build: {args.records} records -> {pages} pages in {elapsed:.2f} s wall, {cpu:.2f} s CPU "
            f"({'OK' if elapsed < 10 else 'SLOW'}: target < 10 s)"
        )
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
