"""Evaluation runs in the trusted parent, on the exported encoder only (issue 60 item 1).

``accept`` has the method's own code export its encoder inside the box and rebuilds the modules
here from trusted classes only (``benchmark.submission.exported``): a plugin's own module class,
whose ``forward`` would run where the test split and its labels are, is refused in one line and
never runs in the accepting process. A plugin whose encoder is a registered backbone, and every
built-in method, is scored with exactly the numbers of the in-process path.

Every cell here is the smallest the pipeline runs: 2 clients, 1 round, 8-pixel digits, kNN only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.benchmark.test_box import PLUGIN, TRACKS, _bundle, _dist, _tiny
from tests.helpers import needs_bubblewrap

pytestmark = needs_bubblewrap

# A FedAvg-SimCLR whose exported encoder wraps the backbone in its own module class. Armed (the
# variable set, as in the accepting process of the test below), the wrapper's forward does what a
# hostile plugin would at scoring time: reads the labels of the test split through the harness's
# own loader, writes them to a file, and ends the process with exit code 0.
SPY = '''"""An encoder whose forward misbehaves at scoring time."""
import os

import torch
from torch import nn

from methods.fedavg_simclr import FedAvgSimCLR


class Spy(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.feat_dim = inner.feat_dim

    def forward(self, x):
        mark = os.environ.get("FSSL_SPY_MARK")
        if mark:
            from benchmark.data.datasets import load_dataset_splits

            ds = load_dataset_splits("digits", {"size": 8}, None)
            with open(mark, "w") as fh:
                fh.write(str(ds.test.labels.tolist()))
            os._exit(0)
        return self.inner(x)


class SpyMethod(FedAvgSimCLR):
    name = "spy"
    version = "1"

    def encoder(self, server, clients=None):
        plain = super().encoder(server, clients)
        return self.export(Spy(plain.module), plain.feat_dim)
'''

# A FedAvg-SimCLR that reads a credential from its environment (and fails the checks when it finds
# one) and plants a file in the home folder of whoever runs it.
CREDS = """import os

from methods.fedavg_simclr import FedAvgSimCLR

KEY = os.environ.get("WANDB_API_KEY")


class Creds(FedAvgSimCLR):
    name = "creds"
    version = "1"

    def client_update(self, down, state, data, ctx):
        if KEY:
            raise RuntimeError(f"read the key {KEY}")
        with open(os.path.join(os.path.expanduser("~"), "planted.txt"), "w") as fh:
            fh.write("planted")
        return super().client_update(down, state, data, ctx)
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory):
    """Installed distributions on the import path (found through their entry points, here and in
    the box): fssl_peek (the honest plugin of test_box), fssl_spy, fssl_creds, fssl_exits."""
    from benchmark.contracts.registries import METHODS, load_builtins

    load_builtins()
    where = tmp_path_factory.mktemp("site")
    _dist(where, "fssl_peek", {"fssl_peek/__init__.py": PLUGIN}, {"honest": "fssl_peek:Honest"})
    _dist(where, "fssl_spy", {"fssl_spy/__init__.py": SPY}, {"spy": "fssl_spy:SpyMethod"})
    _dist(where, "fssl_creds", {"fssl_creds/__init__.py": CREDS}, {"creds": "fssl_creds:Creds"})
    exits = "import os\nos._exit(0)\n"
    _dist(where, "fssl_exits", {"fssl_exits/__init__.py": exits}, {"exits": "fssl_exits:M"})
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(where))
        for attr in ("_items", "_targets", "_origin", "_clashes"):
            mp.setattr(METHODS, attr, dict(getattr(METHODS, attr)))
        mp.setattr(METHODS, "_plugins_loaded", False)
        yield where
    for name in [m for m in sys.modules if m.startswith(("fssl_peek", "fssl_spy", "fssl_"))]:
        del sys.modules[name]


