"""The portable kernel mode (benchmark.portable.mode, docs/reproducibility.md) and ``python -m
benchmark verify``."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmark.grids.expand import expand_grid, load_grid, parse_grid
from benchmark.portable import mode as portable

REPO = Path(__file__).resolve().parents[3]
# digits with a quarter of the train split (test_fraction 0.8, as tests/methods/small_data.py): the
# digests' (in)equality across instruction sets and verify's verdicts hold for any cell that trains
# a few steps through the convolutions, the projector and Adam; a smaller split only takes fewer
TINY = """\
name: tiny_kernels
base:
  dataset: {name: digits, test_fraction: 0.8}
  backbone: {name: resnet_micro, width: 4}
  partition: iid
  partition_seed: 0
  fl: {num_clients: 2, participation: 1.0, rounds: 1, local_epochs: 1}
  seed: 0
  tasks: [knn]
  kernels: KERNELS
method_common: {batch_size: 16}
axes:
  method: [fedavg_simclr]
"""


def _grid(tmp: Path, kernels: str) -> Path:
    path = tmp / f"tiny_{kernels}.yaml"
    path.write_text(TINY.replace("KERNELS", kernels))
    return path


def test_native_cells_keep_their_ids_and_portable_ones_get_new_ones() -> None:
    raw = {
        "name": "g",
        "base": {
            "dataset": "digits",
            "backbone": "resnet_micro",
            "partition": "iid",
            "tasks": ["knn"],
            "method": "fedavg_simclr",
        },
        "axes": {"seed": [0]},
    }
    plain = expand_grid(parse_grid(raw))[0]
    native = expand_grid(parse_grid({**raw, "base": {**raw["base"], "kernels": "native"}}))[0]
    port = expand_grid(parse_grid({**raw, "base": {**raw["base"], "kernels": "portable"}}))[0]
    assert "kernels" not in plain.to_dict() and native.cell_id == plain.cell_id
    assert port.to_dict()["kernels"] == "portable" and port.cell_id != plain.cell_id
    assert port.pretrain_key != plain.pretrain_key  # the mode's pre-training is its own
    assert type(port).from_dict(port.to_dict()) == port
    assert type(plain).from_dict(plain.to_dict()) == plain


def test_the_quickstart_runs_portable_and_its_shipped_records_are_its_portable_cells() -> None:
    # the README's numbers are the shipped quickstart records: they must be the portable mode's (so they
    # reproduce on any x86-64 CPU with AVX2), and every one must belong to a cell of today's grid
    # (a record whose cell left the grid is an orphan the README tables would silently drop)
    from benchmark.records.store import load_records

    for name in ("quickstart", "quickstart_extra", "quickstart_pooled"):
        cells = expand_grid(load_grid(name))
        assert {c.kernels for c in cells} == {"portable"}, name
        assert all(c.to_dict()["kernels"] == "portable" for c in cells), name
    ids = {c.cell_id for c in expand_grid(load_grid("quickstart"))}
    loaded, bad = load_records([REPO / "results"])
    records = [r for _, r in loaded]
    assert not bad  # no shipped record fails to load or its integrity check
    assert sorted(r.cell_id for r in records) == sorted(ids)  # one record a cell, none extra
    assert {r.status for r in records} == {"ok"}
    modes = {(r.env.kernels or {}).get("mode") for r in records}
    applied = {(r.env.kernels or {}).get("applies") for r in records}
    assert modes == {"portable"} and applied == {True}
    # one set of libraries: the mode does not cover another torch build or NumPy
    versions = {(r.env.packages.get("torch"), r.env.packages.get("numpy")) for r in records}
    assert len(versions) == 1, versions


def test_an_unknown_mode_is_refused_at_expansion() -> None:
    from benchmark.core.config import ConfigError

    raw = {
        "name": "g",
        "base": {
            "dataset": "digits",
            "backbone": "resnet_micro",
            "partition": "iid",
            "tasks": ["knn"],
            "method": "fedavg_simclr",
            "kernels": "fast",
        },
        "axes": {},
    }
    with pytest.raises(ConfigError, match="kernels must be one of native, portable"):
        expand_grid(parse_grid(raw))


def test_a_process_of_the_other_mode_refuses_the_cell(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    torch.randn(8, 8).sum()  # ATen has chosen its instruction set (native) in this process
    monkeypatch.delenv(portable.MARK, raising=False)
    with pytest.raises(portable.KernelModeError, match="asks for portable kernels.*native mode"):
        portable.activate("portable")
    monkeypatch.setenv(
        portable.MARK, "portable"
    )  # claims the mode, but ATen already chose its kernels
    for key, value in portable.PORTABLE_ENV.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(portable, "not_applicable", lambda device="cpu": None)
    # activate sets oneDNN on before it refuses: register the value to restore BEFORE it runs (a
    # later in-process run would otherwise compute without oneDNN, unlike its worker processes)
    monkeypatch.setattr(torch.backends.mkldnn, "enabled", torch.backends.mkldnn.enabled)
    with pytest.raises(portable.KernelModeError, match="ATen dispatches to"):
        portable.activate("portable")
    with pytest.raises(portable.KernelModeError, match="asks for native kernels"):
        portable.activate("native")


def test_where_the_mode_does_not_apply_it_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "GPU kernels are not covered" in portable.not_applicable("cuda:0")
    monkeypatch.setattr(portable.platform, "machine", lambda: "aarch64")
    assert portable.not_applicable("cpu") == "this CPU is aarch64, not x86-64"
    monkeypatch.setenv(portable.MARK, "portable")
    got = portable.state("cpu")
    assert got["mode"] == "portable" and got["applies"] is False and "aarch64" in got["reason"]
    assert "does not apply: this CPU is aarch64" in portable.describe(got)


def test_a_portable_parent_does_not_leak_its_variables_into_native_workers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(portable.MARK, "portable")
    for key, value in portable.PORTABLE_ENV.items():
        monkeypatch.setenv(key, value)
    with portable.child_environment("native"):
        assert os.environ[portable.MARK] == "native"
        assert not set(portable.PORTABLE_ENV) & set(os.environ)
    assert all(os.environ[k] == v for k, v in portable.PORTABLE_ENV.items())  # restored


# (a) the mode makes the digest independent of the instruction sets the kernels may use


def _avx512() -> bool:
    flags = portable._cpu_flags() or set()
    return "avx512f" in flags


def _run_cli(grid: Path, root: Path, extra_env: dict[str, str]) -> dict:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in portable.WATCHED or k.endswith("NUM_THREADS")
    }
    env.update({"PYTHONPATH": str(REPO), "WANDB_MODE": "disabled", **extra_env})
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmark",
            "run",
            "--grid",
            str(grid),
            "--root",
            str(root),
            "--no-wandb",
            "--workers",
            "1",
        ],
        check=False,
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    (path,) = root.rglob("record.json")
    return json.loads(path.read_text())


AVX2_CAPS = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
}
AVX512_CAPS = {
    "ATEN_CPU_CAPABILITY": "avx512",
    "ONEDNN_MAX_CPU_ISA": "AVX512_CORE",
    "MKL_ENABLE_INSTRUCTIONS": "AVX512",
}


def test_a_grid_sets_its_kernel_mode_in_its_base_or_only_the_expansion_knows(
    tmp_path: Path,
) -> None:
    from benchmark.commands.run import grid_kernels

    assert grid_kernels(load_grid(str(_grid(tmp_path, "portable")))) == "portable"
    assert grid_kernels(load_grid(str(_grid(tmp_path, "native")))) == "native"
    assert grid_kernels(load_grid("quickstart")) == "portable"
    assert grid_kernels(load_grid("smoke")) == "native"  # no kernels: native
    raw = {"name": "g", "base": {"kernels": "portable"}, "axes": {"method": ["fedavg_simclr"]}}
    assert grid_kernels(parse_grid(raw)) == "portable"
    for elsewhere in (
        {**raw, "axes": {"kernels": ["native", "portable"]}},
        {**raw, "axes": {"method": [{"name": "fedu", "with": {"kernels": "native"}}]}},
        {**raw, "method_common": {"kernels": "native"}},
    ):
        assert grid_kernels(parse_grid(elsewhere)) is None, elsewhere


def test_run_with_one_worker_enters_a_portable_grids_mode_before_torch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``run --workers 1`` computes its cells in its own process: on a portable grid that process
    enters the mode before torch is imported, so no worker process is started for it (a second
    start of torch and the registry)."""
    import argparse

    from benchmark.commands import run as run_command

    entered: list[str] = []
    monkeypatch.setattr(portable, "enter", entered.append)
    port = load_grid(str(_grid(tmp_path, "portable")))
    nat = load_grid(str(_grid(tmp_path, "native")))

    def enters(spec, torch_imported: bool = False, **args) -> list[str]:
        entered.clear()
        with monkeypatch.context() as m:
            if not torch_imported:
                m.delitem(sys.modules, "torch")  # as in a fresh `run` process
            ns = argparse.Namespace(**{"launcher": "local", "workers": 1, **args})
            run_command._enter_the_cells_mode(spec, ns)
        return list(entered)

    assert enters(port) == ["portable"]
    assert enters(nat) == []  # a fresh process is native already
    assert enters(port, workers=0) == enters(port, workers=2) == []  # worker processes do it
    assert enters(port, launcher="ray") == []
    assert enters(port, torch_imported=True) == []  # too late: the launcher starts a worker


