"""``benchmark/calibration/projection.py``: a calibration report's keys, where it is looked up, and the
cost it gives a grid's cells (client work x measured rates, the fallbacks, per grid and per track)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from benchmark.calibration import projection as cal
from benchmark.calibration.projection import Calibration, Measurement
from benchmark.commands.run import load_cells
from benchmark.core.errors import UsageError
from benchmark.grids.cost import fmt_range, grid_hours
from benchmark.grids.grid_plan import TRAIN_SIZES, estimate_hours


@pytest.fixture(scope="module")
def main_cells():
    return load_cells("main")[1]


def _one(cells, **want):
    """The first cell whose method / dataset / K / partition name match."""
    for c in cells:
        got = {
            "method": c.method.name,
            "dataset": c.dataset.name,
            "k": c.fl.num_clients,
            "partition": c.partition.name,
        }
        if all(got[k] == v for k, v in want.items()):
            return c
    raise LookupError(want)


def test_the_key_follows_what_decides_speed_and_nothing_else(main_cells) -> None:
    c = _one(main_cells, method="fedema", dataset="cifar10", k=10, partition="iid")
    same = [
        dataclasses.replace(c, seed=7),
        dataclasses.replace(c, tasks=()),
        dataclasses.replace(c, partition_seed=3),
        _one(main_cells, method="fedema", dataset="cifar100", k=100),  # same shapes
    ]
    assert {cal.train_key(x) for x in same} == {cal.train_key(c)}
    faster = dataclasses.replace(c, precision="fp32")
    bigger_batch = dataclasses.replace(
        c, method=dataclasses.replace(c.method, params={**c.method.params, "batch_size": 512})
    )
    assert cal.train_key(faster) != cal.train_key(c) != cal.train_key(bigger_batch)
    assert cal.family_of(bigger_batch) == cal.family_of(c) == "fedema resnet18_cifar@32 bf16"


def test_client_work_is_rounds_clients_epochs_and_client_size(main_cells) -> None:
    silo = _one(main_cells, method="fedavg_simclr", dataset="cifar10", k=10, partition="iid")
    device = _one(main_cells, method="fedavg_simclr", dataset="cifar10", k=100, partition="iid")
    n = TRAIN_SIZES["cifar10"]
    for c in (silo, device):
        per_round, e, r = c.fl.clients_per_round, c.fl.local_epochs, c.fl.rounds
        assert cal.client_work(c) == (
            r * per_round * e * n / c.fl.num_clients,
            r * per_round,
            n / c.fl.num_clients,
        )
    # FLESD's clients share the train split less its 10 % public holdout
    flesd = _one(main_cells, method="flesd", dataset="cifar10", k=10, partition="iid")
    assert sum(cal.client_sizes(flesd)) == n - n // 10
    # central SSL: one update a round over the pooled data; random init trains nothing
    central = _one(main_cells, method="central_ssl", dataset="cifar10", k=100)
    images, updates, per_update = cal.client_work(central)
    assert (updates, per_update) == (central.fl.rounds, n) and images == n * 100 * 5
    assert cal.client_work(_one(main_cells, method="no_pretrain")) == (0.0, 0.0, 0.0)


def _measured(cell, ips: float, update_s: float, **kw) -> Measurement:
    return Measurement(
        key=cal.train_key(cell),
        family=cal.family_of(cell),
        status="ok",
        images_per_s=ips,
        update_s=update_s,
        **kw,
    )


def test_a_measured_cell_costs_its_images_and_updates_at_the_measured_rates(main_cells) -> None:
    c = _one(main_cells, method="fedu", dataset="cifar10", k=10, partition="iid")
    m = _measured(c, ips=2500.0, update_s=0.4)
    calib = Calibration("GPU X", False, "now", {m.key: m})
    images, updates, _ = cal.client_work(c)
    cost = cal.cell_cost(c, calib)
    assert cost.basis == "measured" and cost.estimate_hours == estimate_hours(c)
    assert cost.hours == pytest.approx((images / 2500.0 + updates * 0.4) / 3600)
    # another fedu configuration of the same backbone, size and precision borrows it ("as"); a
    # configuration of another family falls back to plan's estimate
    other = dataclasses.replace(
        c, method=dataclasses.replace(c.method, params={**c.method.params, "batch_size": 64})
    )
    assert cal.cell_cost(other, calib).basis == f"as {m.key[:8]}"
    fedema = _one(main_cells, method="fedema", dataset="cifar10", k=10)
    assert cal.cell_cost(fedema, calib).basis == "estimate"
    assert cal.cell_cost(fedema, calib).hours == estimate_hours(fedema)
    # a failed or out-of-memory measurement is no measurement
    oom = dataclasses.replace(m, status="out of memory")
    assert cal.cell_cost(c, Calibration("GPU X", False, "", {m.key: oom})).basis == "estimate"


def test_projection_per_grid_and_per_track(main_cells) -> None:
    from benchmark.core.paths import TRACKS_FILE
    from benchmark.records.tracks import load_tracks

    tracks = load_tracks(TRACKS_FILE)
    smoke = load_cells("smoke")[1]
    c = _one(main_cells, method="fedu", dataset="cifar10", k=100, partition="iid")
    m = _measured(c, ips=1000.0, update_s=0.0)
    out = cal.projection(
        {"main": main_cells, "smoke": smoke}, Calibration("G", False, "", {m.key: m}), tracks
    )
    assert out["assumptions"] == list(cal.ASSUMPTIONS)
    main = out["grids"]["main"]
    costs = [cal.cell_cost(x, Calibration("G", False, "", {m.key: m})) for x in main_cells]
    assert main["cells"] == len(main_cells) and main["device_hours"] == round(
        sum(x.hours for x in costs), 3
    )
    measured = sum(x.hours for x in costs if x.basis != "estimate" and x.basis != "no pre-training")
    assert main["measured_share"] == round(measured / sum(x.hours for x in costs), 4) > 0
    knn = next(t for t in tracks if t.id == "cifar10-knn")
    mine = cal.track_cells(knn, main_cells)
    assert mine and all(
        x.dataset.name == "cifar10"
        and x.fl.num_clients == 100
        and any(t.name == "knn" for t in x.tasks)
        for x in mine
    )
    assert out["tracks"]["cifar10-knn"]["cells"] == len(mine) < main["cells"]
    assert out["grids"]["smoke"]["device_hours"] == pytest.approx(
        sum(estimate_hours(x) for x in smoke if cal.client_work(x)[0]), abs=1e-3
    )


def _report(path: Path, *, tiny: bool = False, name: str = "GPU X", **extra) -> Path:
    raw = {
        "kind": cal.REPORT_KIND,
        "version": cal.REPORT_VERSION,
        "tiny": tiny,
        "created_at": "2026-11-27T00:00:00+00:00",
        "device": {"name": name},
        "measurements": [],
        **extra,
    }
    path.write_text(json.dumps(raw))
    return path


def test_where_a_calibration_is_looked_up(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(cal.CALIBRATION_DIR_ENV, str(tmp_path / "dir"))
    monkeypatch.delenv(cal.CALIBRATION_ENV, raising=False)
    path, how = cal.locate_calibration("NVIDIA H100 80GB HBM3")
    assert path is None and str(tmp_path / "dir" / "nvidia-h100-80gb-hbm3.json") in how
    (tmp_path / "dir").mkdir()
    own = _report(tmp_path / "dir" / "nvidia-h100-80gb-hbm3.json")
    assert cal.locate_calibration("NVIDIA H100 80GB HBM3")[0] == own
    assert cal.locate_calibration("NVIDIA A100-SXM4-40GB")[0] is None  # another model's file
    env = _report(tmp_path / "env.json")
    monkeypatch.setenv(cal.CALIBRATION_ENV, str(env))
    assert cal.locate_calibration("NVIDIA H100 80GB HBM3") == (env, "$FSSL_CALIBRATION")
    given = _report(tmp_path / "given.json")
    assert cal.locate_calibration("x", str(given)) == (given, "--calibration")


def test_a_tiny_or_foreign_report_is_never_used(tmp_path) -> None:
    calib, why = cal.usable_calibration("x", str(_report(tmp_path / "t.json", tiny=True)))
    assert calib is None and "--tiny" in why
    calib, why = cal.usable_calibration("x", str(_report(tmp_path / "g.json")))
    assert calib is not None and calib.device == "GPU X" and str(tmp_path / "g.json") in why
    (tmp_path / "other.json").write_text(json.dumps({"kind": "something else"}))
    with pytest.raises(UsageError, match="not a `doctor --calibrate` report"):
        cal.load_calibration(tmp_path / "other.json")
    with pytest.raises(UsageError, match="report version"):
        cal.load_calibration(_report(tmp_path / "v.json", version=99))


def test_the_cost_line_says_where_its_figure_comes_from(main_cells) -> None:
    cells = [x for x in main_cells if x.method.name == "fedu" and x.dataset.name == "cifar10"]
    plan = sum(estimate_hours(x) for x in cells)
    line = cal.cost_line(cells, None, "no calibration of 'CPU' at /x.json")
    total = fmt_range(*grid_hours(cells)["total"])  # plan's one figure: the FLOP model on an H200
    assert line.startswith(f"cost: {total} H200-hours by plan's FLOP model") and "/x.json" in line
    m = _measured(cells[0], ips=4000.0, update_s=0.1)
    calib = Calibration("GPU X", False, "", {m.key: m})
    line = cal.cost_line(cells, calib, "calibration /c.json")
    hours = sum(cal.cell_cost(x, calib).hours for x in cells)
    assert (
        f"about {hours:.2f} device-hours of pre-training on GPU X" in line and "100% of it" in line
    )
    assert not math.isclose(hours, plan)
