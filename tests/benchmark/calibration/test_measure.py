"""``python -m benchmark doctor --calibrate`` (benchmark/calibration/measure*.py): the environment checks
fail when what they check is broken, a calibration cell is its target reduced and measured through
the engine, a record that is not valid and sealed is named, a failed measurement fails the command
and an out-of-memory one does not; usage errors exit 2; ``run --dry-run`` and ``plan`` cost a grid
from the device's calibration. The whole ``--tiny`` command on the CPU is the slow test at the end
(CI runs it); the full command on a GPU is the ``gpu`` one."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from benchmark.calibration import cells as cc
from benchmark.calibration import device_checks as env
from benchmark.calibration import projection as cal
from benchmark.cli import main
from benchmark.commands.run import load_cells

REPO = Path(__file__).resolve().parents[3]

# ------------------------------------------------------------------------------------------------
# environment checks


def test_every_environment_check_passes_or_says_why_on_this_cpu() -> None:
    lines: list[str] = []
    checks = {c.name: c for c in env.environment_checks("cpu", lines.append)}
    assert [checks[n].status for n in ("device", "fp32", "bf16", "fp16 + scaler")] == ["ok"] * 4
    assert checks["tf32"].status == env.NA and checks["portable kernels"].status == env.OK
    for module, _, how in env.OPTIONAL:
        c = checks[module]
        assert c.status in (env.OK, env.MISSING)
        assert c.status == env.OK or c.detail == f"not installed: {how}"
    assert len(lines) == len(checks) and all(" s) " in line for line in lines)  # progress + time


def test_the_fp16_check_fails_when_the_scaler_does_not_skip_an_overflow(monkeypatch) -> None:
    from benchmark.core.precision import LossScaler

    def never_skips(self, optimizer):
        optimizer.step()
        return True

    monkeypatch.setattr(LossScaler, "step", never_skips)
    c = env.timed_check("fp16 + scaler", lambda: env.check_fp16_scaler("cpu"))
    assert c.failed and "step 3" in c.detail


def test_the_bf16_check_fails_when_autocast_does_not_cast(monkeypatch) -> None:
    import contextlib

    monkeypatch.setattr(torch, "autocast", lambda *a, **k: contextlib.nullcontext())
    status, detail = env.check_bf16("cpu")
    assert status == env.FAILED and "torch.float32" in detail


def test_the_portable_mode_must_say_it_does_not_apply_on_a_gpu(monkeypatch) -> None:
    from benchmark.portable import mode as portable

    status, detail = env.check_portable("cuda:0")
    assert status == env.OK and "does not apply" in detail and "GPU kernels" in detail
    monkeypatch.setattr(portable, "not_applicable", lambda device="cpu": None)
    assert env.check_portable("cuda:0")[0] == env.FAILED


def test_a_missing_optional_part_is_named_with_how_to_get_it() -> None:
    assert env.optional_part("fssl_no_such_module", "x", "pip install x") == (
        env.MISSING,
        "not installed: pip install x",
    )


# ------------------------------------------------------------------------------------------------
# calibration cells


@pytest.fixture(scope="module")
def gpu_targets():
    grids = {g: load_cells(g)[1] for g in cc.gpu_grids()}
    return grids, cc.targets(grids)


def test_targets_are_every_pretraining_key_of_the_gpu_grids_heaviest_first(gpu_targets) -> None:
    grids, targets = gpu_targets
    keys = {cal.train_key(c) for cells in grids.values() for c in cells if cal.client_work(c)[0]}
    assert {t.key for t in targets} == keys and len(targets) == len(keys)
    assert all(cal.train_key(t.cell) == t.key and t.cell in grids[t.grid] for t in targets)
    weights = [t.weight_hours for t in targets]
    assert weights == sorted(weights, reverse=True) and weights[-1] > 0
    shapes = {(t.cell.backbone.name, cal.image_size(t.cell)) for t in targets}
    assert {"resnet18_cifar", "resnet18", "resnet50", "vit_base_p4", "vit_base_p16"} <= {
        b for b, _ in shapes
    }
    # --tiny: the heaviest target of each backbone family, in order
    tiny = cc.tiny_targets(targets)
    assert [cc.backbone_family(t.cell) for t in tiny] == ["vit", "resnet"] or [
        cc.backbone_family(t.cell) for t in tiny
    ] == ["resnet", "vit"]
    for t in tiny:
        same = [u for u in targets if cc.backbone_family(u.cell) == cc.backbone_family(t.cell)]
        assert t is same[0]


def test_a_calibration_cell_is_its_target_reduced(gpu_targets) -> None:
    _, targets = gpu_targets
    t = next(t for t in targets if t.cell.public is not None and t.cell.precision == "fp16")
    c = cc.calibration_cell(t, cc.FULL)
    assert (c.method, c.backbone, c.dataset, c.public) == (
        t.cell.method,
        t.cell.backbone,
        t.cell.dataset,
        t.cell.public,
    )
    assert c.precision == "fp16" and c.partition.name == "iid" and c.tasks == ()
    assert (c.fl.num_clients, c.fl.participation, c.fl.rounds, c.fl.local_epochs) == (
        cc.CLIENTS,
        1.0,
        2,
        1,
    )
    tiny = cc.calibration_cell(t, cc.TINY)
    assert tiny.backbone.name in ("resnet_micro", "vit_micro") and tiny.precision == "bf16"
    assert tiny.method == t.cell.method and cal.image_size(tiny) in (cc.TINY_SIZE, 32)


@pytest.fixture(scope="module")
def measured(gpu_targets, tmp_path_factory):
    """One real calibration cell on the CPU: the tiny sibling of the heaviest fp32 ResNet-18 CIFAR
    target."""
    _, targets = gpu_targets
    t = next(
        t
        for t in targets
        if t.cell.backbone.name == "resnet18_cifar" and t.cell.precision == "fp32"
    )
    plan = cc.plan_data([t], cc.TINY)
    base = tmp_path_factory.mktemp("cal-data")
    cc.write_data(plan, base, lambda msg: None)
    cell = plan.cells[t.key]
    return t, cc.measure_target(t, cell, cc.TINY, plan.root(base, t.key), "cpu"), cell


def test_a_measured_cell_reports_consistent_engine_and_bare_figures(measured) -> None:
    t, m, cell = measured
    assert m.ok and m.key == t.key and m.family == t.family and m.grid_cell == t.cell.cell_id
    assert 1 <= m.steps <= cc.TINY.steps and m.client_images == cc.TINY.cap(32)
    assert m.images_per_s == pytest.approx(m.samples_per_step / m.step_s)
    # the bare loop repeats the same step: same order of magnitude, and the engine's client update
    # (its loop plus what surrounds it) compared with the same steps bare
    assert 0.2 < m.bare_step_s / m.step_s < 5
    assert m.engine_vs_bare == pytest.approx(
        m.bare_step_s * m.steps / (m.step_s * m.steps + m.update_s)
    )
    assert m.update_s >= 0 and 0 <= m.outside_share < 1 and m.peak_mem_bytes is None
    # the median of REPEATS measured client updates and bare loops, with their spread; the host's
    # memory on every device
    assert m.repeats == cc.REPEATS and m.images_per_s_spread >= 0 and m.bare_step_s_spread >= 0
    assert m.peak_host_mem_bytes and m.peak_host_mem_bytes > 50 * 2**20


def test_repeats_give_a_median_and_a_spread() -> None:
    assert cc.median([3.0, 1.0, 2.0]) == 2.0 and cc.median([1.0, 2.0, 4.0, 10.0]) == 3.0
    assert cc.spread([9.0, 10.0, 12.0]) == pytest.approx(0.3) and cc.spread([5.0]) is None


def test_out_of_memory_is_a_status_and_an_error_a_named_failure(
    gpu_targets, monkeypatch, tmp_path
) -> None:
    _, targets = gpu_targets
    t = targets[0]

    def oom(*a, **k):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(cc, "measure", oom)
    cell = cc.calibration_cell(t, cc.FULL)
    m = cc.measure_target(t, cell, cc.FULL, tmp_path, "cpu")
    assert m.status == "out of memory" and not m.ok

    def broken(*a, **k):
        raise RuntimeError("boom")

    monkeypatch.setattr(cc, "measure", broken)
    monkeypatch.setattr(cc, "targets", lambda grids: [t])
    monkeypatch.setattr(
        cc, "plan_data", lambda chosen, s: cc.DataPlan({t.key: cell}, {t.key: 1}, {})
    )
    monkeypatch.setattr(cc, "write_data", lambda plan, base, log: None)
    from benchmark.commands.calibrate import Clock, measure_all

    out, checks = measure_all(
        {g: [] for g in cc.gpu_grids()}, "cpu", False, tmp_path, Clock(60, lambda s: None)
    )
    assert out[0].status == "failed: RuntimeError: boom"
    # its own failure, and nothing measured at all (issue 56: never a pass)
    assert [c.name for c in checks if c.failed] == [
        "measurements",
        f"measure {t.family} [{t.key[:8]}]",
    ]


def test_the_time_budget_leaves_targets_unmeasured_and_the_run_incomplete(
    gpu_targets, monkeypatch, tmp_path
) -> None:
    """An exhausted budget still measures the first configuration; the others are unmeasured, not
    failed, and the run is "incomplete" (exit 3), never "every check passed"."""
    from benchmark.commands.calibrate import EXIT_INCOMPLETE, Clock, exit_code, measure_all

    _, targets = gpu_targets
    monkeypatch.setattr(cc, "targets", lambda grids: targets[:3])
    monkeypatch.setattr(
        cc,
        "plan_data",
        lambda chosen, s: cc.DataPlan(
            {t.key: t.cell for t in chosen}, {t.key: 1 for t in chosen}, {}
        ),
    )
    monkeypatch.setattr(cc, "write_data", lambda plan, base, log: None)

    def measured(t, cell, settings, root, device):
        return cal.Measurement(t.key, t.family, "ok", images_per_s=10.0, repeats=cc.REPEATS)

    monkeypatch.setattr(cc, "measure_target", measured)
    out, checks = measure_all(
        {g: [] for g in cc.gpu_grids()}, "cpu", False, tmp_path, Clock(0.0, lambda s: None)
    )
    assert [m.status for m in out] == ["ok"] + ["not measured: the time budget ended"] * 2
    assert not any(c.failed for c in checks)
    assert checks[0].status == env.INCOMPLETE
    assert checks[0].detail == (
        "1 of 3 configurations measured on cpu; 2 not measured: the time budget ended"
    )
    report = {"failed": [], "complete": False, "incomplete": ["measurements"]}
    assert exit_code(report) == EXIT_INCOMPLETE == 3
    assert exit_code({**report, "failed": ["smoke fp32"]}) == 1
    assert exit_code({"failed": [], "complete": True, "incomplete": []}) == 0


# ------------------------------------------------------------------------------------------------
# smoke records


def test_a_smoke_record_that_is_not_valid_and_sealed_is_named(tmp_path) -> None:
    from benchmark.commands.calibrate import _record_problems
    from benchmark.engine.runner import run_cell
    from benchmark.runroot.rundir import RunDir

    cell = next(c for c in load_cells("smoke")[1] if c.method.name == "no_pretrain")
    run_cell(cell, tmp_path, device="cpu")
    assert _record_problems(cell, tmp_path, "cpu") == []
    assert _record_problems(cell, tmp_path, "cuda") == ["ran on cpu, not cuda"]
    assert _record_problems(dataclasses.replace(cell, seed=99), tmp_path, "cpu") == [
        "no record (not run)"
    ]
    path = RunDir.of(cell, tmp_path).record_path
    raw = json.loads(path.read_text())
    raw["scores"][0]["values"]["top1"] = 99.0
    path.write_text(json.dumps(raw))
    assert any("digest mismatch" in p for p in _record_problems(cell, tmp_path, "cpu"))


# ------------------------------------------------------------------------------------------------
# the command line


@pytest.mark.parametrize(
    "argv, message",
    [
        (["doctor", "--tiny"], "--tiny go(es) with --calibrate"),
        (
            ["doctor", "--calibrate", "--methods", "fedu"],
            "--methods do(es) not go with --calibrate",
        ),
        (["doctor", "--calibrate", "--budget", "0"], "--budget must be > 0"),
        (["doctor", "--calibrate", "--device", "cuda:7"], "--device cuda:7"),
    ],
)
def test_usage_errors_exit_2_before_anything_runs(argv, message, capsys) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_out_must_be_a_writable_file(tmp_path, capsys) -> None:
    assert main(["doctor", "--calibrate", "--out", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err


def test_dry_run_and_plan_cost_the_grid_from_this_devices_calibration(
    tmp_path, monkeypatch, capsys
) -> None:
    from benchmark.records.env_info import machine_model

    monkeypatch.setenv(cal.CALIBRATION_DIR_ENV, str(tmp_path))
    monkeypatch.delenv(cal.CALIBRATION_ENV, raising=False)
    cells = load_cells("smoke")[1]
    trains = [c for c in cells if cal.client_work(c)[0]]
    m = cal.Measurement(
        key=cal.train_key(trains[0]),
        family=cal.family_of(trains[0]),
        status="ok",
        images_per_s=50.0,
        update_s=0.5,
    )
    report = {
        "kind": cal.REPORT_KIND,
        "version": cal.REPORT_VERSION,
        "tiny": False,
        "created_at": "2026-11-27T00:00:00+00:00",
        "device": {"name": machine_model("cpu")},
        "measurements": [dataclasses.asdict(m)],
    }
    path = cal.default_calibration_path(machine_model("cpu"))
    path.write_text(json.dumps(report))
    calib = cal.load_calibration(path)
    hours = sum(cal.cell_cost(c, calib).hours for c in cells)
    expected = m.key  # the cells with this key cost images / 50 + updates x 0.5 s
    same = [c for c in cells if cal.train_key(c) == expected]
    assert same and all(
        cal.cell_cost(c, calib).hours
        == pytest.approx((cal.client_work(c)[0] / 50.0 + cal.client_work(c)[1] * 0.5) / 3600)
        for c in same
    )
    for argv in (
        ["run", "--grid", "smoke", "--dry-run", "--device", "cpu", "--root", str(tmp_path / "r")],
        ["plan", "--grid", "smoke", "--device", "cpu"],
    ):
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert (
            f"cost: about {hours:.2f} device-hours of pre-training on {machine_model('cpu')}" in out
        )
        assert str(path) in out and "fixed estimate" not in out and "A100" not in out
    report["tiny"] = True
    path.write_text(json.dumps(report))
    assert main(["plan", "--grid", "smoke", "--device", "cpu"]) == 0
    assert "is a --tiny report (micro backbones): never used" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------------
# the whole command


@pytest.mark.slow
def test_calibrate_tiny_on_the_cpu_passes(tmp_path) -> None:
    """What CI runs: the whole command, in a fresh process, on the CPU."""
    out = tmp_path / "tiny.json"
    t0 = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmark",
            "doctor",
            "--calibrate",
            "--tiny",
            "--device",
            "cpu",
            "--out",
            str(out),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=400,
    )
    wall = time.perf_counter() - t0
    # the 3-minute target is a measurement (docs/performance.md), not an assert: a timing assert
    # fails on a loaded machine for no fault of the code; the wall time is in the failure message.
    # A loaded machine may leave a phase cut short by the budget: exit 3, "incomplete", each part
    # named; never "passed" with nothing measured
    assert proc.returncode in (0, 3), (
        f"after {wall:.0f} s: " + proc.stdout[-4000:] + proc.stderr[-4000:]
    )
    report = json.loads(out.read_text())
    assert report["kind"] == cal.REPORT_KIND and report["tiny"] and report["passed"]
    names = {c["name"]: c["status"] for c in report["checks"]}
    assert (proc.returncode == 3) == bool(report["incomplete"]) != report["complete"]
    assert all(names[n] == env.INCOMPLETE for n in report["incomplete"])
    assert ("INCOMPLETE:" in proc.stdout) == (proc.returncode == 3)
    assert {names["smoke fp32"], names["smoke bf16"], names["measurements"]} <= {
        env.OK,
        env.INCOMPLETE,
    }
    smoke = load_cells("smoke")[1]
    fp32, bf16 = report["smoke"]["fp32"], report["smoke"]["bf16"]
    for part in (fp32, bf16):  # every cell wrote a valid record or was not run (budget)
        assert (
            part["valid_records"] + len(part["not_run"]) == part["cells"] and not part["problems"]
        )
    assert bf16["cells"] == len(smoke) - 1 and fp32["cells"] in (len(smoke), len(smoke) - 1)
    families = cc.tiny_targets(cc.targets({g: load_cells(g)[1] for g in cc.gpu_grids()}))
    assert [m["key"] for m in report["measurements"]] == [t.key for t in families]
    # at least one configuration measured end to end: its rate, memory, engine/bare, repeats
    first = report["measurements"][0]
    assert first["status"] == "ok" and first["images_per_s"] > 0 and first["engine_vs_bare"] > 0
    assert first["repeats"] == cc.REPEATS and first["peak_host_mem_bytes"] > 0
    assert report["sync"]["mode"] == "n/a"
    from benchmark.grids.expand import grid_names

    assert set(report["projection"]["grids"]) == set(grid_names())
    assert report["projection"]["tracks"] and report["projection"]["assumptions"]
    for section in (
        "checks",
        "measured pre-training configurations",
        "projected cost on this device",
        "--tiny:",
    ):
        assert section in proc.stdout
    assert (
        "[" in proc.stdout.splitlines()[0] and " s] doctor --calibrate --tiny on cpu" in proc.stdout
    )
    assert cal.load_calibration(out).tiny and cal.usable_calibration("x", str(out))[0] is None
    assert not math.isnan(report["elapsed_s"])


@pytest.mark.gpu
def test_calibrate_on_the_gpu_passes_within_eight_minutes(tmp_path) -> None:
    out = tmp_path / "gpu.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmark",
            "doctor",
            "--calibrate",
            "--device",
            "cuda",
            "--out",
            str(out),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["elapsed_s"] < 480 and report["device"]["device"].startswith("cuda")
    assert any(m["status"] == "ok" and m["peak_mem_bytes"] for m in report["measurements"])
    assert cal.usable_calibration("x", str(out))[0] is not None


def test_a_phase_that_raises_is_a_named_failure_and_the_rest_goes_on() -> None:
    from benchmark.commands.calibrate import Clock, guarded

    lines: list[str] = []
    clock = Clock(60, lines.append)

    def boom():
        raise ImportError("No module named 'datasets'")

    value, checks = guarded("measurements", clock, boom, ([], []))
    assert value == ([], []) and [(c.name, c.status) for c in checks] == [
        ("measurements", "FAILED")
    ]
    assert "ImportError: No module named 'datasets'" in checks[0].detail
    assert any("measurements FAILED" in line for line in lines)
    assert guarded("x", clock, lambda: 7, None) == (7, [])


# ------------------------------------------------------------------------------------------------
# every phase inside the budget; what CUDA's sync debug mode caught


def test_the_smoke_grid_starts_no_cell_after_its_share_of_the_budget() -> None:
    from types import SimpleNamespace

    from benchmark.commands.calibrate import Clock, launch_until

    started: list[str] = []
    closed = []

    def outcomes():
        try:
            for cid in ("a", "b", "c", "d"):
                started.append(cid)
                yield SimpleNamespace(cell_id=cid)
        finally:
            closed.append(True)

    clock = Clock(100.0, lambda s: None)
    ticks = iter([1.0, 2.0, 50.0, 51.0])
    clock_elapsed = type(clock).elapsed
    try:
        type(clock).elapsed = property(lambda self: next(ticks))
        ran = launch_until(outcomes(), 40.0, clock)
    finally:
        type(clock).elapsed = clock_elapsed
    assert ran == {"a", "b", "c"} and started == ["a", "b", "c"] and closed == [True]


def test_a_smoke_cell_the_budget_left_unrun_is_incomplete_not_failed_nor_passed() -> None:
    from benchmark.commands.calibrate import _smoke_check

    c = _smoke_check("fp32", 12, {}, ["x", "y"], "cpu", 3.0)
    assert c.status == env.INCOMPLETE and not c.failed
    assert (
        c.detail
        == "10/12 cells wrote valid sealed records on cpu; 2 not run: the time budget ended"
    )
    assert _smoke_check("fp32", 12, {"z": ["no bf16 score"]}, ["x"], "cpu", 3.0).failed
    assert _smoke_check("fp32", 12, {}, [], "cpu", 3.0).status == env.OK


def test_cuda_sync_debug_mode_is_on_during_the_phases_and_what_it_caught_is_reported() -> None:
    import warnings

    from benchmark.calibration.sync import sync_watch

    modes: list[str] = []
    report: dict = {}
    with sync_watch("cuda:0", report, setter=modes.append, getter=lambda: "default"):
        assert modes == ["warn"]
        for _ in range(3):
            warnings.warn("called a synchronizing CUDA operation", UserWarning, stacklevel=1)
        warnings.warn("called a synchronizing CUDA operation\nmore", UserWarning, stacklevel=1)
    assert modes == ["warn", "default"]
    assert report["mode"] == "warn" and report["caught"] == 4
    assert [s["count"] for s in report["sites"]] == [3, 1]
    assert report["sites"][0]["message"] == "called a synchronizing CUDA operation"
    assert report["sites"][0]["where"].startswith(__file__)
    off: dict = {}
    with sync_watch("cpu", off, setter=modes.append, getter=lambda: "default"):
        pass
    assert off["mode"] == "n/a" and modes == ["warn", "default"]
