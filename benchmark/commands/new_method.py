"""``python -m benchmark new-method NAME``: scaffold a new method, its smoke grid and its tests.

Writes, under ``--out`` (default: the repository root):

- ``methods/NAME.py`` — a complete, working minimal method (FedAvg of SimCLR, written out from the
  shared pieces) with a frozen config; every place where a new algorithm differs is marked
  ``TODO(NAME)``;
- ``tests/methods/test_NAME.py`` — spec tests (loss behaviour, aggregation maths) and the
  conformance check, which pass on the scaffold as written and keep passing once the TODOs are
  filled with the paper's algorithm; one placeholder test is skipped until its TODO is filled;
- ``benchmark/grids/NAME_smoke.yaml`` — a CPU grid on digits that runs the method next to
  fedavg_simclr and no_pretrain.

With ``--plugin`` it writes an installable package instead, into ``--out`` itself (default
``fssl-NAME/`` under the current folder; underscores in NAME become hyphens in the folder and distribution name,
``fed_foo`` → ``fssl-fed-foo/``, and stay in the import package ``fssl_fed_foo``): ``src/fssl_NAME/method.py`` (the same method, registered by its
``fssl_bench.methods`` entry point and importing nothing of the project but ``benchmark.api``),
``tests/test_NAME.py`` (entry point, loss, grid and the full conformance check) and
``grids/NAME_smoke.yaml`` (digits, CPU).

A name that is already registered (built in, or an installed plugin) is refused. Nothing is
overwritten (``--force`` to replace the scaffold's own files).
"""

from __future__ import annotations

import argparse
import keyword
import re
from dataclasses import dataclass
from pathlib import Path

from benchmark.core.errors import UsageError
from benchmark.core.paths import REPO

NAME_RE = re.compile(r"[a-z][a-z0-9_]*")


class ScaffoldError(ValueError):
    pass


@dataclass(frozen=True)
class Scaffold:
    name: str
    class_name: str
    files: dict[Path, str]


CLASS_RE = re.compile(r"[A-Z][A-Za-z0-9]*")


def class_name_of(name: str, class_name: str | None = None) -> str:
    """``class_name`` when given (``--class-name FedSimSiam``), else the CamelCase of the snake_case
    name (``fed_sim_siam`` → ``FedSimSiam``; ``fedsimsiam`` → ``Fedsimsiam``: no word guessing)."""
    if class_name is not None:
        if not CLASS_RE.fullmatch(class_name) or keyword.iskeyword(class_name):
            raise ScaffoldError(
                f"class name {class_name!r} must be a CamelCase identifier (e.g. 'FedSimSiam')"
            )
        return class_name
    return "".join(part[:1].upper() + part[1:] for part in name.split("_") if part)


def validate_name(name: str, *, check_registry: bool = True) -> None:
    if not NAME_RE.fullmatch(name) or keyword.iskeyword(name) or name in ("base", "test"):
        raise ScaffoldError(
            f"method name {name!r} must be a lower-case snake_case identifier (e.g. 'fedfoo')"
        )
    if check_registry:
        from benchmark.contracts.registries import METHODS, load_builtins

        load_builtins()
        if name in METHODS:
            raise ScaffoldError(
                f"method {name!r} is already registered (as {METHODS.canonical(name)!r})"
            )