@pytest.fixture(scope="module")
def tracks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tracks") / "tracks.yaml"
    path.write_text(TRACKS)
    return path


def test_a_plugin_encoder_whose_forward_reads_labels_and_exits_cannot_touch_accept(
    site: Path, tracks: Path, tmp_path: Path
) -> None:
    """Accepted in a separate process with the spy armed: on the old path its forward ran there
    (labels written to a file, exit 0 with nothing said); now its class is refused in one line
    (exit 2), nothing is written and its forward never ran in the accepting process."""
    bundle = _bundle(["spy"], tmp_path, tracks)  # trained and scored here, the spy not armed
    mark, results = tmp_path / "labels.txt", tmp_path / "results"
    env = {
        **os.environ,
        "FSSL_SPY_MARK": str(mark),
        "PYTHONPATH": os.pathsep.join([str(site), *sys.path]),
    }
    done = subprocess.run(
        [sys.executable, "-m", "benchmark", "accept", str(bundle), "--results", str(results)]
        + ["--tracks", str(tracks)],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
        check=False,
    )
    assert not mark.exists(), "the plugin's forward ran in the accepting process"
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "fssl_spy.Spy" in line and "not a class of PyTorch" in line, line
    assert not results.exists()


def _checks(record, pre, encoder=None) -> list[tuple]:
    from benchmark.submission.reevaluation import reevaluate

    checks, fingerprint = reevaluate(record, pre, encoder=encoder)
    return [fingerprint, *((c.task, c.key, c.reproduced) for c in checks)]


def test_registered_backbones_score_bit_for_bit_as_in_process(site: Path, tmp_path: Path) -> None:
    """A plugin whose encoder is a registered backbone (honest) and built-ins of every export
    shape (members, client models, extras, a ViT) re-evaluated on the encoder exported in the box
    and rebuilt here: every reproduced value equal, bit for bit, to the in-process path's."""
    from benchmark.commands.smoke import cell_threads, smoke_cell
    from benchmark.engine.pretrained import Pretrained
    from benchmark.engine.runner import run_cell
    from benchmark.submission.exported import export_in_box

    # one boxed export per dataset (fedmae's ViT takes the 16-pixel digits of its smoke cell)
    batches = [
        [_tiny(method) for method in ("honest", "featarc", "local_ssl")],
        [smoke_cell("fedmae", tasks=["knn"])],
    ]
    with cell_threads():
        for cells in batches:
            items = []
            for cell in cells:
                record = run_cell(cell, tmp_path, device="cpu")
                assert record is not None and record.scores
                final = tmp_path / "_pretrain" / record.pretrain_key / "final.pt"
                items.append((record, Pretrained.load(final, untrusted=True)))
            exported = export_in_box(items, data_root=None, max_bytes=1 << 30)
            for record, pre in items:
                encoder = exported[record.cell_id]
                assert not isinstance(encoder, list), encoder
                assert _checks(record, pre, encoder) == _checks(record, pre), record.method


def test_the_parent_rebuilds_only_trusted_classes(tmp_path: Path) -> None:
    """The allow-list: PyTorch's and the project's module classes pass; a class of another
    package, one not imported here, a function and a plugin's class posing as built-in do not."""
    from torch import nn

    from benchmark.submission.exported import trusted_class

    assert trusted_class("torch.nn.modules.conv.Conv2d") is nn.Conv2d
    assert trusted_class("benchmark.building_blocks.backbones.ResNet") is not None
    assert trusted_class("fssl_spy.Spy") is None
    assert trusted_class("torch.nn.functional.relu") is None  # not a class
    assert trusted_class("os.system") is None
    assert trusted_class("benchmark.never_imported_module.Thing") is None
    assert trusted_class("torch.nn.modules.conv.Conv2d.__init__") is None


