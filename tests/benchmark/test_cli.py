"""The CLI's contract: bad input exits 2 with one line and writes nothing; runs skip finished
cells."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from benchmark.cli import main

TINY = {
    "name": "tiny",
    "base": {
        "dataset": "digits",
        "backbone": {"name": "resnet_micro", "width": 4},
        "partition": "iid",
        "fl": {"num_clients": 2, "rounds": 1},
        "tasks": ["knn"],
    },
    "method_common": {"batch_size": 16},
    "axes": {"method": ["no_pretrain", "fedavg_simclr"]},
}


def write_grid(tmp_path: Path, grid: dict) -> Path:
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump(grid))
    return path


@pytest.mark.parametrize(
    "change, needle",
    [
        (lambda g: g["axes"].update(method=["fedavg_simclrr"]), "unknown method 'fedavg_simclrr'"),
        (lambda g: g["base"].update(dataset="cifar11"), "unknown dataset"),
        (lambda g: g["base"].update(partition="dirichlett"), "unknown partitioner"),
        (lambda g: g.update(axis={}), "unknown grid key 'axis'"),
        (lambda g: g["base"]["fl"].update(rounds="1"), "rounds"),
        (lambda g: g["base"].update(partition={"name": "dirichlet", "alpha": -1}), "alpha"),
        (lambda g: g["base"]["fl"].update(num_clients=5000), "5000"),
    ],
)
def test_bad_input_exits_2_and_writes_nothing(tmp_path: Path, capsys, change, needle: str) -> None:
    grid = yaml.safe_load(yaml.safe_dump(TINY))
    change(grid)
    root = tmp_path / "root"
    code = main(
        ["run", "--grid", str(write_grid(tmp_path, grid)), "--root", str(root), "--no-wandb"]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.startswith("error: ") and needle in err and len(err.splitlines()) == 1
    assert not root.exists()


def test_unknown_grid_name(tmp_path: Path, capsys) -> None:
    assert main(["run", "--grid", "quikstart", "--root", str(tmp_path / "r")]) == 2
    assert "did you mean 'quickstart'" in capsys.readouterr().err.lower()


def test_missing_dataset_stops_fast_with_instructions(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("FSSL_DATA_ROOT", str(tmp_path / "empty"))
    grid = yaml.safe_load(yaml.safe_dump(TINY))
    grid["base"]["dataset"] = "cifar10"
    root = tmp_path / "root"
    assert main(["run", "--grid", str(write_grid(tmp_path, grid)), "--root", str(root)]) == 2
    err = capsys.readouterr().err
    assert "cifar10" in err and "python -m benchmark prefetch cifar10" in err
    assert not root.exists()


def test_run_then_rerun_skips(tmp_path: Path, capsys) -> None:
    path = write_grid(tmp_path, TINY)
    root = tmp_path / "root"
    # the cells in this process (--workers 1): two spawned workers would each import torch and the
    # registry for a test of skipping (the worker pool is test_launchers_agree.py's)
    assert (
        main(["run", "--grid", str(path), "--root", str(root), "--no-wandb", "--workers", "1"]) == 0
    )
    records = sorted(root.glob("*/*/record.json"))
    assert len(records) == 2
    mtimes = [p.stat().st_mtime_ns for p in records]
    capsys.readouterr()
    assert main(["run", "--grid", str(path), "--root", str(root), "--no-wandb"]) == 0
    out = capsys.readouterr().out
    assert "2 already finished" in out and "0 to run" in out
    assert [p.stat().st_mtime_ns for p in records] == mtimes
    assert main(["run", "--grid", str(path), "--root", str(root), "--dry-run"]) == 0
    assert capsys.readouterr().out.count("done") == 2
    assert main(["show", records[0].parent.name, "--root", str(root)]) == 0
    assert main(["collect", "--from", str(root), "--results", str(tmp_path / "results")]) == 0
    assert len(list((tmp_path / "results" / "records" / "v1").glob("*/*.json"))) == 2


def test_failing_cell_is_kept_and_grid_goes_on(tmp_path: Path, monkeypatch, capsys) -> None:
    import methods.fedavg_simclr as fs

    def boom(self, *a, **k):
        raise RuntimeError("synthetic failure")

    monkeypatch.setattr(fs.FedAvgSimCLR, "client_update", boom)
    root = tmp_path / "root"
    # exit code 1: a cell failed (the policy: 0 all done, 1 some failed, 2 usage error)
    assert (
        main(
            [
                "run",
                "--grid",
                str(write_grid(tmp_path, TINY)),
                "--root",
                str(root),
                "--no-wandb",
                "--workers",
                "1",
            ]
        )
        == 1
    )
    assert len(list(root.glob("*/*/record.json"))) == 1  # no_pretrain finished
    errors = list(root.glob("fedavg_simclr/*/error.json"))
    assert len(errors) == 1 and "synthetic failure" in errors[0].read_text()
    capsys.readouterr()
    main(["status", "--grid", str(write_grid(tmp_path, TINY)), "--root", str(root)])
    assert "synthetic failure" in capsys.readouterr().out


@pytest.mark.parametrize("what", ["methods", "datasets", "partitioners", "tasks", "grids"])
def test_list(what: str, capsys) -> None:
    assert main(["list", what]) == 0
    assert capsys.readouterr().out.strip()


def test_plan_offline(capsys) -> None:
    assert main(["plan", "--grid", "smoke"]) == 0
    out = capsys.readouterr().out
    assert "cells" in out and "whole-grid cost on one H200" in out
    # one figure: the table's total is the cost line's, no second model (issue 56)
    total = next(line.split()[-1] for line in out.splitlines() if line.strip().startswith("total"))
    (cost,) = [line for line in out.splitlines() if line.startswith("cost: ")]
    assert cost.startswith(f"cost: {total} H200-hours by plan's FLOP model")
    assert "A100" not in out and "GPU-hours" not in out


def test_module_entry_point() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "benchmark", "list", "methods"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0 and "fedavg_simclr" in out.stdout


def test_missing_task_data_is_reported_before_anything_runs(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    """The cell's dataset is present (digits) but the transfer target is not: preflight names it and
    stops."""
    monkeypatch.setenv("FSSL_DATA_ROOT", str(tmp_path / "empty"))
    grid = yaml.safe_load(yaml.safe_dump(TINY))
    grid["base"]["tasks"] = [{"name": "transfer", "target": "stl10"}]
    root = tmp_path / "root"
    assert main(["run", "--grid", str(write_grid(tmp_path, grid)), "--root", str(root)]) == 2
    assert "prefetch stl10" in capsys.readouterr().err
    assert not root.exists()


def test_missing_data_check_needs_no_torch(tmp_path: Path) -> None:
    """`run` on a machine without the data stops before importing torch (which is what makes it
    fast), naming the datasets tasks read (COCO for the main grid's detection cells) along with the
    cells' own."""
    code = (
        "import sys; from benchmark.launchers.preflight import missing_datasets_fast; from benchmark.grids.expand import load_grid; "
        "m = missing_datasets_fast(load_grid('main'), sys.argv[1]); "
        "assert m and 'torch' not in sys.modules, (m, 'torch' in sys.modules); print(len(m)); "
        "print(any('COCO 2017' in line for line in m))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    count, coco = out.stdout.split()
    # the cells' datasets and the detection task's COCO, in one stop
    assert int(count) >= 4 and coco == "True"


def test_seeds_replace_the_grids_seeds_and_keep_the_other_cells_ids(tmp_path: Path, capsys) -> None:
    """`--seeds` replaces the grid's seeds (the quickstart's three become one with `--seeds 0`, and
    back); seed 0's cells keep their ids (so they are skipped when already done); bad lists exit 2
    before anything is written."""

    def ids(*extra: str) -> dict[str, str]:
        assert main(["run", "--grid", "quickstart", "--dry-run", *extra]) == 0
        lines = [ln.split() for ln in capsys.readouterr().out.splitlines() if "| seed=" in ln]
        return {ln[0]: next(w for w in ln if w.startswith("seed=")) for ln in lines}

    one, three = ids("--seeds", "0"), ids()
    assert set(one.values()) == {"seed=0"} and set(three.values()) == {"seed=0", "seed=1", "seed=2"}
    assert len(three) == 3 * len(one) and set(one) <= set(three)
    for bad in ("0,x", "1,1", "-1", ""):
        assert (
            main(["run", "--grid", "quickstart", "--seeds", bad, "--root", str(tmp_path / "r")])
            == 2
        )
    assert not (tmp_path / "r").exists()
