"""The measuring half of ``doctor --calibrate``: one short cell per pre-training configuration of
the GPU grids (``main`` and ``native_*``), on data in the hub dataset's exact format generated here,
with the engine's client loop timed and the same step repeated in a bare loop.

**Targets.** Every distinct pre-training key of the GPU grids (``benchmark.calibration.projection:
train_key``: method and its config, backbone and its config, image size, precision) is a target,
standing for the first grid cell with that key; targets are measured in order of the GPU-hours
``plan`` estimates for their cells, heaviest first, until the time budget ends. ``--tiny`` takes one
target per backbone family (ResNet, ViT) and swaps the backbone for its CPU-sized
sibling (``resnet_micro``, ``vit_micro``) at 16 px where the dataset has a size.

**A calibration cell** is the target's cell with its method, backbone, dataset, public split and
precision, on an IID split of a locally written copy of its hub dataset into ``CLIENTS`` clients of
the target cell's mean client size (capped), one local epoch capped at ``steps`` optimizer steps, no
tasks (:func:`calibration_cell`). It runs through the engine's own stages (``prepare``,
``pretrain``): the first client update warms the device up, the last ``REPEATS`` are measured
(``benchmark.building_blocks.local_train: probe_steps``: steps, images and the step loop's time with the
device synchronised at both ends), and the figures are their median with their spread ((max - min)
/ median); a method whose first round trains nothing (Orchestra's initialisation round) runs a
second round. Then :func:`bare_step_s` repeats the method's own step on one of its batches in a bare
PyTorch loop (autocast in bf16/fp16, a ``GradScaler`` in fp16 only, no engine, no data movement),
``REPEATS`` times — the GPU twin of ``perf/p1_engine_overhead.py``. Peak memory is
``torch.cuda.max_memory_allocated`` over the cell (client steps and the server's step) on a GPU, and
on every device the process's peak resident memory during the cell (sampled, :class:`HostPeak`).
Nothing here writes a record: a capped update is not the cell's training.
"""

from __future__ import annotations

import contextlib
import gc
import math
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmark.calibration.projection import (
    Measurement,
    client_work,
    family_of,
    image_size,
    train_key,
)

if TYPE_CHECKING:
    from benchmark.contracts.cell import Cell

REPEATS = 3  # measured client updates (and bare loops) per configuration: a median and its spread
CLIENTS = 1 + REPEATS  # calibration clients: the first update warms up, the others are measured
TINY_SIZE = 16  # px, the tiny mode's image size where the dataset has a size parameter


@dataclass(frozen=True)
class Settings:
    """How much a calibration cell runs."""

    steps: int  # optimizer steps per client update (the probe's cap)
    client_cap: Mapping[str, int]  # "small" (<= 64 px) / "large": images per calibration client
    tiny: bool = False

    def cap(self, size: int) -> int:
        return int(self.client_cap["small" if size <= 64 else "large"])


# a calibration client holds this many images: about a cross-silo CIFAR client, a twelfth of an
# ImageNet-100 one (a generated 224-px image costs a few ms to write and to decode), and at least
# the largest batch the grids use, so that methods that drop a partial batch still step
FULL = Settings(steps=10, client_cap={"small": 4096, "large": 1024})
TINY = Settings(steps=2, client_cap={"small": 256, "large": 256}, tiny=True)
# images the generated train split of one dataset may hold (a public split that needs more, such as
# FLESD's queue of 2,048 anchors at 224 px, leaves its target unmeasured)
DATA_CAP = {"small": 24576, "large": 4096}
TINY_DATA_CAP = 4096


@dataclass(frozen=True)
class Target:
    key: str
    family: str
    cell: Cell  # the grid cell it stands for
    grid: str
    weight_hours: float  # plan's estimate of every cell with this key


def gpu_grids() -> list[str]:
    from benchmark.grids.expand import grid_names

    return [g for g in grid_names() if g == "main" or g.startswith("native_")]


def targets(grids: Mapping[str, Sequence[Any]]) -> list[Target]:
    """Every pre-training key of ``grids`` with the first cell that has it, heaviest first."""
    from benchmark.grids.grid_plan import estimate_hours

    first: dict[str, tuple[Any, str]] = {}
    weight: dict[str, float] = {}
    for grid, cells in grids.items():
        for cell in cells:
            if client_work(cell)[0] == 0:
                continue  # trains nothing
            key = train_key(cell)
            first.setdefault(key, (cell, grid))
            weight[key] = weight.get(key, 0.0) + estimate_hours(cell)
    out = [Target(k, family_of(c), c, g, weight[k]) for k, (c, g) in first.items()]
    return sorted(out, key=lambda t: (-t.weight_hours, t.key))


