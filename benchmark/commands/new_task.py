"""``python -m benchmark new-task NAME --plugin``: scaffold a downstream task as an installable
package (docs/adding-a-task.md).

Writes into ``--out`` itself (default ``fssl-NAME/`` under the current folder):

- ``pyproject.toml`` — the distribution ``fssl-NAME`` and its entry point in ``fssl_bench.tasks``;
- ``src/fssl_NAME/task.py`` — a complete, working frozen-feature task (nearest class centroid on
  the encoder's features, read with ``benchmark.api.encoder_features``), its frozen config and its
  protocol card built in code; ``TODO(NAME)`` marks where a new protocol differs;
- ``tests/test_NAME.py`` — the task is found through its entry point, its card is stable and
  names its settings, and it scores a random-init encoder on the embedded digits (seconds);
- ``grids/NAME_smoke.yaml`` — digits, CPU: the task next to ``knn`` on two methods;
- ``README.md`` and ``.gitignore``.

In-tree tasks are a module under ``tasks/`` registered in ``tasks/registration.py`` with a card in
``tasks/cards/``: docs/adding-a-task.md walks through the three files (no scaffold).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmark.commands.new_method import (
    NAME_RE,
    PLUGIN_GITIGNORE,
    ScaffoldError,
    class_name_of,
)
from benchmark.core.errors import UsageError


def validate_task_name(name: str) -> None:
    import keyword

    if not NAME_RE.fullmatch(name) or keyword.iskeyword(name) or name in ("base", "test"):
        raise ScaffoldError(
            f"task name {name!r} must be a lower-case snake_case identifier (e.g. 'kmeans_nmi')"
        )
    from benchmark.contracts.registries import TASKS, load_builtins

    load_builtins()
    if name in TASKS:
        raise ScaffoldError(f"task {name!r} is already registered (as {TASKS.canonical(name)!r})")


TASK_TEMPLATE = '''"""{cls}: a downstream task for fssl-bench (scaffolded by ``python -m benchmark new-task {name}
--plugin``). As generated it scores the frozen encoder by nearest class centroid: the class means of
the (L2-normalised) training features classify the test features by cosine similarity, top-1 in %.
Replace the parts marked ``TODO({name})`` with your protocol.

Rules (docs/adding-a-task.md): import only ``benchmark.api``; the card names every setting that can
move the number (equal card ids <=> comparable numbers); randomness only from ``ctx.seed`` through
``torch_gen``; features through ``encoder_features`` (one pass shared with kNN and the probes).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F

from benchmark.api import Encoder, ProtocolCard, TaskContext, TaskScores, encoder_features


@dataclass(frozen=True, kw_only=True)
class {cls}Config:
    """The task's settings (TODO({name}): yours); every field is part of the card."""

    normalize: bool = True  # L2-normalise features before the centroids

    def __post_init__(self) -> None:
        if not isinstance(self.normalize, bool):
            raise ValueError("normalize must be a bool")


def centroid_top1(
    train_f: torch.Tensor, train_y: torch.Tensor, test_f: torch.Tensor, test_y: torch.Tensor,
    num_classes: int, *, normalize: bool = True,
) -> float:
    """Top-1 (%) of nearest class centroid (TODO({name}): your scoring; keep it a pure function)."""
    if normalize:
        train_f, test_f = F.normalize(train_f.float(), dim=1), F.normalize(test_f.float(), dim=1)
    centroids = torch.zeros(num_classes, train_f.shape[1], dtype=torch.float32)
    centroids.index_add_(0, train_y.long(), train_f.float())
    centroids = F.normalize(centroids, dim=1)
    pred = (test_f.float() @ centroids.T).argmax(dim=1)
    return float((pred == test_y.long()).float().mean() * 100.0)


