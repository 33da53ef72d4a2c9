"""Vendor-independent maths under the portable mode (benchmark.portable.math_ops) and the kernel
fingerprint (``verify --kernels``: benchmark.portable.ops, census, fingerprint).
docs/reproducibility.md says what they are for."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import yaml
from torch.utils._python_dispatch import TorchDispatchMode

from benchmark.commands import kernel_fingerprint as kf
from benchmark.portable import math_ops as portable_math
from benchmark.portable import mode as portable
from benchmark.portable.ops import call_of, replay, shape_key

REPO = Path(__file__).resolve().parents[3]
# Hardware, not a failing feature: the portable mode (and so a census under it) exists only on
# x86-64 CPUs with AVX2 and FMA; on another CPU the mode itself says it does not apply.
_NOT_HERE = portable.not_applicable("cpu")
needs_mode = pytest.mark.skipif(
    _NOT_HERE is not None,
    reason=f"needs an x86-64 CPU with AVX2 and FMA, where the portable kernel mode applies: {_NOT_HERE}",
)


class _Ops(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.vml: list[str] = []
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        if portable_math.calls_vml(str(func), args):
            self.vml.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.fixture
def portable_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process reports the portable mode (what portable_math reads); torch's kernels are not
    switched, which these tests do not need: they check which kernels are called."""
    monkeypatch.setenv(portable.MARK, portable.PORTABLE)


def test_portable_maths_calls_no_vector_maths_and_agrees_with_torch(portable_process) -> None:
    x = (torch.arange(1, 4100, dtype=torch.float32) / 97.0).reshape(-1)
    y = torch.linspace(1.0, 1e10, 1000, dtype=torch.float64)
    with _Ops() as seen:
        e, s, lg = portable_math.exp(x / 50 - 20), portable_math.sqrt(x), portable_math.log10(y)
    assert seen.vml == [], seen.vml
    torch.testing.assert_close(e, torch.exp(x / 50 - 20), rtol=1.2e-7, atol=0)
    torch.testing.assert_close(s, torch.sqrt(x), rtol=1.2e-7, atol=0)
    torch.testing.assert_close(lg, torch.log10(y), rtol=1e-15, atol=0)
    assert portable_math.sqrt(torch.zeros(3)).tolist() == [0.0, 0.0, 0.0]
    with _Ops() as native_calls:  # torch's own calls, seen by the same mode, are VML calls
        torch.sqrt(x)
    assert native_calls.vml == ["aten.sqrt.default"]