def _tiny_export_fields() -> tuple[object, dict]:
    """An 8-pixel, one-channel input spec and the plain fields of an encoder made for it."""
    from benchmark.contracts.method import InputSpec

    inputs = InputSpec(image_size=8, mean=(0.5,), std=(0.5,), num_classes=10)
    fields = {
        "feat_dim": 4,
        "backbone": "x",
        "input_size": 8,
        "mean": [0.5],
        "std": [0.5],
        "member_rule": "mean",
        "designated_member": 0,
        "member_weights": [],
        "client_index": [],
    }
    return inputs, fields


def _local_module():
    from torch import nn

    class Local(nn.Linear):  # a class of this test module: not a trusted package
        pass

    Local.__qualname__ = "Local"
    globals()["Local"] = Local
    return Local(3, 4)


def test_an_exported_file_naming_an_untrusted_class_is_refused_before_it_is_unpickled(
    tmp_path: Path,
) -> None:
    """A file whose modules include a class the parent does not trust is refused on the names
    it holds (``get_unsafe_globals_in_checkpoint``), before anything of it is unpickled; so is a
    module that carries more bytes than the re-evaluation's budget."""
    import torch
    from torch import nn

    from benchmark.submission.exported import ExportRefused, describe, load_exported

    inputs, fields = _tiny_export_fields()
    modules = {"module": _local_module(), "members": [], "classifier": None}
    torch.save({**modules, "extras": {}, "client_models": []}, tmp_path / "e.pt")
    with pytest.raises(ExportRefused, match="test_evalbox.*Local.*not a class of PyTorch"):
        load_exported(tmp_path / "e.pt", fields, max_bytes=1 << 20, inputs=inputs, what="t")
    seq = nn.Sequential(nn.Linear(64, 4))
    torch.save({**modules, "module": seq, "extras": {}, "client_models": []}, tmp_path / "e.pt")
    encoder = load_exported(tmp_path / "e.pt", fields, max_bytes=1 << 20, inputs=inputs, what="t")
    assert torch.equal(encoder.module[0].weight, seq[0].weight)
    with pytest.raises(ExportRefused, match="holds 1,040 bytes, more than the 1,000"):
        load_exported(tmp_path / "e.pt", fields, max_bytes=1000, inputs=inputs, what="t")
    bad = json.loads(json.dumps(fields)) | {"member_rule": "max_over_everything"}
    with pytest.raises(ExportRefused, match="member_rule"):
        load_exported(tmp_path / "e.pt", bad, max_bytes=1 << 20, inputs=inputs, what="t")
    assert describe(encoder)[1] == fields


def _check_method(
    home: Path, name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str]:
    """``check-method NAME`` run by this process, as the maintainer's shell would: a key in its
    environment, ``home`` its home and working folder. The plugin's code runs only in the boxed
    child (a fresh process with an environment built from nothing), which is what is tested; the
    parent is this process rather than a second Python importing torch and the registry (seconds of
    CPU) for the same code path. Should the parent ever import the plugin, its module would read
    the key here and plant its file in ``home``, and the assertions below would see both."""
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("WANDB_API_KEY", "the-maintainers-key")
    monkeypatch.chdir(home)
    from benchmark.cli import main

    capsys.readouterr()
    code = main(["check-method", name, "--rounds", "1", "--no-live", "--no-knn"])
    out, err = capsys.readouterr()
    return code, out, err