# five CLI runs of a one-round cell: the three portable ones each in a `run` process that enters
# the mode before importing torch, the two native ones in a native `run` process (a minute or more)
@pytest.mark.slow
@pytest.mark.skipif(
    portable.not_applicable("cpu") is not None, reason="the mode applies to x86-64 CPUs with AVX2"
)
def test_portable_digest_is_one_whatever_the_kernels_may_use_and_native_ones_differ(
    tmp_path: Path,
) -> None:
    if not _avx512():
        pytest.skip("needs a CPU with AVX-512, so that the native kernels have a choice to make")
    port, nat = _grid(tmp_path, "portable"), _grid(tmp_path, "native")
    runs = {
        name: _run_cli(port, tmp_path / f"p_{name}", caps)
        for name, caps in (("machine", {}), ("avx2", AVX2_CAPS), ("avx512", AVX512_CAPS))
    }
    digests = {name: r["final_state_digest"] for name, r in runs.items()}
    assert len(set(digests.values())) == 1, digests
    envs = [r["env"]["kernels"] for r in runs.values()]
    assert all(
        e["mode"] == "portable" and e["aten"] == "AVX2" and e["onednn"] is True for e in envs
    )
    assert runs["avx2"]["env"]["kernels"]["env"]["MKL_ENABLE_INSTRUCTIONS"] == "AVX2"  # recorded
    native = {
        name: _run_cli(nat, tmp_path / f"n_{name}", caps)
        for name, caps in (("machine", {}), ("avx2", AVX2_CAPS))
    }
    assert native["machine"]["final_state_digest"] != native["avx2"]["final_state_digest"]
    assert native["machine"]["env"]["kernels"]["aten"] == "AVX512"
    assert native["avx2"]["env"]["kernels"]["aten"] == "AVX2"
    assert native["machine"]["cell_id"] != runs["machine"]["cell_id"]


