"""A device's calibration (the report of ``python -m benchmark doctor --calibrate``) and what a
grid's cells cost on that device.

**What a cell costs.** A cell's pre-training is keyed by what decides its speed (:func:`train_key`):
the method with its resolved config, the backbone with its config, the image size and the
precision. Its device-hours are

    client images / (images per second in the step loop)
    + client updates × (seconds per update outside the step loop)

where client images = rounds × clients trained per round × local epochs × images per client (the
cell's partition carved from the train split's size, :func:`client_work`) and both rates come from
the calibration's measurement of the same key on the device. A key the calibration did not measure
takes the measurement of the same method, backbone, image size and precision under other settings
(basis ``as <key>``), else ``plan``'s fixed FLOP estimate (basis ``estimate``). The rest of a cell (the
server's steps, every downstream task, COCO detection) is the per-method FLOP model's
(``benchmark.grids.cost``) at the FLOP rate the calibration measured for pre-training
(:func:`achieved_flops`, :func:`rest_hours`; :data:`ASSUMPTIONS`, printed with every projection).

**Where a calibration is looked up** (:func:`locate_calibration`): the path given
(``--calibration``); else ``$FSSL_CALIBRATION``; else ``<dir>/<device>.json`` for the device the
run would use, where ``<dir>`` is ``$FSSL_CALIBRATION_DIR`` or ``~/.cache/fssl-bench/calibration``
and ``<device>`` the slug of its name (``nvidia-h100-80gb-hbm3``): the file ``doctor --calibrate``
writes by default. One file per device model; a new calibration replaces it; nothing is chosen by
date. A ``--tiny`` report (micro backbones, a plumbing check) is never used for a projection.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmark.core.canonical import digest
from benchmark.core.errors import UsageError
from benchmark.grids.work import client_sizes, client_work, image_size, train_images

if TYPE_CHECKING:
    from benchmark.contracts.cell import Cell

REPORT_KIND = "fssl-bench calibration"
REPORT_VERSION = 1
CALIBRATION_ENV = "FSSL_CALIBRATION"
CALIBRATION_DIR_ENV = "FSSL_CALIBRATION_DIR"
ASSUMPTIONS = (
    "pre-training (the clients' local updates) from the calibration's measurements; the rest of a "
    "cell (the server's steps, every downstream task, COCO detection) from the per-method FLOP model "
    "(benchmark.grids.cost) at the median FLOP rate the calibration measured for pre-training on this "
    "device (detection at that rate x its lower share of the peak); aggregation, Orchestra's "
    "clustering and checkpoints are not counted",
    "a measured key runs at its calibration cell's rates: images per second inside the step loop "
    "(augmentation, forward, backward, optimizer; device synchronised) and seconds per client update "
    "outside it (data to the device, weights in and out), measured at the calibration's client size",
    "client images = rounds x clients trained per round x local epochs x mean client size, the cell's "
    "partition carved from the train split's size with balanced labels (every round trains, Orchestra's "
    "initialisation round included)",
    "an unmeasured key takes the measurement of the same method, backbone, image size and precision "
    "(basis 'as ...'), else plan's fixed estimate (40% of an A100's dense peak; basis 'estimate')",
    "one cell at a time on one device; a per-track figure counts every cell that track's table needs "
    "(cells feed several tracks, so the tracks' figures do not add up to the grids')",
)


def train_spec(cell: Cell) -> dict[str, Any]:
    """What decides the speed of a cell's pre-training (not its data's content, not the seed)."""
    return {
        "method": {"name": cell.method.name, "params": dict(cell.method.params)},
        "backbone": {"name": cell.backbone.name, "params": dict(cell.backbone.params)},
        "image_size": image_size(cell),
        "precision": cell.precision,
    }


def train_key(cell: Cell) -> str:
    return digest(train_spec(cell))[:16]


def family_of(cell: Cell) -> str:
    """The fallback key: same method, backbone, image size and precision, any settings."""
    return f"{cell.method.name} {cell.backbone.name}@{image_size(cell)} {cell.precision}"


@dataclass(frozen=True)
class Measurement:
    """One key measured on the device (``doctor --calibrate``)."""

    key: str
    family: str  # family_of(cell): "fedema resnet18_cifar@32 bf16"
    status: str  # "ok", "out of memory", "failed: <reason>"
    grid_cell: str = ""  # the grid cell it stands for (id), and its grid
    grid: str = ""
    images_per_s: float | None = None  # training images per second inside the step loop
    step_s: float | None = None  # seconds per optimizer step inside the engine's loop
    bare_step_s: float | None = None  # the same step in a bare loop on the same batch
    samples_per_step: float | None = None
    update_s: float | None = None  # seconds per client update outside its step loop
    client_images: int = 0  # the calibration client's size
    steps: int = 0  # measured steps
    engine_vs_bare: float | None = None  # bare time / engine client-update time for the same steps
    outside_share: float | None = None  # the round's time outside the client updates
    peak_mem_bytes: int | None = None  # torch.cuda.max_memory_allocated (None on the CPU)
    # the process's peak resident memory during the measurement (sampled; every device)
    peak_host_mem_bytes: int | None = None
    repeats: int = 0  # measured client updates (and bare loops) the figures are the median of
    images_per_s_spread: float | None = None  # (max - min) / median over the repeats
    bare_step_s_spread: float | None = None
    seconds: float = 0.0  # wall time of the measurement
    note: str = ""  # how the calibration cell departs from the key, when it does (--tiny)

    @property
    def ok(self) -> bool:
        return self.status == "ok" and bool(self.images_per_s)


@dataclass(frozen=True)
class Calibration:
    device: str
    tiny: bool
    created_at: str
    measurements: Mapping[str, Measurement] = field(default_factory=dict)
    path: str | None = None

    def lookup(self, cell: Cell) -> tuple[Measurement | None, str]:
        """(measurement, basis) for ``cell``'s pre-training: its own key, else its family's."""
        own = self.measurements.get(train_key(cell))
        if own is not None and own.ok:
            return own, "measured"
        family = family_of(cell)
        same = sorted(
            (m for m in self.measurements.values() if m.ok and m.family == family),
            key=lambda m: m.key,
        )
        if same:
            return same[0], f"as {same[0].key[:8]}"
        return None, "estimate"


def measurement_from(raw: Mapping[str, Any]) -> Measurement:
    known = set(Measurement.__dataclass_fields__)
    return Measurement(**{k: v for k, v in raw.items() if k in known})


def load_calibration(path: str | Path) -> Calibration:
    """The calibration in a report file; UsageError naming the problem when it is not one."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"calibration {path}: cannot read it ({exc})") from None
    if not isinstance(raw, dict) or raw.get("kind") != REPORT_KIND:
        raise UsageError(f"calibration {path}: not a `doctor --calibrate` report")
    if raw.get("version") != REPORT_VERSION:
        raise UsageError(
            f"calibration {path}: report version {raw.get('version')!r}, this fssl-bench reads "
            f"{REPORT_VERSION}; run `python -m benchmark doctor --calibrate` again"
        )
    rows = [measurement_from(m) for m in raw.get("measurements", [])]
    return Calibration(
        device=str(raw.get("device", {}).get("name", "?")),
        tiny=bool(raw.get("tiny")),
        created_at=str(raw.get("created_at", "")),
        measurements={m.key: m for m in rows},
        path=str(path),
    )