METHOD_TEMPLATE = '''"""{cls} (TODO({name}): authors, venue, arXiv id; the sections this file implements).

Scaffolded by ``python -m benchmark new-method {name}{plugin_flag}``. As generated it is a complete, working FedAvg-SimCLR:
each sampled client starts from the global weights, runs the local epochs of SimCLR (NT-Xent) and uploads its
weights; the server averages them weighted by client size. Replace the parts marked ``TODO({name})`` with the
paper's algorithm and mark every departure from the paper with a ``# DEVIATION: why`` comment on its line
(methods/README.md collects them).

Rules (docs/design.md §3-4): import only from {import_rule}; everything that must survive a
round lives in ``ServerState`` / ``ClientState`` (a fresh instance given the same states continues identically);
all randomness comes from ``ctx.generator`` / ``ctx.rng`` or ``scoped_torch_seed``; every tensor sent must match
``payload_up`` / ``payload_down``, and ``declared_traffic`` states their bytes. Check with ``python -m benchmark check-method {name}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

import torch
from torch import nn

from benchmark.api import (
{methods_import}    AugmentConfig,
    ClientData,
    ClientState,
    ComponentSpec,
    Encoder,
    InputSpec,
    MethodBase,
    Payload,
    Requirement,
    RoundContext,
    Sent,
    ServerState,
    ServerTensors,
    Stream,
    TrafficContext,
    UnlabeledView,
    adam,
    aggregation_weights,
    build_backbone,
    load_tensors,
    mlp_head,
    ntxent_2b,
    run_local_epochs,
    scoped_torch_seed,
    tensors_of,
    two_views,
    weighted_average,
)


@dataclass(frozen=True, kw_only=True)
class {cls}Config:
    """Hyperparameters, defaults from the paper (TODO({name}): cite the table/section of each default)."""

    tau: float = 0.5  # τ, NT-Xent temperature
    lr: float = 1e-3  # Adam learning rate
    weight_decay: float = 1e-6
    batch_size: int = 256
    proj_dim: int | None = None  # projector output; None = the backbone's feature dimension
    augment: AugmentConfig = field(default_factory=AugmentConfig)

    def __post_init__(self) -> None:
        if self.tau <= 0 or self.lr <= 0 or self.batch_size < 2:
            raise ValueError("tau and lr must be > 0 and batch_size >= 2")


class {cls}Net(nn.Module):
    def __init__(self, encoder: nn.Module, projector: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder
        self.projector = projector

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.projector(self.encoder(x))


def local_loss(z1: torch.Tensor, z2: torch.Tensor, tau: float) -> torch.Tensor:
    """The client objective on two views' projections (TODO({name}): your loss; keep it a pure function)."""
    return ntxent_2b(z1, z2, tau)


{register}class {cls}(MethodBase):
    """{cls} (TODO({name}): paper, venue, sections implemented)."""

    name: ClassVar[str] = "{name}"
    version: ClassVar[str] = "1"  # bump whenever numbers can change (part of every cell id)
    Config: ClassVar[type] = {cls}Config
    requires: ClassVar[frozenset[Requirement]] = frozenset()  # e.g. {{Requirement.PUBLIC_DATA}}
    payload_up: ClassVar[tuple[str, ...]] = ("encoder.*", "projector.*")  # fnmatch patterns of uploaded tensors
    payload_down: ClassVar[tuple[str, ...]] = ("encoder.*", "projector.*")
    # the tiny CPU cells of check-method and of the smoke grid (`smoke: true`): backbone
    # family, public split, small heads (no paper-size projector on the width-4 backbone)
    smoke_settings: ClassVar[dict] = {{"method": {{"proj_dim": 16}}}}
    # config fields whose change moves nothing in the first round of check-method's tiny cell, each
    # with why and where it does (check-method's live_settings verifies every declaration; every
    # other field must move the round). AugmentConfig declares its own (the blur's settings act only
    # with blur_p > 0), inherited here: declare only fields of {cls}Config, e.g.
    # "momentum": Inert("read only under optimizer sgd", live_with={{"optimizer": "sgd"}})
    inert_settings: ClassVar[dict] = {{}}

    def __init__(self, cfg: {cls}Config, backbone: ComponentSpec, inputs: InputSpec) -> None:
        super().__init__(cfg, backbone, inputs)
        self._net: {cls}Net | None = None  # a working module, reloaded from tensors at every use
        self._device: torch.device | None = None

    def build(self) -> {cls}Net:
        encoder, feat_dim = build_backbone(self.backbone.name, dict(self.backbone.params))
        out = self.cfg.proj_dim or feat_dim
        return {cls}Net(encoder, mlp_head(feat_dim, feat_dim, out))

    def net(self, device: torch.device) -> {cls}Net:
        if self._net is None or self._device != device:
            with scoped_torch_seed(0, Stream.INIT, 0):  # overwritten by load_tensors before every use
                self._net = self.build().to(device)
            self._device = device
        return self._net

    # ---- hooks (docs/design.md §3; benchmark/contracts/method.py) --------------------------------------------------------------------
    def init_server(self, ctx: RoundContext) -> ServerState:
        with scoped_torch_seed(ctx.seed, Stream.INIT):
            net = self.build()
        return ServerState(model=tensors_of(net))  # TODO({name}): server-side extras go in ServerState.extra

    def init_client(self, client_id: int, server: ServerState) -> ClientState:
        return ClientState()  # TODO({name}): persistent local models (e.g. a local target network) go here

    def broadcast(self, server: ServerState, ctx: RoundContext) -> Payload:
        return Payload(dict(server.model))

    def declared_traffic(self, tensors: ServerTensors, at: TrafficContext) -> Sent | None:
        """What one sampled client uploads and receives in round ``at.round``, in bytes: here the whole
        model both ways (``tensors``: the shapes of the cell's initial server state). accept derives a
        record's traffic from it; check-method requires it to equal what the runner counts, to the byte.
        TODO({name}): keep it equal to what ``client_update`` and ``broadcast`` send (docs/adding-a-method.md §1)."""
        return Sent(up=tensors.model_bytes(), down=tensors.model_bytes())

    def client_update(
        self, down: Payload, state: ClientState, data: ClientData, ctx: RoundContext
    ) -> tuple[Payload, ClientState]:
        cfg = self.cfg
        net = self.net(ctx.device)
        load_tensors(net, down.tensors)  # TODO({name}): combine with state.tensors if clients keep local models
        net.train()
        # benchmark.api.adam: torch's Adam, fused under the portable kernel mode (its default takes its
        # square root in MKL's vector maths, whose bits depend on the CPU's vendor)
        opt = adam([p for p in net.parameters() if p.requires_grad], lr=cfg.lr,
                   weight_decay=cfg.weight_decay)
        view = data.train

        def step(batch: torch.Tensor) -> torch.Tensor:
            v1, v2 = two_views(batch, cfg.augment, ctx.generator, mean=view.mean, std=view.std)
            z1, z2 = net(torch.cat([v1, v2])).chunk(2)
            return local_loss(z1, z2, cfg.tau)

        stats = run_local_epochs(view, step, opt, ctx, batch_size=cfg.batch_size, epochs=ctx.local_epochs)
        up = tensors_of(net)  # TODO({name}): send only what the paper sends; declare it in payload_up and declared_traffic
        return (Payload(up, num_examples=data.num_examples, metrics=stats.as_dict()),
                ClientState(last_round=ctx.round))

    def server_aggregate(
        self, server: ServerState, ups: Mapping[int, Payload], ctx: RoundContext, public: UnlabeledView | None
    ) -> ServerState:
        if not ups:
            return server
        payloads = [ups[k] for k in sorted(ups)]  # client-id order, never completion order
        weights = aggregation_weights([p.num_examples for p in payloads], "num_examples")
        model = weighted_average([p.tensors for p in payloads], weights)  # TODO({name}): your server step
        return ServerState(model={{**server.model, **model}}, extra=server.extra)

    def encoder(self, server: ServerState, clients: Mapping[int, ClientState] | None = None) -> Encoder:
        net = self.build()
        load_tensors(net, server.model)
        return self.export(net.encoder.eval())  # a complete Encoder: feature size, fingerprint, input statistics
'''

