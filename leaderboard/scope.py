"""What the shipped numbers are, said where a reader starts (issue 54): the scale of the records the
ranked tracks show (datasets and image size, backbones, rounds × local epochs, clients, seeds, the
devices they ran on) and the result tracks that have no record yet, all read from the records and
tracks.yaml, never written by hand; the glossary text of the partition labels; and the one download
of every record. Pure functions over the :class:`leaderboard.build.SiteModel`; no HTML.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmark.records.schema import record_plain
from leaderboard.build import SiteModel
from leaderboard.exports import clean
from leaderboard.formatting import display_path, partition_words

RECORDS_FILE = "records.json"
__all__ = ["RECORDS_FILE", "partition_words", "records_scope", "write_records"]


def _ranges(seeds: Sequence[int]) -> str:
    """``0-2``, ``0-2, 5``: the seeds as runs."""
    out: list[str] = []
    xs = sorted(set(seeds))
    i = 0
    while i < len(xs):
        j = i
        while j + 1 < len(xs) and xs[j + 1] == xs[j] + 1:
            j += 1
        out.append(str(xs[i]) if i == j else f"{xs[i]}-{xs[j]}")
        i = j + 1
    return ", ".join(out)


def records_scope(model: SiteModel) -> dict[str, Any] | None:
    """The scale of the records on the tracks that are results (``result: true``), and those result
    tracks with no record yet; None when no result track shows a record."""
    shown: set[str] = set()
    for tt in model.tracks:
        if tt.track.result and not tt.table.empty:
            shown |= tt.cell_ids
    recs = [r for _, r in model.records if r.cell_id in shown]
    if not recs:
        return None
    datasets: dict[str, set[str]] = {}
    backbones, budgets, clients, devices, seeds = set(), set(), set(), set(), []
    for r in recs:
        cell = r.cell
        size = ((cell.get("dataset") or {}).get("params") or {}).get("size")
        datasets.setdefault(r.dataset, set())
        if isinstance(size, int) and not isinstance(size, bool):
            datasets[r.dataset].add(f"{size}×{size} px")
        backbone = (cell.get("backbone") or {}).get("name")
        if backbone and r.method not in model.config.reference_points:
            backbones.add(str(backbone))
        fl = cell.get("fl") or {}
        if fl.get("rounds") is not None and fl.get("local_epochs") is not None:
            budgets.add(f"{fl['rounds']} rounds × {fl['local_epochs']} local epochs")
        if fl.get("num_clients") is not None:
            clients.add(str(fl["num_clients"]))
        devices.add(str(r.env.device or "not recorded"))
        seeds.append(int(r.seed))
    empty = [tt.track for tt in model.tracks if tt.track.result and tt.table.empty]
    planned = [t.title for t in empty]
    gpu_hours = sum(float(r.compute.gpu_hours or 0.0) for r in recs)
    return {
        "n": len(recs),
        "datasets": [
            f"{name} ({', '.join(sorted(sizes))})" if sizes else name
            for name, sizes in sorted(datasets.items())
        ],
        "backbones": sorted(backbones),
        "budgets": sorted(budgets),
        "clients": sorted(clients, key=lambda c: (len(c), c)),
        "seeds": _ranges(seeds),
        "devices": sorted(devices),
        "cpu_only": devices == {"cpu"},
        "gpu_hours": gpu_hours,
        "planned": planned,
        "planned_datasets": sorted({t.dataset for t in empty}),
    }


def write_records(model: SiteModel, out: Path) -> int:
    """``records.json``: every record the site was built from, as the records' own JSON (their
    digests check), each with the file it was read from (relative to its results folder). Returns
    the number written."""
    sources = [str(s) for s in model.sources]
    rows = [
        {"path": display_path(p, sources), "record": record_plain(r)}
        for p, r in sorted(model.records, key=lambda pr: str(pr[1].cell_id))
    ]
    body: Mapping[str, Any] = {
        "about": "every result record the leaderboard was built from; schema: benchmark/records/schema.py",
        "build": {k: model.build.get(k, "") for k in ("commit", "date")},
        "n_records": len(rows),
        "records": rows,
    }
    (out / RECORDS_FILE).write_text(
        json.dumps(clean(body), indent=1, sort_keys=True, ensure_ascii=False, allow_nan=False)
        + "\n",
        encoding="utf-8",
    )
    return len(rows)
