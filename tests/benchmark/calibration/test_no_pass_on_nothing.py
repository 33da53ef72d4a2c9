"""Issue 56 item 3: no check of ``doctor --calibrate`` passes on what it did not measure. No
configuration measured is never exit 0; a host synchronisation inside a step loop fails the check;
the calibration stops listening to the smoke grid only once every cell it started has finished
(nothing writes into the folder it then removes); each calibration cell runs under its precision's
CUDA flags. (gpu-check.sh's refusal without a GPU: tests/test_tools.py.)"""

from __future__ import annotations

import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from benchmark.api import UnlabeledView, run_local_epochs
from benchmark.calibration import cells as cc
from benchmark.calibration import device_checks as env
from benchmark.calibration import projection as cal
from benchmark.calibration.sync import sync_check, sync_watch
from benchmark.commands.calibrate import EXIT_FAILED, exit_code, measurements_check
from benchmark.core.precision import apply_cuda_precision, cuda_precision, current_cuda_precision
from benchmark.engine.rounds import SimSettings, client_context


def test_no_configuration_measured_fails_the_check_whatever_the_reason() -> None:
    oom = [cal.Measurement(f"k{i}", "resnet18@32 bf16", "out of memory") for i in range(51)]
    check = measurements_check(oom, "cuda:0")
    assert check.status == env.FAILED
    assert check.detail == "0 of 51 configurations measured on cuda:0; 51 out of memory"
    report = {"failed": [check.name], "complete": True, "incomplete": []}
    assert exit_code(report) == EXIT_FAILED
    # one answer among them is enough: out of memory is then what that configuration measured
    some = [cal.Measurement("ok", "resnet18@32 bf16", "ok", images_per_s=5.0), *oom]
    assert measurements_check(some, "cuda:0").status == env.OK
    # none planned at all: incomplete (exit 3), never ok
    assert measurements_check([], "cuda:0").status == env.INCOMPLETE


def _one_update(step_loss) -> None:
    w = torch.nn.Parameter(torch.zeros(()))
    view = UnlabeledView(torch.zeros(8, 1, 2, 2, dtype=torch.uint8), (0.5,), (0.5,))
    ctx = client_context(
        SimSettings(seed=0, num_rounds=1, local_epochs=1, per_round=1, device=torch.device("cpu")),
        1,
        3,
        None,
    )

    def step(batch: torch.Tensor) -> torch.Tensor:
        step_loss()
        return w * 0.0

    run_local_epochs(
        view, step, torch.optim.SGD([w], lr=0.1), ctx, batch_size=4, epochs=1, nan_policy="raise"
    )


def _sync() -> None:
    warnings.warn("called a synchronizing CUDA operation", UserWarning, stacklevel=1)


def test_a_step_that_synchronises_fails_the_check_one_outside_the_steps_does_not() -> None:
    modes: list[str] = []
    inside: dict = {}
    with sync_watch("cuda:0", inside, setter=modes.append, getter=lambda: "default"):
        _sync()  # outside a step loop: data copies, evaluation
        _one_update(_sync)  # two steps, each synchronising
    assert inside["caught"] == 3 and inside["in_steps"] == 2
    check = sync_check(inside)
    assert check.status == env.FAILED and "2 inside a step loop" in check.detail
    assert __file__ in check.detail
    outside: dict = {}
    with sync_watch("cuda:0", outside, setter=modes.append, getter=lambda: "default"):
        _sync()
        _one_update(lambda: None)
    assert outside["caught"] == 1 and outside["in_steps"] == 0
    assert sync_check(outside).status == env.OK
    off: dict = {}
    with sync_watch("cpu", off):
        pass
    assert sync_check(off).status == env.NA


def test_other_warnings_still_reach_the_caller_once_the_watch_ends() -> None:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with sync_watch("cuda:0", {}, setter=lambda m: None, getter=lambda: "default"):
            warnings.warn("something else", DeprecationWarning, stacklevel=1)
            _sync()
    assert [str(w.message) for w in seen] == ["something else"]


class ThreadPool(ThreadPoolExecutor):
    """The worker pool, with threads instead of processes (the test's stand-in cells run here)."""

    def __init__(self, max_workers, mp_context=None, initializer=None, initargs=()) -> None:
        super().__init__(max_workers=max_workers)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        super().shutdown(wait=wait, cancel_futures=cancel_futures)
        if not wait:  # as ProcessPoolExecutor drops its processes: a later shutdown waits for none
            self._threads = set()


def test_a_launch_closed_early_returns_only_once_its_running_cells_finished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What broke ``doctor --calibrate --tiny`` under load: the smoke grid's budget ends, the
    launch is closed and the temporary folder removed while cells still wrote into it."""
    import concurrent.futures

    from benchmark.commands.calibrate import Clock, launch_until
    from benchmark.commands.run import load_cells
    from benchmark.launchers import local
    from benchmark.launchers.execute import CellOutcome
    from benchmark.launchers.options import RunOptions

    running: set[str] = set()
    started: set[str] = set()
    lock = threading.Lock()

    def fake_cell(cell, root, options, grid):
        with lock:
            running.add(cell.cell_id)
            started.add(cell.cell_id)
        time.sleep(0.05 if cell.cell_id == first else 0.6)
        (Path(root) / cell.cell_id).write_text("written")
        with lock:
            running.discard(cell.cell_id)
        return CellOutcome(cell.cell_id, "done")

    _, cells = load_cells("smoke")
    cells = cells[:4]
    first = cells[0].cell_id
    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", ThreadPool)
    monkeypatch.setattr(local, "_run_in_worker", fake_cell)
    launcher = local.LocalLauncher(options=RunOptions(device="cpu", wandb=False), workers=2)
    ran = launch_until(launcher.launch(cells, tmp_path), 0.0, Clock(100.0, lambda s: None))
    assert ran == {first}
    assert running == set()  # nothing still writing under the root when the launch is closed
    written = {p.name for p in tmp_path.iterdir()}
    # every cell started before the close finished writing; the one not started never will
    assert first in written and written == started and len(written) < len(cells)
    time.sleep(0.8)
    assert {p.name for p in tmp_path.iterdir()} == written


@pytest.fixture
def restore_flags():
    before = current_cuda_precision()
    yield
    apply_cuda_precision(before)


@pytest.mark.parametrize("precision", ["fp32", "tf32", "bf16"])
def test_a_calibration_cell_runs_under_its_precisions_cuda_flags(
    precision: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, restore_flags
) -> None:
    """On CUDA the runner sets TF32 and cuDNN for the cell's precision; the calibration measured
    its cells under whatever flags the process held, so its figures were of another precision."""
    from benchmark.building_blocks.device import DeviceConfig
    from benchmark.engine import stages

    seen = []

    def prepare(cell, **kwargs):
        seen.append(current_cuda_precision())
        raise RuntimeError("stop here")

    # a CUDA device as far as the calibration can tell; nothing touches a GPU before prepare
    monkeypatch.setattr(DeviceConfig, "resolve", lambda self: torch.device("cuda", 0))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda dev: None)
    monkeypatch.setattr(stages, "prepare", prepare)
    opposite = cuda_precision("fp32" if precision == "tf32" else "tf32")
    apply_cuda_precision(opposite)
    target = SimpleNamespace(key="k", family="f", cell=SimpleNamespace(precision=precision))
    calcell = SimpleNamespace(precision=precision)
    with pytest.raises(RuntimeError, match="stop here"):
        cc.measure(target, calcell, cc.TINY, tmp_path, "cuda:0")
    assert seen == [cuda_precision(precision)]
    assert current_cuda_precision() == opposite  # restored afterwards