# the loss test both test templates share (no braces: inserted by .format as a value)
LOSS_TEST = '''def test_local_loss_decreases_under_gradient_steps() -> None:
    """The client objective is a proper loss: a few gradient steps on free projections lower it."""
    g = torch.Generator().manual_seed(0)
    z1 = torch.randn(16, 8, generator=g, requires_grad=True)
    z2 = torch.randn(16, 8, generator=g, requires_grad=True)
    opt = torch.optim.SGD([z1, z2], lr=0.5)
    first = float(module.local_loss(z1, z2, 0.5).detach())
    for _ in range(20):
        opt.zero_grad()
        module.local_loss(z1, z2, 0.5).backward()
        opt.step()
    assert float(module.local_loss(z1, z2, 0.5).detach()) < first
'''

TEST_TEMPLATE = '''"""Spec tests of {name} (scaffolded by ``python -m benchmark new-method {name}``).

Each item of the paper's algorithm gets a test that asserts something meaningful about a pure function; the
registry smoke tests (tests/methods/test_registry_smoke.py) and the conformance check below cover the hooks.
"""

from __future__ import annotations

import importlib

import pytest
import torch

from benchmark.commands.check_method import check_method
from benchmark.contracts.registries import METHODS, load_builtins

load_builtins()
module = importlib.import_module("methods.{name}")


def test_registered() -> None:
    assert METHODS.get("{name}") is module.{cls}
    assert module.{cls}.Config().tau > 0  # the defaults build


{loss_test}

def test_aggregating_identical_clients_is_the_identity() -> None:
    from methods._shared.aggregate import weighted_average

    state = {{"w": torch.arange(4.0)}}
    out = weighted_average([state, state], [3, 5])
    torch.testing.assert_close(out["w"], state["w"])


@pytest.mark.skip(reason="TODO({name}): assert one equation of the paper on a hand-computed example")
def test_paper_equation() -> None:
    raise NotImplementedError


@pytest.mark.slow
def test_conformance() -> None:
    report = check_method("{name}")
    assert report.ok, report.format()
'''

