"""The GPU run policy, on a machine without a GPU: one cell process per visible GPU by default,
N per GPU only where each GPU's free memory holds them (the probe is handed in), the cores shared
out as threads, each worker pinned to its GPU; a GPU cell's record carries its share of the device,
the concurrency, its peak device memory and the driver/CUDA/cuDNN versions, and a CPU cell's record
neither these fields' values nor a changed digest."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from benchmark.core.errors import UsageError
from benchmark.launchers import gpu_policy as gp
from benchmark.launchers.local import LocalLauncher, default_workers
from benchmark.launchers.options import RunOptions

GIB = gp.GIB


def probe_of(free_gib: dict[int, float], total_gib: float = 80.0):
    return lambda index: (int(free_gib[index] * GIB), int(total_gib * GIB))


def test_one_cell_process_per_visible_gpu_with_the_cores_shared_out() -> None:
    plan = gp.gpu_plan(
        "cuda", count=4, cells_per_gpu=1, need_bytes=None, probe=probe_of({}), cores=16
    )
    assert plan.devices == (0, 1, 2, 3) and plan.workers == 4 and plan.threads == 4
    assert plan.slots() == [0, 1, 2, 3]
    one = gp.gpu_plan("cuda:2", count=4, cells_per_gpu=1, need_bytes=None, probe=None, cores=16)
    assert one.devices == (2,) and one.workers == 1 and one.threads == 16
    assert (
        gp.gpu_plan(
            "cuda", count=2, cells_per_gpu=1, need_bytes=None, probe=None, cores=16, threads=3
        ).threads
        == 3
    )


def test_more_cells_per_gpu_only_where_the_free_memory_holds_them() -> None:
    free = {0: 70.0, 1: 70.0, 2: 25.0}
    plan = gp.gpu_plan(
        "cuda", count=2, cells_per_gpu=3, need_bytes=20 * GIB, probe=probe_of(free), cores=12
    )
    assert plan.workers == 6 and plan.slots() == [0, 1, 0, 1, 0, 1] and plan.threads == 2
    with pytest.raises(UsageError, match=r"GPU 2 has 25\.0 GiB free of 80\.0 GiB.*60\.0 GiB"):
        gp.gpu_plan(
            "cuda", count=3, cells_per_gpu=3, need_bytes=20 * GIB, probe=probe_of(free), cores=12
        )
    with pytest.raises(UsageError, match="--gpu-mem-per-cell"):  # unknown need: one per GPU only
        gp.gpu_plan("cuda", count=1, cells_per_gpu=2, need_bytes=None, probe=None, cores=4)
    with pytest.raises(UsageError, match="only 2 CUDA"):
        gp.gpu_plan("cuda:5", count=2, cells_per_gpu=1, need_bytes=None, probe=None, cores=4)


def test_a_worker_is_pinned_within_the_gpus_this_process_sees() -> None:
    assert gp.visible_index(1, {"CUDA_VISIBLE_DEVICES": "4,6"}) == "6"
    assert gp.visible_index(1, {}) == "1"


@pytest.fixture
def two_gpus(monkeypatch):
    """torch says two CUDA devices are present (nothing runs on them)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(gp, "available_cores", lambda: 16)
    from benchmark.launchers import local

    monkeypatch.setattr(local, "available_cores", lambda: 16)


def test_run_on_cuda_defaults_to_one_process_per_gpu_not_per_core(two_gpus) -> None:
    launcher = LocalLauncher(options=RunOptions(device="auto"))
    plan = launcher.gpu_plan([], probe=probe_of({0: 80, 1: 80}))
    assert plan is not None and plan.workers == 2 and plan.threads == 8
    options, slots = launcher._placed(plan, workers=plan.workers)
    assert slots == ["0", "1"] and options.device == "cuda"
    assert (options.concurrency, options.threads, options.cell_threads()) == (1, 8, 8)
    # two cells per GPU, told what one takes
    four = LocalLauncher(options=RunOptions(device="cuda"), cells_per_gpu=2, gpu_mem_per_cell=30)
    plan = four.gpu_plan([], probe=probe_of({0: 79, 1: 61}))
    options, slots = four._placed(plan, workers=plan.workers)
    assert slots == ["0", "1", "0", "1"] and (options.concurrency, options.threads) == (2, 4)
    with pytest.raises(UsageError, match="GPU 1 has 59.0 GiB free"):
        four.gpu_plan([], probe=probe_of({0: 79, 1: 59}))
    # fewer cells than GPUs: one in this process, alone on its GPU
    options, slots = four._placed(plan, workers=1)
    assert slots is None and options.concurrency == 1 and options.device == "cuda"


def test_the_cpu_policy_is_unchanged() -> None:
    launcher = LocalLauncher(options=RunOptions(device="cpu"))
    assert launcher.gpu_plan([]) is None
    options, slots = launcher._placed(None, workers=default_workers())
    assert options is launcher.options and slots is None
    assert options.cell_threads() == 1 and options.concurrency == 1


# ------------------------------------------------------------------------------------------------
# the record


def test_a_gpu_cell_records_its_share_of_the_device_not_its_wall_time(monkeypatch) -> None:
    from benchmark.engine.stages import Timings, gpu_compute

    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: 5 * GIB)
    t = Timings(wall_s=7300.0, pretrain_s=5400.0, eval_s=1800.0)
    assert gpu_compute(torch.device("cuda", 0), t, 4) == {
        "gpu_hours": pytest.approx(0.5),
        "concurrency": 4,
        "peak_gpu_mem_bytes": 5 * GIB,
    }
    assert gpu_compute(torch.device("cpu"), t, 4) == {"gpu_hours": 0.0}