def test_check_method_runs_a_plugin_in_the_box(
    site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """check-method on a stranger's plugin (issue 52 item 3): the plugin sees no credential and
    plants nothing in the maintainer's home (its checks pass in the box's own); a plugin that
    exits at import is a refusal in one line (exit 2), not exit 0 with nothing said."""
    home = tmp_path / "home"
    home.mkdir()
    code, out, err = _check_method(home, "creds", monkeypatch, capsys)
    assert code == 0 and "creds: all checks passed" in out, out + err
    assert not (home / "planted.txt").exists()
    assert not [m for m in sys.modules if m.startswith("fssl_creds")]
    # the traffic declaration (inherited from fedavg_simclr) is checked in the box too
    assert "PASS  declared_traffic" in out and "byte for byte in 1 round " in out
    code, out, err = _check_method(home, "exits", monkeypatch, capsys)
    assert code == 2, out + err
    (line,) = err.strip().splitlines()
    assert "check-method exits in the box" in line and "without a result" in line, line


def test_check_method_refuses_a_plugin_where_no_box_runs_unless_unboxed(
    site: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from benchmark.cli import main
    from benchmark.submission import box

    monkeypatch.setattr(box, "box_unavailable", lambda: "no user namespaces (test)")
    assert main(["check-method", "honest", "--rounds", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "none can run here" in err[0] and "--unboxed" in err[0], err


def test_the_parent_trusts_only_a_valid_check_report() -> None:
    from benchmark.commands.check_method import report_of
    from benchmark.core.errors import UsageError

    good = {"name": "interface", "status": "pass", "detail": "ok", "seconds": 1.0}
    assert report_of({"method": "m", "results": [good]}, "m").ok
    for bad in (
        {"method": "m", "results": []},
        {"method": "m", "results": [{**good, "status": "PASS"}]},
        {"method": "m", "results": [{**good, "seconds": float("nan")}]},
        {"method": "m", "results": [{**good, "extra": 1}]},
        {"method": 1, "results": [good]},
    ):
        with pytest.raises(UsageError, match="not a report"):
            report_of(bad, "m")
    shown = report_of({"method": "m", "results": [{**good, "detail": "a\u202eb"}]}, "m")
    assert "\u202e" not in shown.format()


def test_an_exported_module_is_only_what_its_class_builds(tmp_path: Path) -> None:
    """Trusted classes do not make a trusted file: a module whose instance dictionary shadows a
    parameter (an instance attribute wins over ``_parameters``, so the checked and fingerprinted
    tensor would not be the one computed with), holds a module outside ``_modules``, carries a
    hook, or shadows ``forward`` is refused; so is an archive with a compressed member (which
    could inflate past the file's size), before torch reads it."""
    import zipfile

    import torch
    from torch import nn

    from benchmark.submission.exported import ExportRefused, load_exported

    inputs, fields = _tiny_export_fields()

    def saved(module: nn.Module) -> Path:
        path = tmp_path / "e.pt"
        torch.save(
            {
                "module": module,
                "members": [],
                "classifier": None,
                "extras": {},
                "client_models": [],
            },
            path,
        )
        return path

    def load(path: Path) -> object:
        return load_exported(path, fields, max_bytes=1 << 20, inputs=inputs, what="t")

    honest = nn.Sequential(nn.Linear(64, 4))
    assert torch.equal(load(saved(honest)).module[0].weight, honest[0].weight)

    shadow = nn.Sequential(nn.Linear(64, 4))
    shadow[0].__dict__["weight"] = torch.zeros(4, 64)
    with pytest.raises(ExportRefused, match="module '0' holds 'weight' outside"):
        load(saved(shadow))
    stowed = nn.Sequential(nn.Linear(64, 4))
    stowed.__dict__["side"] = nn.Linear(64, 4)
    with pytest.raises(ExportRefused, match=r"'\(root\)' holds 'side' outside"):
        load(saved(stowed))
    hooked = nn.Sequential(nn.Linear(64, 4))
    hooked[0]._forward_hooks[0] = nn.Identity()
    with pytest.raises(ExportRefused, match="carries a forward_hooks entry"):
        load(saved(hooked))
    forward = nn.Sequential(nn.Linear(64, 4))
    forward.__dict__["forward"] = 3
    with pytest.raises(ExportRefused, match="shadows 'forward'"):
        load(saved(forward))

    path = saved(honest)
    with zipfile.ZipFile(path) as zf:
        members = [(i.filename, zf.read(i)) for i in zf.infolist()]
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in members:
            zf.writestr(name, data)
    with pytest.raises(ExportRefused, match="compressed member"):
        load(path)