GRID_TEMPLATE = """# CPU smoke grid for {name} (scaffolded): digits, micro backbone, 2 clients, next to FedAvg-SimCLR and the
# random-init reference. Run:  python -m benchmark run --grid {grid_ref} --root runs --no-wandb
name: {name}_smoke
description: "{name} on digits next to fedavg_simclr and no_pretrain (CPU, minutes; a pipeline check, not a result)"
base:
  dataset: digits
  backbone: {{name: resnet_micro, width: 4}}
  partition: iid
  fl: {{num_clients: 2, participation: 1.0, rounds: 2, local_epochs: 1}}
  tasks: [knn]
method_common: {{batch_size: 16}}
smoke: true  # each method's smoke_settings (small heads), as check-method
axes:
  method: [{name}, fedavg_simclr, no_pretrain]
  seed: [0]
"""


def method_source(name: str, *, plugin: bool = False, class_name: str | None = None) -> str:
    """The method file: in the repository it registers itself with ``@METHODS.register``; in a
    plugin package the entry point registers it, and it imports nothing of the project but
    ``benchmark.api``."""
    cls = class_name_of(name, class_name)
    if plugin:
        return METHOD_TEMPLATE.format(
            name=name,
            cls=cls,
            plugin_flag=" --plugin",
            methods_import="",
            import_rule="``benchmark.api``",
            register="",
        )
    return METHOD_TEMPLATE.format(
        name=name,
        cls=cls,
        plugin_flag="",
        methods_import="    METHODS,\n",
        import_rule="``benchmark.api`` and ``methods._shared``",
        register=f'@METHODS.register("{name}")\n',
    )


def render(name: str, class_name: str | None = None) -> Scaffold:
    cls = class_name_of(name, class_name)
    files = {
        Path("methods") / f"{name}.py": method_source(name, class_name=class_name),
        Path("tests") / "methods" / f"test_{name}.py": TEST_TEMPLATE.format(
            name=name, cls=cls, loss_test=LOSS_TEST
        ),
        Path("benchmark") / "grids" / f"{name}_smoke.yaml": GRID_TEMPLATE.format(
            name=name, grid_ref=f"{name}_smoke"
        ),
    }
    return Scaffold(name, cls, files)