class {cls}:
    """{cls} (TODO({name}): the protocol, its source)."""

    name: ClassVar[str] = "{name}"
    version: ClassVar[str] = "1"  # bump whenever numbers can change (part of the card)
    main_metric: ClassVar[str] = "top1"
    higher_is_better: ClassVar[bool] = True
    Config: ClassVar[type] = {cls}Config

    def __init__(self, cfg: {cls}Config) -> None:
        self.cfg = cfg

    def card(self) -> ProtocolCard:
        """The protocol this task's numbers bind to: records with equal card ids are comparable."""
        return ProtocolCard(
            task=self.name,
            version=self.version,
            settings={{"normalize": self.cfg.normalize, "selection": "final"}},
            summary="nearest class centroid on frozen features, final",
            name=f"{{self.name}}@v{{self.version}}",
        )

    def run(self, encoder: Encoder, ctx: TaskContext) -> TaskScores:
        t0 = time.perf_counter()
        ds = ctx.dataset
        train_f, test_f = encoder_features(encoder, ctx)  # cached: kNN and the probes share it
        top1 = centroid_top1(
            train_f,
            torch.as_tensor(ds.train.labels),
            test_f,
            torch.as_tensor(ds.test.labels),
            ds.num_classes,
            normalize=self.cfg.normalize,
        )
        return TaskScores(
            task=self.name,
            card=self.card(),
            main_metric=self.main_metric,
            higher_is_better=self.higher_is_better,
            values={{"top1": top1}},
            wall_time_s=time.perf_counter() - t0,
        )
'''

TASK_TEST_TEMPLATE = '''"""Tests of the {name} task plugin (scaffolded by ``python -m benchmark new-task {name} --plugin``).

Run after ``pip install -e '.[test]'``: the task is found through its entry point, as fssl-bench finds
it. About 10 s on 2 CPU cores (most of it importing torch); add a test per rule of your protocol.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

from benchmark.api import (
    METHODS,
    TASKS,
    TaskContext,
    build_backbone,
    expand_grid,
    load_dataset_splits,
    load_grid,
    scoped_torch_seed,
    Stream,
)
from fssl_{name} import task as module

GRID = Path(__file__).resolve().parents[1] / "grids" / "{name}_smoke.yaml"


def test_registered_through_the_entry_point() -> None:
    assert TASKS.get("{name}") is module.{cls}


def test_the_card_is_stable_and_names_the_settings() -> None:
    a, b = module.{cls}(module.{cls}Config()), module.{cls}(module.{cls}Config(normalize=False))
    assert a.card().card_id == module.{cls}(module.{cls}Config()).card().card_id
    assert a.card().card_id != b.card().card_id  # another setting, another card


def test_centroids_of_separable_classes_score_100() -> None:
    f = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    y = torch.tensor([0, 0, 1, 1])
    assert module.centroid_top1(f, y, f, y, 2) == 100.0


def test_scores_a_random_encoder_on_digits() -> None:
    ds = load_dataset_splits("digits", {{"size": 16}})
    with scoped_torch_seed(0, Stream.INIT):
        net, dim = build_backbone("resnet_micro", {{"width": 4}})
    cls = METHODS.get("no_pretrain")
    from benchmark.api import ComponentSpec, InputSpec

    inputs = InputSpec(image_size=16, mean=ds.mean, std=ds.std)
    encoder = cls(cls.Config(), ComponentSpec("resnet_micro", "1", {{"width": 4}}), inputs).export(
        net.eval(), dim
    )
    with tempfile.TemporaryDirectory() as tmp:
        ctx = TaskContext(dataset=ds, data_root=Path(tmp), out_dir=Path(tmp),
                          device=torch.device("cpu"), seed=0, feature_cache={{}})
        scores = module.{cls}(module.{cls}Config()).run(encoder, ctx)
    assert 100.0 / ds.num_classes / 2 < scores.main <= 100.0  # a random encoder is above chance


def test_smoke_grid_runs_the_task() -> None:
    cells = expand_grid(load_grid(GRID))
    assert all("{name}" in {{t.name for t in cell.tasks}} for cell in cells)
'''

TASK_GRID_TEMPLATE = """# Smoke grid for the {name} task plugin (scaffolded): digits (16x16), a width-4 micro backbone,
# 2 clients, 1 round; the task next to kNN. Run:
#   python -m benchmark run --grid grids/{name}_smoke.yaml --root runs --no-wandb
name: {name}_smoke
description: "{name} next to knn on digits (CPU, minutes; a pipeline check, not a result)"
base:
  dataset: {{name: digits, size: 16}}
  backbone: {{name: resnet_micro, width: 4}}
  partition: iid
  fl: {{num_clients: 2, participation: 1.0, rounds: 1, local_epochs: 1}}
  tasks: [knn, {name}]
method_common: {{batch_size: 16}}
smoke: true
axes:
  method: [fedavg_simclr, no_pretrain]
  seed: [0]