def backbone_family(cell: Cell) -> str:
    from benchmark.contracts.registries import BACKBONES

    return str(getattr(BACKBONES.get(cell.backbone.name), "family", "resnet"))


def tiny_targets(all_targets: Sequence[Target]) -> list[Target]:
    """One target per backbone family (ResNet, ViT): the heaviest. --tiny checks the path, every
    step of it, on a CPU within its budget: each planned configuration is measured there (a run
    that cannot is "incomplete")."""
    seen: dict[str, Target] = {}
    for t in all_targets:
        seen.setdefault(backbone_family(t.cell), t)
    return list(seen.values())


def _raw(spec: Any) -> dict[str, Any]:
    return {"name": spec.name, **dict(spec.params)}


def _tiny_backbone(cell: Cell, size: int) -> dict[str, Any]:
    from benchmark.contracts.registries import BACKBONES

    family = getattr(BACKBONES.get(cell.backbone.name), "family", "resnet")
    return {"name": "vit_micro", "img_size": size} if family == "vit" else {"name": "resnet_micro"}


def calibration_cell(target: Target, settings: Settings) -> Any:
    """The target's cell, reduced to a calibration cell (module docstring)."""
    from benchmark.grids.expand import resolve_cell

    cell = target.cell
    dataset = _raw(cell.dataset)
    if settings.tiny and "size" in dataset:
        dataset["size"] = TINY_SIZE
    backbone = _raw(cell.backbone)
    if settings.tiny:
        from benchmark.grids.grid_plan import IMAGE_SIZES

        backbone = _tiny_backbone(
            cell, int(dataset.get("size", IMAGE_SIZES.get(cell.dataset.name)))
        )
    return resolve_cell(
        {
            "dataset": dataset,
            "backbone": backbone,
            "method": _raw(cell.method),
            "partition": "iid",
            "partition_seed": 0,
            "public": None if cell.public is None else _raw(cell.public),
            "fl": {"num_clients": CLIENTS, "participation": 1.0, "rounds": 2, "local_epochs": 1},
            "seed": 0,
            "tasks": [],
            "precision": tiny_precision(cell.precision) if settings.tiny else cell.precision,
        }
    )


def tiny_precision(precision: str) -> str:
    """--tiny runs fp16 configurations in bf16: fp16 autocast is emulated on the CPU and several
    times slower than bf16; the fp16 path with its gradient scaler is the precision check's."""
    return "bf16" if precision == "fp16" else precision


def needs_public(cal: Any) -> bool:
    from benchmark.contracts.registries import METHODS
    from benchmark.contracts.types import Requirement

    return Requirement.PUBLIC_DATA in METHODS.get(cal.method.name).requires


def data_size(cal: Any, n_client: int, limit: int) -> int | None:
    """The smallest train split (rows, growing by 25 %) whose partition gives every calibration
    client ``n_client`` images and that the method's own data check accepts; None above ``limit``.
    A method that needs a public split gets the smallest split its check accepts (FLESD: a public
    split just larger than its anchor queue), which keeps the server's work over it (FLESD's
    distillation) as short as the method allows."""
    from benchmark.data.hub_formats import FORMATS, hub_labels
    from benchmark.engine.stages import build_partition, check_method_data

    classes = len(FORMATS[cal.dataset.name].names())
    want = 1 if needs_public(cal) else n_client
    n = max(CLIENTS * want, classes)  # every class present
    while n <= limit:
        part = build_partition(cal, hub_labels(cal.dataset.name, n))
        if min(int(s) for s in part.sizes()) >= want:
            try:
                check_method_data(cal, part)
                return n
            except ValueError:
                pass
        n = math.ceil(n * 1.25)
    return None


@dataclass(frozen=True)
class DataPlan:
    """Per target: its calibration cell and the rows of its dataset copy; or why it cannot run."""

    cells: dict[str, Any]
    rows: dict[str, int]
    refused: dict[str, str]

    def copies(self) -> list[tuple[str, int]]:
        return sorted({(self.cells[k].dataset.name, self.rows[k]) for k in self.cells})

    def root(self, base: Path, key: str) -> Path:
        """The data root of ``key``'s copy: ``<base>/<dataset>-<rows>/<dataset>``."""
        return Path(base) / f"{self.cells[key].dataset.name}-{self.rows[key]}"