# (b) verify


@pytest.fixture
def shipped(tmp_path: Path) -> tuple[Path, Path]:
    """A tiny native grid and a records folder made from it (run in this process)."""
    from benchmark.launchers.local import LocalLauncher
    from benchmark.launchers.options import RunOptions

    grid = _grid(tmp_path, "native")
    cells = expand_grid(load_grid(grid))
    outcomes = list(
        LocalLauncher(options=RunOptions(device="cpu"), workers=1).launch(cells, tmp_path / "ship")
    )
    assert [o.status for o in outcomes] == ["done"]
    return grid, tmp_path / "ship"


def _verify(grid: Path, results: Path, tmp: Path, name: str):
    from benchmark.commands.verify import verify

    return verify(str(grid), results=results, seeds=None, root=tmp / name, workers=1)


def test_verify_passes_on_an_unchanged_cell(
    shipped: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from benchmark.cli import main

    grid, results = shipped
    (v,) = _verify(grid, results, tmp_path, "again")
    assert v.status == "identical" and v.ok and not v.lines
    assert v.shipped.startswith("native (ATen") and v.here == v.shipped
    assert main(["verify", "--grid", str(grid), "--results", str(results), "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"identical  {v.cell_id}") and "1 cells: 1 identical" in out


def test_verify_fails_on_an_edited_record(shipped: tuple[Path, Path], tmp_path: Path) -> None:
    from benchmark.records.integrity import seal
    from benchmark.records.schema import to_json
    from benchmark.records.store import load_records

    grid, results = shipped
    ((path, record),) = load_records([results])[0]
    score = record.scores[0]
    edited = dataclasses.replace(
        score, values={**score.values, "top1": score.values["top1"] + 0.01}
    )
    path.write_text(to_json(seal(dataclasses.replace(record, scores=(edited, *record.scores[1:])))))
    (v,) = _verify(grid, results, tmp_path, "edited")
    assert v.status == "different" and not v.ok
    assert len(v.lines) == 1 and v.lines[0].startswith("scores ")
    path.write_text(
        to_json(dataclasses.replace(record, scores=(edited, *record.scores[1:])))
    )  # digest stale
    (v,) = _verify(grid, results, tmp_path, "unsealed")
    assert v.status == "invalid" and not v.ok and "digest mismatch" in v.lines[0]


def test_verify_fails_on_a_cell_whose_code_changed(
    shipped: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    from methods._shared import simclr  # FedAvg-SimCLR builds its network there

    grid, results = shipped
    original = simclr.simclr_net

    def nudged(*args, **kwargs):
        net = original(*args, **kwargs)
        with torch.no_grad():
            next(net.parameters()).mul_(1.001)
        return net

    monkeypatch.setattr(simclr, "simclr_net", nudged)
    (v,) = _verify(grid, results, tmp_path, "changed")
    assert v.status == "different"
    assert any(line.startswith("final_state ") for line in v.lines)


def test_records_from_before_env_kernels_keep_their_digest_and_new_ones_seal_it() -> None:
    import json as json_

    from benchmark.core.canonical import digest, to_plain
    from benchmark.records.integrity import integrity_problems, record_digest
    from benchmark.records.schema import EnvInfo
    from tests.benchmark.test_records import record

    old = record()  # env.kernels empty: what every record written before the field holds
    body = json_.loads(json_.dumps(to_plain(old)))
    body.pop("digest")
    del body["env"]["kernels"]
    if not body["compute"].get("client_samples"):  # nor did compute.client_samples (issue 39)
        body["compute"].pop("client_samples", None)
    if body["compute"].get("clients_without_step") is None:  # nor the count of issue 46
        body["compute"].pop("clients_without_step", None)
    if body["compute"].get("reused_from") is None:  # nor issue 53's pointer to a shared cell
        body["compute"].pop("reused_from", None)
    for part, key in (  # nor issue 45's GPU fields, empty off a GPU
        ("compute", "concurrency"),
        ("compute", "peak_gpu_mem_bytes"),
        ("env", "gpu"),
        ("env", "cuda_precision"),
    ):
        if not body[part].get(key):
            body[part].pop(key, None)
    assert record_digest(old) == digest(
        body
    )  # the digest it was sealed with before the field existed
    new = record(env=EnvInfo(kernels={"mode": "portable", "aten": "AVX2"}))
    assert not integrity_problems(new)
    edited = dataclasses.replace(new, env=EnvInfo(kernels={"mode": "native", "aten": "AVX2"}))
    assert integrity_problems(edited)  # the kernel settings are sealed with the numbers


def test_two_threads_starting_children_leave_this_process_in_its_mode(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The kernel census starts its children from several threads. Two overlapping
    ``child_environment`` blocks used to restore each other's values: the second saved the first's
    portable mode as "before" and put it back last, and the test process then refused every native
    cell (CI, stop 50). Overlapping blocks now run one at a time; ``child_env`` copies instead."""
    import threading

    monkeypatch.delenv(portable.MARK, raising=False)
    for key in portable.PORTABLE_ENV:
        monkeypatch.delenv(key, raising=False)
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()

    def first() -> None:
        with portable.child_environment("portable"):
            first_in.set()
            second_in.wait(0.5)  # the second thread may enter now, if nothing stops it
        first_out.set()

    def second() -> None:
        first_in.wait(5)
        with portable.child_environment("portable"):
            second_in.set()
            first_out.wait(5)  # and leave last, restoring what it saw on entering

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert portable.MARK not in os.environ and portable.process_kernels() == "native"
    assert not set(portable.PORTABLE_ENV) & set(os.environ)


def test_a_subprocess_child_gets_its_mode_in_a_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    """``child_env``: the child's environment for a mode, this process's untouched."""
    from benchmark.commands import kernel_fingerprint as kf

    monkeypatch.delenv(portable.MARK, raising=False)
    seen: dict[str, object] = {}

    def fake_run(cmd, env, **kwargs):
        seen["env"], seen["here"] = env, os.environ.get(portable.MARK)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(kf.subprocess, "run", fake_run)
    kf._child(["state"], "portable")
    assert seen["here"] is None  # this process never took the child's mode
    env = seen["env"]
    assert env[portable.MARK] == "portable" and env["OMP_NUM_THREADS"] == "1"
    assert all(env[k] == v for k, v in portable.PORTABLE_ENV.items())


def test_child_env_reads_the_mode_of_the_environment_it_is_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A native child made from a portable environment drops the portable variables, whatever mode
    this process is in."""
    monkeypatch.delenv(portable.MARK, raising=False)
    base = {"PATH": "/bin", portable.MARK: "portable", **portable.PORTABLE_ENV}
    env = portable.child_env("native", base)
    assert env == {"PATH": "/bin", portable.MARK: "native"}