def calibration_dir() -> Path:
    default = Path.home() / ".cache" / "fssl-bench" / "calibration"
    return Path(os.environ.get(CALIBRATION_DIR_ENV) or default)


def device_slug(name: str) -> str:
    """``NVIDIA H100 80GB HBM3`` → ``nvidia-h100-80gb-hbm3``."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "unknown-device"


def default_calibration_path(device_name: str) -> Path:
    return calibration_dir() / f"{device_slug(device_name)}.json"


def locate_calibration(device_name: str, explicit: str | None = None) -> tuple[Path | None, str]:
    """(the calibration file to use or None, how it was chosen): the path given, else
    ``$FSSL_CALIBRATION``, else the device's file in the calibration folder when it exists."""
    if explicit:
        return Path(explicit), "--calibration"
    if os.environ.get(CALIBRATION_ENV):
        return Path(os.environ[CALIBRATION_ENV]), f"${CALIBRATION_ENV}"
    path = default_calibration_path(device_name)
    if path.is_file():
        return path, f"the calibration of {device_name!r} in {calibration_dir()}"
    return None, f"no calibration of {device_name!r} at {path}"


# ------------------------------------------------------------------------------------------------
# the projection


@dataclass(frozen=True)
class CellCost:
    cell_id: str
    family: str
    hours: float
    basis: str  # "measured", "as <key>", "estimate", "no pre-training"
    estimate_hours: float  # plan's fixed estimate, for comparison