def test_the_gpu_entry_names_driver_cuda_and_cudnn() -> None:
    from benchmark.records.env_info import gpu_info

    props = SimpleNamespace(name="NVIDIA H200", major=9, minor=0, total_memory=141 * GIB)
    fake = SimpleNamespace(
        cuda=SimpleNamespace(
            is_available=lambda: True,
            get_device_properties=lambda d: props,
            device_count=lambda: 8,
        ),
        version=SimpleNamespace(cuda="12.4"),
        backends=SimpleNamespace(cudnn=SimpleNamespace(version=lambda: 90100)),
    )
    assert gpu_info("cuda:0", fake, driver=lambda: "550.54.15") == {
        "name": "NVIDIA H200",
        "capability": "9.0",
        "memory_bytes": 141 * GIB,
        "driver": "550.54.15",
        "cuda": "12.4",
        "cudnn": "90100",
        "visible": 8,
    }
    assert gpu_info("cpu", fake) == {} and gpu_info("cuda", None) == {}


REPO = Path(__file__).resolve().parents[3]


def test_the_shipped_records_still_validate_and_keep_their_digests() -> None:
    from benchmark.records.integrity import integrity_problems
    from benchmark.records.schema import from_json

    paths = sorted((REPO / "results" / "records" / "v1").rglob("*.json"))
    records = [from_json(p.read_text(encoding="utf-8")) for p in paths]
    from benchmark.commands.run import load_cells

    _, cells = load_cells("quickstart", seeds=[0, 1, 2])
    assert len(records) == len(cells)  # one record per cell of the quickstart grid
    assert all(integrity_problems(r) == [] for r in records)
    assert all(r.compute.concurrency == 0 and r.env.gpu == {} for r in records)


def test_empty_gpu_fields_leave_a_digest_unchanged_and_filled_ones_seal() -> None:
    from benchmark.records.integrity import record_digest
    from benchmark.records.schema import from_json

    path = next((REPO / "results" / "records" / "v1").rglob("*.json"))
    rec = from_json(path.read_text(encoding="utf-8"))
    assert record_digest(rec) == rec.digest
    gpu = dataclasses.replace(
        rec,
        compute=dataclasses.replace(rec.compute, concurrency=2, peak_gpu_mem_bytes=GIB),
        env=dataclasses.replace(rec.env, gpu={"name": "x", "driver": "1"}),
    )
    assert record_digest(gpu) != rec.digest  # a GPU record's fields are sealed


def test_launch_on_cuda_starts_one_pinned_worker_per_gpu(two_gpus, monkeypatch, tmp_path) -> None:
    from benchmark.commands.run import load_cells

    cells = [c for c in load_cells("smoke")[1]][:3]
    seen = []

    def fake_pool(self, group, root, grid, workers, kernels, options=None, slots=None):
        seen.append((len(group), workers, options, slots))
        return iter(())

    monkeypatch.setattr(LocalLauncher, "_in_pool", fake_pool)
    assert list(LocalLauncher(options=RunOptions(device="cuda")).launch(cells, tmp_path)) == []
    assert sum(n for n, *_ in seen) == len(cells)
    assert all(w == 2 and s == ["0", "1"] and o.threads == 8 for _, w, o, s in seen)


def test_cluster_launchers_give_a_cuda_cell_a_gpu_and_its_cores(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Ray and SLURM: on CUDA a cell asking for 0 GPUs gets one (a scheduler told 0 packs every cell
    onto one GPU, or hides the GPUs); its threads are the cores it reserves; a fractional request
    records how many cells share a GPU. On the CPU nothing changes (threads are part of its
    numbers)."""
    assert gp.cluster_gpus(True, 0.0, 4.0) == gp.ClusterGpus(1.0, 4, 1)
    assert gp.cluster_gpus(True, 0.5, 2.0) == gp.ClusterGpus(0.5, 2, 2)
    assert gp.cluster_gpus(True, 0.25, 0.5) == gp.ClusterGpus(0.25, 1, 4)
    # 1.0 // 0.1 == 9.0 in floating point: the count must be Ray's 10
    assert [gp.cluster_gpus(True, g, 1.0).concurrency for g in (0.1, 0.2, 0.05, 0.3)] == [
        10,
        5,
        20,
        3,
    ]
    assert gp.cluster_gpus(True, 2.0, 8.0) == gp.ClusterGpus(2.0, 8, 1)
    assert gp.cluster_gpus(False, 0.0, 4.0) == gp.ClusterGpus(0.0, None, 1)
    with pytest.raises(UsageError):
        gp.cluster_gpus(True, -1.0, 1.0)

    from benchmark.launchers.submitit import SubmititLauncher

    monkeypatch.setattr(RunOptions, "on_cuda", lambda self: self.device != "cpu")
    slurm = SubmititLauncher(cluster="local", cpus_per_task=6, options=RunOptions(device="cuda:1"))
    opts = slurm.job_options()
    assert opts.device == "cuda" and opts.threads == 6
    cpu = SubmititLauncher(cluster="local", cpus_per_task=6, options=RunOptions(device="cpu"))
    assert cpu.job_options() == cpu.options
    # submitit's local executor would show every job GPU 0: refused on CUDA, before any job starts
    with pytest.raises(UsageError, match="does not place cells on GPUs"):
        next(iter(slurm.launch([], tmp_path)))