def plan_data(chosen: Sequence[Target], settings: Settings) -> DataPlan:
    plan = DataPlan({}, {}, {})
    for t in chosen:
        cal = calibration_cell(t, settings)
        size = image_size(cal)
        limit = TINY_DATA_CAP if settings.tiny else DATA_CAP["small" if size <= 64 else "large"]
        n = data_size(cal, settings.cap(size), limit)
        if n is None:
            plan.refused[t.key] = f"its data check needs more than {limit} generated images"
            continue
        plan.cells[t.key], plan.rows[t.key] = cal, n
    return plan


def write_data(plan: DataPlan, base: Path, log: Callable[[str], None]) -> None:
    """Each dataset copy the plan needs, in its hub format (what ``prefetch`` would have saved)."""
    from benchmark.data.hub_formats import write_hub_dataset

    for name, n in plan.copies():
        t0 = time.perf_counter()
        write_hub_dataset(name, Path(base) / f"{name}-{n}", train=n, test=64)
        log(f"wrote {name} in its hub format: {n} train images ({time.perf_counter() - t0:.1f} s)")


def bare_step_s(replay: Any, steps: int, warmup: int = 2) -> float:
    """Seconds per step of the method's own step on one batch in a bare loop: autocast to the
    cell's precision, a GradScaler in fp16 only, the device synchronised around the timed steps."""
    import torch

    from benchmark.building_blocks.local_train import synchronize

    device, name = replay.device, replay.precision.name
    scaler = torch.amp.GradScaler(device.type) if name == "fp16" else None
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(name)

    def step() -> None:
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            loss = replay.step_loss(replay.batch)
        replay.optimizer.zero_grad(set_to_none=True)
        if scaler is None:
            loss.backward()
            replay.optimizer.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(replay.optimizer)
            scaler.update()
        if replay.after_step is not None:
            replay.after_step()

    for _ in range(warmup):
        step()
    synchronize(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    synchronize(device)
    return (time.perf_counter() - t0) / steps


def _run_rounds(prep: Any, probe: Any, work: Path) -> list[tuple[dict[str, float], int, int]]:
    """Round 1, and round 2 when round 1 gave fewer than two client updates; per round (its history
    entry, probed updates before it, after it)."""
    from benchmark.engine.stages import pretrain
    from benchmark.runroot.rundir import PretrainDir

    rounds: list[tuple[dict[str, float], int, int]] = []
    before = [0]

    def on_round(r: int, metrics: dict[str, float]) -> None:
        rounds.append((dict(metrics), before[0], len(probe.updates)))
        before[0] = len(probe.updates)

    for stop in (1, 2):
        pre = pretrain(prep, PretrainDir(work), on_round=on_round, stop_after=stop)
        if pre is not None and pre.status != "ok":
            raise RuntimeError(f"the calibration cell's pre-training {pre.status}: {pre.reason}")
        if len(probe.updates) >= CLIENTS:
            break
    return rounds


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def spread(values: Sequence[float]) -> float | None:
    """(max - min) / median of repeated measurements; None for fewer than two."""
    if len(values) < 2:
        return None
    mid = median(values)
    return (max(values) - min(values)) / mid if mid > 0 else None


def _result(
    target: Target, probe: Any, rounds: list, bare: Sequence[float], sizes: Sequence[int]
) -> dict:
    repeats = [u for u in probe.updates[-REPEATS:] if u.steps > 0 and u.loop_s > 0]
    rates = [u.samples / u.loop_s for u in repeats]
    steps = [u.loop_s / u.steps for u in repeats]
    last = repeats[-1]
    metrics, lo, hi = rounds[-1]
    in_round = probe.updates[lo:hi] or [last]
    client_s = float(metrics.get("client_time_s", 0.0))
    update_s = max(client_s - sum(u.loop_s for u in in_round), 0.0) / len(in_round)
    round_s = float(metrics.get("round_time_s", 0.0))
    step_s, bare_s = median(steps), median(bare)
    return {
        "images_per_s": median(rates),
        "images_per_s_spread": spread(rates),
        "step_s": step_s,
        "bare_step_s": bare_s,
        "bare_step_s_spread": spread(bare),
        "repeats": len(repeats),
        "samples_per_step": last.samples / last.steps,
        "update_s": update_s,
        "client_images": int(sum(sizes) / len(sizes)),
        "steps": last.steps,
        "engine_vs_bare": bare_s * last.steps / (step_s * last.steps + update_s),
        "outside_share": (round_s - client_s) / round_s if round_s > 0 else None,
    }


class HostPeak:
    """The process's peak resident memory while the block runs, sampled from /proc/self/statm every
    ``every_s`` by a thread (``ru_maxrss`` is the whole process's lifetime peak); None where there is
    no /proc."""

    STATM = Path("/proc/self/statm")

    def __init__(self, every_s: float = 0.005) -> None:
        import threading

        self.every_s, self.peak = every_s, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _rss(self) -> int:
        import os

        pages = int(self.STATM.read_text().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE")

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._rss())
            self._stop.wait(self.every_s)

    def __enter__(self) -> HostPeak:
        if self.STATM.exists():
            self.peak = self._rss()
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join()
            self.peak = max(self.peak, self._rss())

    @property
    def bytes(self) -> int | None:
        return self.peak or None


@contextlib.contextmanager
def cuda_flags(dev: Any, precision: str) -> Iterator[None]:
    """On CUDA, TF32 and cuDNN set for ``precision`` as the runner sets them for a cell
    (``benchmark.core.precision.cuda_precision``), the process's flags restored afterwards;
    elsewhere nothing is touched. A configuration is then measured in the precision it runs in."""
    from benchmark.core.precision import (
        apply_cuda_precision,
        cuda_precision,
        current_cuda_precision,
    )

    if dev.type != "cuda":
        yield
        return
    before = current_cuda_precision()
    apply_cuda_precision(cuda_precision(precision))
    try:
        yield
    finally:
        apply_cuda_precision(before)


def measure(target: Target, cal: Any, settings: Settings, data_root: Path, device: str) -> dict:
    """One calibration cell on ``device``: the measurement's fields (Measurement) as a dict."""
    import torch

    from benchmark.building_blocks.device import DeviceConfig
    from benchmark.building_blocks.local_train import probe_steps
    from benchmark.engine.stages import prepare

    dev_cfg = DeviceConfig(device=device)
    dev = dev_cfg.resolve()
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    with (
        cuda_flags(dev, cal.precision),
        HostPeak() as host,
        probe_steps(settings.steps) as probe,
        tempfile.TemporaryDirectory(prefix="fssl-cal-") as w,
    ):
        prep = prepare(
            cal, device=dev, channels_last=dev_cfg.use_channels_last(), data_root=data_root
        )
        rounds = _run_rounds(prep, probe, Path(w))
        if not probe.updates or probe.updates[-1].steps == 0:
            last = probe.updates[-1] if probe.updates else None
            raise RuntimeError(
                "the calibration cell took no optimizer step"
                + (
                    f" (batch {last.batch_size}, client of {prep.partition.sizes()[0]} images)"
                    if last
                    else ""
                )
            )
        n = max(probe.updates[-1].steps, 2)
        bare = [bare_step_s(probe.last, steps=n) for _ in range(REPEATS)]
        out = _result(target, probe, rounds, bare, [int(s) for s in prep.partition.sizes()])
    out["peak_mem_bytes"] = (
        int(torch.cuda.max_memory_allocated(dev)) if dev.type == "cuda" else None
    )
    out["peak_host_mem_bytes"] = host.bytes
    return out


def measure_target(
    target: Target, cal: Any, settings: Settings, data_root: Path, device: str
) -> Measurement:
    """``measure`` with its outcome as a status: ok, out of memory (the configuration does not fit
    this device at its batch size), or failed with the reason."""
    import torch

    t0 = time.perf_counter()
    base = {"key": target.key, "family": target.family, "grid_cell": target.cell.cell_id}
    try:
        fields = measure(target, cal, settings, data_root, device)
        status = "ok"
    except torch.cuda.OutOfMemoryError:
        fields, status = {}, "out of memory"
    except Exception as exc:  # noqa: BLE001 - reported as this target's failed check, by name
        fields, status = {}, f"failed: {type(exc).__name__}: {exc}"
    finally:
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    note = ""
    if cal.precision != target.cell.precision:
        note = (
            f"run in {cal.precision}: --tiny, {target.cell.precision} autocast is emulated on CPUs"
        )
    return Measurement(
        **base,
        grid=target.grid,
        status=status,
        seconds=round(time.perf_counter() - t0, 3),
        note=note,
        **fields,
    )


__all__ = [
    "CLIENTS",
    "FULL",
    "REPEATS",
    "TINY",
    "DataPlan",
    "HostPeak",
    "Settings",
    "Target",
    "bare_step_s",
    "calibration_cell",
    "data_size",
    "gpu_grids",
    "measure",
    "measure_target",
    "median",
    "plan_data",
    "spread",
    "targets",
    "tiny_targets",
    "write_data",
]