def cell_cost(cell: Cell, calibration: Calibration | None) -> CellCost:
    from benchmark.grids.grid_plan import estimate_hours

    images, updates, _ = client_work(cell)
    estimate = estimate_hours(cell)
    if images == 0:
        return CellCost(cell.cell_id, family_of(cell), 0.0, "no pre-training", estimate)
    m, basis = calibration.lookup(cell) if calibration is not None else (None, "estimate")
    if m is None:
        return CellCost(cell.cell_id, family_of(cell), estimate, "estimate", estimate)
    seconds = images / float(m.images_per_s) + updates * float(m.update_s or 0.0)
    return CellCost(cell.cell_id, family_of(cell), seconds / 3600, basis, estimate)


@dataclass(frozen=True)
class Summary:
    cells: int
    hours: float  # pre-training
    measured_hours: float  # measured or "as" a measured key
    estimate_hours: float  # plan's fixed estimate of the same cells
    other_hours: float = 0.0  # server steps, downstream tasks, detection (rest_hours)

    @property
    def measured_share(self) -> float:
        return self.measured_hours / self.hours if self.hours > 0 else math.nan


def summarise(costs: Sequence[CellCost], other_hours: float = 0.0) -> Summary:
    return Summary(
        cells=len(costs),
        hours=sum(c.hours for c in costs),
        measured_hours=sum(c.hours for c in costs if c.basis.startswith(("measured", "as "))),
        estimate_hours=sum(c.estimate_hours for c in costs),
        other_hours=other_hours,
    )