PLUGIN_PYPROJECT = """# An out-of-tree fssl-bench method: registered through the entry-point group, no change to fssl-bench.
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "fssl-{dist}"
version = "0.1.0"
description = "{cls}: a federated self-supervised method for fssl-bench"
requires-python = ">=3.10"
dependencies = ["fssl-bench"]

[project.optional-dependencies]
test = ["pytest"]

[project.entry-points."fssl_bench.methods"]
{name} = "fssl_{name}.method:{cls}"

[tool.setuptools.packages.find]
where = ["src"]
"""

PLUGIN_README = """# fssl-{dist}

{cls} as an installed fssl-bench method (scaffolded by `python -m benchmark new-method {name} --plugin`).
`src/fssl_{name}/method.py` imports nothing of fssl-bench but `benchmark.api` (docs/adding-a-method.md lists
what it offers).

    pip install -e '.[test]'                      # registers `{name}` (fssl_bench.methods entry point); [test]: pytest
    python -m benchmark list methods              # {name} is listed
    python -m pytest tests -q                     # its tests, the full conformance check included (~40 s on 2 CPU cores)
    python -m benchmark check-method {name}       # the full conformance check (kNN above random init too)
    python -m benchmark run --grid grids/{name}_smoke.yaml --root runs --no-wandb   # digits, CPU, minutes

Records of its cells carry this distribution's name, version and a digest of its source files.
"""

PLUGIN_TEST_TEMPLATE = '''"""Tests of the {name} plugin (scaffolded by ``python -m benchmark new-method {name} --plugin``).

Run after ``pip install -e '.[test]'``: the method is found through its entry point, exactly as fssl-bench finds
it. The conformance check is ``python -m benchmark check-method {name}`` in full (2 rounds, resume, kNN above
random init; about 25 s on 2 CPU cores); add a test per equation of the paper (TODO({name})).
"""

from __future__ import annotations

from pathlib import Path

import torch

from benchmark.api import METHODS, MethodBase, check_method, expand_grid, load_grid
from fssl_{name} import method as module

GRID = Path(__file__).resolve().parents[1] / "grids" / "{name}_smoke.yaml"


def test_registered_through_the_entry_point() -> None:
    assert METHODS.get("{name}") is module.{cls}
    assert issubclass(module.{cls}, MethodBase) and module.{cls}.Config().tau > 0  # the defaults build


{loss_test}

def test_smoke_grid_runs_the_method() -> None:
    cells = expand_grid(load_grid(GRID))
    assert "{name}" in {{cell.method.name for cell in cells}}


def test_conformance() -> None:
    report = check_method("{name}")
    assert report.ok, report.format()
'''

PLUGIN_GRID_TEMPLATE = """# Smoke grid for the {name} plugin (scaffolded): the embedded digits data (16x16), a width-4 micro backbone,
# 2 clients, 1 round, next to the random-init reference. Run:
#   python -m benchmark run --grid grids/{name}_smoke.yaml --root runs --no-wandb
name: {name}_smoke
description: "{name} on digits next to no_pretrain (CPU, minutes; a pipeline check, not a result)"
base:
  dataset: {{name: digits, size: 16}}
  backbone: {{name: resnet_micro, width: 4}}
  partition: iid
  fl: {{num_clients: 2, participation: 1.0, rounds: 1, local_epochs: 1}}
  tasks: [knn]
method_common: {{batch_size: 16}}
smoke: true  # the method's smoke_settings (small heads), as check-method; not its paper defaults
axes:
  method: [{name}, no_pretrain]
  seed: [0]
"""


PLUGIN_GITIGNORE = """# what `pip install` / `pip wheel` / `python -m build` leave in the source folder (setuptools builds
# in place: build/ and the egg-info are its work folders, dist/ the wheels)
build/
dist/
*.egg-info/
__pycache__/
runs/
"""