"""

TASK_PYPROJECT = """# An out-of-tree fssl-bench task: registered through the entry-point group, no change to fssl-bench.
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "fssl-{dist}"
version = "0.1.0"
description = "{cls}: a downstream task for fssl-bench"
requires-python = ">=3.10"
dependencies = ["fssl-bench"]

[project.optional-dependencies]
test = ["pytest"]

[project.entry-points."fssl_bench.tasks"]
{name} = "fssl_{name}.task:{cls}"

[tool.setuptools.packages.find]
where = ["src"]
"""

TASK_README = """# fssl-{dist}

{cls} as an installed fssl-bench task (scaffolded by `python -m benchmark new-task {name} --plugin`).
`src/fssl_{name}/task.py` imports nothing of fssl-bench but `benchmark.api` (docs/adding-a-task.md).

    pip install -e '.[test]'                      # registers `{name}` (fssl_bench.tasks entry point)
    python -m benchmark list tasks                # {name} is listed
    python -m pytest tests -q                     # its tests (seconds)
    python -m benchmark run --grid grids/{name}_smoke.yaml --root runs --no-wandb   # digits, CPU
    # on pre-trained cells of a track's grid: the task added to the cells' tasks re-uses their
    # pre-training (cells that differ only in their tasks share it)

Records of its cells carry this distribution's name, version and a digest of its source files; its
numbers are shown on the site as on no track until a maintainer adds a track for its card.
"""


def render_task_plugin(name: str, class_name: str | None = None) -> dict[Path, str]:
    cls = class_name_of(name, class_name)
    dist = name.replace("_", "-")
    fmt = {"name": name, "cls": cls, "dist": dist}
    return {
        Path("pyproject.toml"): TASK_PYPROJECT.format(**fmt),
        Path("README.md"): TASK_README.format(**fmt),
        Path(".gitignore"): PLUGIN_GITIGNORE,
        Path("src") / f"fssl_{name}" / "__init__.py": f'"""fssl-bench task {name}."""\n',
        Path("src") / f"fssl_{name}" / "task.py": TASK_TEMPLATE.format(**fmt),
        Path("tests") / f"test_{name}.py": TASK_TEST_TEMPLATE.format(**fmt),
        Path("grids") / f"{name}_smoke.yaml": TASK_GRID_TEMPLATE.format(**fmt),
    }


def write_task_scaffold(
    name: str, out: Path | None = None, *, force: bool = False, class_name: str | None = None
) -> list[Path]:
    """Write the task plugin package of ``name`` into ``out`` (default ``./fssl-NAME/``)."""
    validate_task_name(name)
    root = Path(out) if out is not None else Path.cwd() / f"fssl-{name.replace('_', '-')}"
    files = render_task_plugin(name, class_name)
    existing = [root / rel for rel in files if (root / rel).exists()]
    if existing and not force:
        raise ScaffoldError(
            f"{', '.join(map(str, existing))} exist(s); nothing written (--force replaces them)"
        )
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return [root / rel for rel in files]


def task_next_steps(name: str, where: str | None = None) -> str:
    pkg = (where or f"fssl-{name.replace('_', '-')}").rstrip("/")
    return "\n".join(
        [
            f"next steps for the task {name} (an installable package in {pkg}/):",
            f"  1. fill the TODO({name}) markers in {pkg}/src/fssl_{name}/task.py (import only benchmark.api)",
            f"  2. pip install -e '{pkg}[test]'   (registers it: python -m benchmark list tasks)",
            f"  3. python -m pytest {pkg}/tests -q",
            f"  4. python -m benchmark run --grid {pkg}/grids/{name}_smoke.yaml --root runs --no-wandb",
        ]
    )


def cmd_new_task(args: argparse.Namespace) -> int:
    from benchmark.commands.new_method import ScaffoldError

    if not args.plugin:
        raise UsageError(
            "new-task scaffolds a plugin package (--plugin); an in-tree task is a module under "
            "tasks/, a line in tasks/registration.py and a card in tasks/cards/ "
            "(docs/adding-a-task.md §2)"
        )
    try:
        written = write_task_scaffold(
            args.name,
            Path(args.out) if args.out else None,
            force=args.force,
            class_name=args.class_name,
        )
    except ScaffoldError as exc:
        raise UsageError(str(exc)) from None
    for path in written:
        print(f"wrote {path}")
    print(task_next_steps(args.name, where=args.out))
    return 0