def test_native_processes_keep_torchs_own_operations(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(portable.MARK, portable.NATIVE)
    x = torch.arange(1, 100, dtype=torch.float32)
    assert torch.equal(portable_math.sqrt(x), torch.sqrt(x))
    assert torch.equal(portable_math.exp(x / 10), torch.exp(x / 10))
    p = [torch.nn.Parameter(torch.ones(3))]
    assert portable_math.adam(p, lr=0.1).defaults["fused"] is None
    assert portable_math.adamw(p, lr=0.1).defaults["fused"] is None


def test_adam_and_adamw_are_fused_under_the_mode_and_take_no_vml_square_root(
    portable_process,
) -> None:
    params = [torch.nn.Parameter(torch.arange(1.0, 1000.0)), torch.nn.Parameter(torch.ones(7, 3))]
    groups = [{"params": params[:1]}, {"params": params[1:], "weight_decay": 0.0}]
    for opt in (portable_math.adam(params, lr=1e-2), portable_math.adamw(groups, lr=1e-2)):
        assert opt.defaults["fused"] is True
        for p in params:
            p.grad = torch.full_like(p, 0.5)
        with _Ops() as seen:
            opt.step()
        assert seen.vml == [] and any("_fused_adam" in op for op in seen.ops), seen.ops


def test_the_cell_identity_carries_the_modes_revision() -> None:
    from benchmark.commands.run import load_cells
    from benchmark.contracts.cell import Cell
    from benchmark.core.errors import UsageError

    _, cells = load_cells("quickstart", seeds=[0])
    raw = cells[0].to_dict()
    assert raw["kernels"] == "portable" and raw["kernels_revision"] == portable.PORTABLE_REVISION
    older = {**raw, "kernels_revision": 1}
    with pytest.raises(UsageError, match="portable kernels revision 1"):
        Cell.from_dict(older)
    without = {k: v for k, v in raw.items() if k != "kernels_revision"}  # revision 1's records
    with pytest.raises(UsageError, match="revision 1"):
        Cell.from_dict(without)


# (b) one call, written down and replayed


def test_a_replayed_call_is_deterministic_and_sees_shape_stride_and_scalar() -> None:
    a = torch.ones(33, 17)
    b = torch.ones(17, 9)
    mm = call_of(torch.ops.aten.mm.default, (a, b), {})
    assert replay(mm) == replay(json.loads(json.dumps(mm)))  # a JSON round trip keeps the call
    transposed = call_of(torch.ops.aten.mm.default, (a, torch.ones(9, 17).t()), {})
    assert shape_key(torch.ops.aten.mm.default, (a, b), {}) != shape_key(
        torch.ops.aten.mm.default, (a, torch.ones(9, 17).t()), {}
    )
    assert transposed["args"][1]["stride"] == [1, 17]
    # the float argument of pow chooses the kernel (0.5 is a square root), so it is in the key
    x = torch.ones(20)
    assert shape_key(torch.ops.aten.pow.Tensor_Scalar, (x, 0.5), {}) != shape_key(
        torch.ops.aten.pow.Tensor_Scalar, (x, 2.0), {}
    )
    assert shape_key(torch.ops.aten.mul.Tensor, (x, 0.5), {}) == shape_key(
        torch.ops.aten.mul.Tensor, (x, 2.0), {}
    )
    step = torch.tensor(3.0)  # a small tensor is written with its value (Adam's step count)
    assert call_of(torch.ops.aten.add.Tensor, (step, step), {})["args"][0]["values"] == [
        (3.0).hex()
    ]


@pytest.mark.parametrize("selected", range(1, 16))
def test_a_boolean_mask_replays_with_as_many_rows_as_it_selected(selected: int) -> None:
    """``out[mask] = values`` (Orchestra's rotations) is ``index_put_`` with a boolean mask: the
    replayed mask must select as many rows as ``values`` has, whatever the recorded call's count."""
    out, mask = torch.ones(16, 3, 4, 4), torch.zeros(16, dtype=torch.bool)
    mask[16 - selected :] = True
    call = call_of(
        torch.ops.aten.index_put_.default, (out, [mask], torch.ones(selected, 3, 4, 4)), {}
    )
    assert call["args"][1]["L"][0]["count"] == selected
    assert not replay(json.loads(json.dumps(call))).startswith("error")


def _softmax_call() -> dict:
    z = torch.ones(256, 128)
    return call_of(torch.ops.aten._softmax.default, (z, 1, False), {})


def test_the_replay_tells_two_kernels_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    # ATen's vectorised softmax and its scalar one add in other orders: what another CPU's kernels
    # would do, here by choosing ATen's instruction set in the replay process
    calls = [_softmax_call(), call_of(torch.ops.aten.add.Tensor, (torch.ones(99), 1.0), {})]
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")
    plain = kf.replay_calls(calls, portable.NATIVE)
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    avx2 = kf.replay_calls(calls, portable.NATIVE)
    assert plain[0] != avx2[0]  # softmax differs
    assert plain[1] == avx2[1]  # an exact addition does not


# (c) the census, the fingerprint file and verify --kernels, on the smoke grid under the mode


@pytest.fixture(scope="module")
def smoke_fingerprint(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The smoke grid (every method and task but detection, FedMAE also fine-tuned) under the
    portable mode, and its fingerprint made by ``verify --kernels --write``."""
    from benchmark.cli import main

    tmp = tmp_path_factory.mktemp("fingerprint")
    grid = yaml.safe_load((REPO / "benchmark" / "grids" / "smoke.yaml").read_text())
    grid["name"], grid["base"]["kernels"] = "smoke_portable", "portable"
    # a quarter of digits' train split (tests/methods/small_data.py): the census records which
    # kernels each method and task calls; every client still takes several full batches, so a
    # smaller split calls the same operations (a last batch's shape aside), fewer times
    grid["base"]["dataset"] = {"name": "digits", "test_fraction": 0.8}
    methods = [m for m in grid["axes"]["method"] if "coco_detection" not in str(m)]
    for m in methods:
        if isinstance(m, dict) and m["name"] == "fedmae":
            m["with"]["tasks"].append({"name": "finetune", "epochs": 1, "warmup_epochs": 0})
    grid["axes"]["method"] = methods
    path = tmp / "smoke_portable.yaml"
    path.write_text(yaml.safe_dump(grid))
    fp = tmp / "fp.json"
    assert (
        main(["verify", "--kernels", "--write", "--grid", str(path), "--fingerprint", str(fp)]) == 0
    )
    return path, fp


@needs_mode
def test_no_method_or_task_runs_vector_maths_under_the_mode(smoke_fingerprint) -> None:
    from benchmark.contracts.registries import METHODS, load_builtins

    _, fp = smoke_fingerprint
    body = kf.load(fp)
    assert body["vml"] == {}, body["vml"]  # no MKL vector maths: no vendor-dependent bits
    assert body["not_replayable"] == [] and body["not_written"] == {}
    assert body["state"]["mode"] == "portable" and body["state"]["revision"] == 2
    load_builtins()
    grid_methods = {
        m if isinstance(m, str) else m["name"]
        for m in yaml.safe_load(Path(smoke_fingerprint[0]).read_text())["axes"]["method"]
    }
    assert grid_methods == set(METHODS.names()), "the smoke grid must cover every built-in method"
    ops = {c["op"] for c in body["calls"]}
    assert {"aten._fused_adam_.default", "aten._fused_adamw_.default"} <= ops
    assert "aten.convolution.default" in ops and "aten.sqrt.default" not in ops


@needs_mode
def test_verify_kernels_is_same_here_and_names_an_operation_that_differs(
    smoke_fingerprint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from benchmark.cli import main

    _, fp = smoke_fingerprint
    assert main(["verify", "--kernels", "--fingerprint", str(fp), "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "0 differ" in out and "same     aten.convolution.default" in out
    # another CPU, as far as one call is concerned: its digest differs (the file re-sealed)
    body = json.loads(fp.read_text())
    body.pop("integrity")
    i = next(i for i, c in enumerate(body["calls"]) if c["op"] == "aten.addmm.default")
    body["calls"][i]["digest"] = "0" * 16
    other = tmp_path / "other.json"
    kf.write(other, body)
    assert main(["verify", "--kernels", "--fingerprint", str(other), "--device", "cpu"]) == 1
    out = capsys.readouterr().out
    assert "differs  aten.addmm.default  (1 of " in out and ", 1 differ" in out


def test_a_missing_or_edited_fingerprint_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from benchmark.cli import main

    body = {"kind": kf.KIND, "schema": kf.SCHEMA, "calls": [], "kernels": "portable"}
    path = tmp_path / "fp.json"
    kf.write(path, body)
    assert kf.load(path)["calls"] == []
    edited = json.loads(path.read_text())
    edited["calls"] = [{"op": "aten.mm.default", "args": [], "kwargs": {}, "digest": "x"}]
    path.write_text(json.dumps(edited))
    for target, words in ((path, "was edited"), (tmp_path / "none.json", "no kernel fingerprint")):
        assert main(["verify", "--kernels", "--fingerprint", str(target)]) == 2
        err = capsys.readouterr().err.strip()
        assert words in err and len(err.splitlines()) == 1


def test_the_fingerprint_does_not_apply_on_a_gpu_or_another_architecture(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from benchmark.cli import main

    path = tmp_path / "fp.json"
    kf.write(path, {"kind": kf.KIND, "schema": kf.SCHEMA, "calls": [], "kernels": "portable"})
    assert main(["verify", "--kernels", "--fingerprint", str(path), "--device", "cuda"]) == 2
    err = capsys.readouterr().err.strip()
    assert "does not apply here: cuda" in err and len(err.splitlines()) == 1
    monkeypatch.setattr(portable.platform, "machine", lambda: "aarch64")
    assert main(["verify", "--kernels", "--fingerprint", str(path), "--device", "cpu"]) == 2
    assert "not x86-64" in capsys.readouterr().err


def test_verify_without_a_results_folder_says_so_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from benchmark.cli import main

    monkeypatch.chdir(tmp_path)
    for argv in (["verify"], ["verify", "--kernels"]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert "no results folder" in err and len(err.splitlines()) == 1


def test_the_shipped_fingerprint_is_valid_and_says_what_it_covers() -> None:
    """The fingerprint is a census of the quickstart's cells of seeds 0-2 (at most the grid's: one
    made before cells were added covers fewer, and says how many). The records come from one
    machine; where the fingerprint was made on another, docs/reproducibility.md names the records'
    machine and how many cells the fingerprint covers, beside what its replay there gave."""
    from benchmark.commands.run import load_cells

    body = kf.load(REPO / "results" / kf.FINGERPRINT)
    _, cells = load_cells(body["grid"], seeds=body["seeds"])
    assert body["grid"] == "quickstart" and body["seeds"] == [0, 1, 2]
    assert 0 < body["cells"] <= len(cells) and body["kernels"] == "portable"
    assert body["vml"] == {} and body["not_replayable"] == []
    records = list((REPO / "results" / "records" / "v1").rglob("*.json"))
    machines = {json.loads(p.read_text())["env"]["machine"] for p in records}
    assert len(machines) == 1
    machine = machines.pop()
    if body["machine"] != machine:
        doc = " ".join((REPO / "docs" / "reproducibility.md").read_text().split())
        assert machine in doc and f"census of {body['cells']} cells" in doc
    assert os.path.getsize(REPO / "results" / kf.FINGERPRINT) < 4_000_000