def render_plugin(name: str, class_name: str | None = None) -> Scaffold:
    """An installable package (paths relative to the package folder): the method (registered by
    its entry point, importing only ``benchmark.api``), its tests and a smoke grid."""
    cls = class_name_of(name, class_name)
    dist = name.replace("_", "-")
    return Scaffold(
        name,
        cls,
        {
            Path("pyproject.toml"): PLUGIN_PYPROJECT.format(name=name, cls=cls, dist=dist),
            Path("README.md"): PLUGIN_README.format(name=name, cls=cls, dist=dist),
            Path(".gitignore"): PLUGIN_GITIGNORE,
            Path("src") / f"fssl_{name}" / "__init__.py": f'"""fssl-bench method {name}."""\n',
            Path("src") / f"fssl_{name}" / "method.py": method_source(
                name, plugin=True, class_name=class_name
            ),
            Path("tests") / f"test_{name}.py": PLUGIN_TEST_TEMPLATE.format(
                name=name, cls=cls, loss_test=LOSS_TEST
            ),
            Path("grids") / f"{name}_smoke.yaml": PLUGIN_GRID_TEMPLATE.format(name=name),
        },
    )


def write_scaffold(
    name: str,
    out: Path | None = None,
    *,
    force: bool = False,
    check_registry: bool = True,
    plugin: bool = False,
    class_name: str | None = None,
) -> list[Path]:
    """Write the scaffold of ``name`` under ``out`` (default: the repository); returns the files
    written. A plugin package is written into ``out`` itself (``pyproject.toml`` directly in it),
    or, without ``out``, into ``fssl-NAME/`` under the current folder."""
    validate_name(name, check_registry=check_registry)
    if plugin:
        root = Path(out) if out is not None else Path.cwd() / plugin_folder(name)
    else:
        root = Path(out) if out is not None else REPO
    scaffold = render_plugin(name, class_name) if plugin else render(name, class_name)
    targets = [root / rel for rel in scaffold.files]
    existing = [t for t in targets if t.exists()]
    if existing and not force:
        raise ScaffoldError(
            f"{', '.join(map(str, existing))} exist(s); nothing written (--force replaces them)"
        )
    for rel, text in scaffold.files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return targets


def plugin_folder(name: str) -> str:
    """The default folder (and distribution name) of a plugin: ``fed_foo`` -> ``fssl-fed-foo``."""
    return f"fssl-{name.replace('_', '-')}"


def next_steps(name: str, plugin: bool = False, where: str | None = None) -> str:
    if plugin:
        pkg = (where or plugin_folder(name)).rstrip("/")
        return "\n".join(
            [
                f"next steps for {name} (an installable package in {pkg}/):",
                f"  1. fill the TODO({name}) markers in {pkg}/src/fssl_{name}/method.py (import only benchmark.api)",
                f"  2. pip install -e '{pkg}[test]'   (registers it, python -m benchmark list methods shows it;"
                " [test] adds pytest)",
                f"  3. python -m pytest {pkg}/tests -q   (its tests, the conformance check included: under a minute)",
                f"  4. python -m benchmark check-method {name}",
                f"  5. python -m benchmark run --grid {pkg}/grids/{name}_smoke.yaml --root runs --no-wandb",
            ]
        )
    return "\n".join(
        [
            f"next steps for {name}:",
            f"  1. fill the TODO({name}) markers in methods/{name}.py (mark departures from the paper '# DEVIATION:')",
            f"  2. python -m pytest tests/methods/test_{name}.py tests/methods/test_registry_smoke.py -k {name}",
            f"  3. python -m benchmark check-method {name}",
            "  4. add a row to methods/README.md (python -m benchmark.commands.method_table --check lists what is missing)",
            f"     and the paper's numbers to results/reference/{name}.yaml",
            f"  5. python -m benchmark run --grid {name}_smoke --no-wandb, then the main grid;"
            " python -m benchmark submit <records> --track <id> --out bundle.tar.gz",
        ]
    )


def cmd_new_method(args: argparse.Namespace) -> int:

    try:
        written = write_scaffold(
            args.name,
            Path(args.out) if args.out else None,
            force=args.force,
            plugin=args.plugin,
            class_name=args.class_name,
        )
    except ScaffoldError as exc:
        raise UsageError(str(exc)) from None
    for path in written:
        print(f"wrote {path}")
    print(next_steps(args.name, plugin=args.plugin, where=args.out))
    return 0