def achieved_flops(calibration: Calibration | None, cells: Iterable[Cell]) -> float:
    """The median training FLOP rate the calibration measured (images per second × the method's
    FLOPs per image, over the cells' measured keys); without one, plan's fixed rate (40 % of an
    A100's bf16 peak)."""
    from benchmark.grids.cost import train_flops_per_image
    from benchmark.grids.grid_plan import PEAK_FLOPS, UTILISATION

    rates: dict[str, float] = {}
    if calibration is not None:
        for cell in cells:
            m = calibration.measurements.get(train_key(cell))
            if m is not None and m.ok and m.key not in rates:
                rates[m.key] = float(m.images_per_s) * train_flops_per_image(cell)
    if not rates:
        return UTILISATION * PEAK_FLOPS["bf16"]
    ordered = sorted(rates.values())
    return ordered[len(ordered) // 2]


def rest_hours(cells: Sequence[Cell], rate: float) -> float:
    """Device-hours of everything but the clients' pre-training (server steps, tasks, detection)
    at ``rate`` FLOP/s; detection at that rate scaled by its lower share of the peak."""
    from benchmark.grids.cost import DETECTION_UTILISATION, UTILISATION, cell_work

    scale = sum(DETECTION_UTILISATION) / sum(UTILISATION)
    total = 0.0
    for cell in cells:
        w = cell_work(cell, pretrain=False)
        total += (w.server + sum(w.tasks.values())) / rate
        total += sum(w.detection) / 2 / (rate * scale)
    return total / 3600


def track_cells(track: Any, cells: Iterable[Cell]) -> list[Any]:
    """The cells whose records ``track`` would admit: its dataset, backbone and federation, scored
    on the test split, with the track's task."""
    from benchmark.records.tracks import eval_split_of

    return [
        c
        for c in cells
        if track.matches_cell(c.dataset.name, asdict(c.fl), c.backbone.name)
        and eval_split_of(c.to_dict()) == "test"
        and any(t.name == track.task for t in c.tasks)
    ]


def projection(
    grids: Mapping[str, Sequence[Any]], calibration: Calibration | None, tracks: Sequence[Any] = ()
) -> dict[str, Any]:
    """Per grid and per track: cells, device-hours, the share resting on measurements, and plan's
    fixed estimate of the same cells; with the assumptions."""
    costs: dict[str, CellCost] = {}
    out: dict[str, Any] = {"assumptions": list(ASSUMPTIONS), "grids": {}, "tracks": {}}
    unique = {c.cell_id: c for cells in grids.values() for c in cells}
    rate = achieved_flops(calibration, unique.values())
    rest = {cid: rest_hours([c], rate) for cid, c in unique.items()}
    for name, cells in grids.items():
        for cell in cells:
            if cell.cell_id not in costs:
                costs[cell.cell_id] = cell_cost(cell, calibration)
        mine = [costs[c.cell_id] for c in cells]
        out["grids"][name] = _summary_dict(summarise(mine, sum(rest[c.cell_id] for c in cells)))
    for track in tracks:
        mine = track_cells(track, unique.values())
        other = sum(rest[c.cell_id] for c in mine)
        out["tracks"][track.id] = _summary_dict(summarise([costs[c.cell_id] for c in mine], other))
    out["flop_rate"] = rate
    return out


def _summary_dict(s: Summary) -> dict[str, Any]:
    share = s.measured_share
    return {
        "cells": s.cells,
        "device_hours": round(s.hours, 3),
        "other_hours": round(s.other_hours, 3),
        "total_hours": round(s.hours + s.other_hours, 3),
        "measured_share": None if math.isnan(share) else round(share, 4),
        "plan_estimate_hours": round(s.estimate_hours, 3),
    }


def usable_calibration(
    device_name: str, explicit: str | None = None
) -> tuple[Calibration | None, str]:
    """(the calibration a projection for ``device_name`` uses, or None; one line saying which file
    and how it was chosen, or why there is none)."""
    path, how = locate_calibration(device_name, explicit)
    if path is None:
        return None, f"{how}: run `python -m benchmark doctor --calibrate` on that device"
    cal = load_calibration(path)
    if cal.tiny:
        return None, (
            f"{path} ({how}) is a --tiny report (micro backbones): never used for a projection"
        )
    return cal, f"calibration {path} ({how}; {cal.device}, {cal.created_at})"


def cost_line(cells: Sequence[Cell], calibration: Calibration | None, why: str) -> str:
    """The one line ``run --dry-run`` and ``plan`` print about what ``cells`` cost: without a
    calibration, plan's FLOP model on one H200 (``benchmark.grids.cost``, the figure ``plan``'s
    table breaks down); with one, its measured pre-training and the FLOP model's rest at the
    measured FLOP rate. One figure either way."""
    if calibration is None:
        from benchmark.grids.cost import fmt_range, grid_hours

        h = grid_hours(cells)
        parts = ", ".join(
            f"{label} {fmt_range(*h[key])}"
            for key, label in (
                ("pretrain", "pre-training"),
                ("server", "server steps"),
                ("tasks", "tasks"),
                ("detection", "detection"),
            )
        )
        return (
            f"cost: {fmt_range(*h['total'])} H200-hours by plan's FLOP model ({parts}; `plan` "
            f"gives the assumptions); {why}"
        )
    s = summarise([cell_cost(c, calibration) for c in cells])
    rest = rest_hours(cells, achieved_flops(calibration, cells))
    share = s.measured_share
    measured = "no pre-training" if math.isnan(share) else f"{share:.0%} of it measured"
    return (
        f"cost: about {s.hours:.2f} device-hours of pre-training on {calibration.device} "
        f"({measured}; {why}) and {rest:.2f} for server steps, tasks and detection (its measured "
        "FLOP rate); what is and is not counted: docs/performance.md, 'Reading the projection'"
    )


__all__ = [
    "ASSUMPTIONS",
    "CALIBRATION_DIR_ENV",
    "CALIBRATION_ENV",
    "REPORT_KIND",
    "REPORT_VERSION",
    "Calibration",
    "CellCost",
    "Measurement",
    "Summary",
    "achieved_flops",
    "calibration_dir",
    "cell_cost",
    "client_sizes",
    "client_work",
    "cost_line",
    "default_calibration_path",
    "device_slug",
    "family_of",
    "image_size",
    "load_calibration",
    "locate_calibration",
    "measurement_from",
    "projection",
    "rest_hours",
    "summarise",
    "track_cells",
    "train_images",
    "train_key",
    "train_spec",
    "usable_calibration",
]
