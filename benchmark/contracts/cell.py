"""The cell: one fully resolved experiment, its identity (cell_id) and its shared pre-training
(pretrain_key)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from benchmark.contracts.registries import METHODS, load_builtins
from benchmark.contracts.specs import ComponentSpec, FLConfig
from benchmark.core.config import config_dict, from_mapping
from benchmark.core.errors import UsageError
from benchmark.portable.mode import PORTABLE_REVISION
from benchmark.records.identity import cell_id_of, pretrain_key_of

# plugin method name -> the ``export_params`` its class declared inside the box (``accept``, issue
# 52): read instead of importing the plugin in the accepting process (``declared_export_params``);
# None outside such a block (a run imports its own methods)
_DECLARED_EXPORT_PARAMS: dict[str, tuple[str, ...]] | None = None


@contextmanager
def declared_export_params(declared: Mapping[str, tuple[str, ...]]) -> Iterator[None]:
    """Within the block, :func:`pretrain_key_for` of a plugin method reads its ``export_params``
    from ``declared`` (what the method declared in the box) and imports nothing; a plugin method
    not in ``declared`` is a ``UsageError``, never an import."""
    global _DECLARED_EXPORT_PARAMS
    before = _DECLARED_EXPORT_PARAMS
    _DECLARED_EXPORT_PARAMS = {k: tuple(v) for k, v in declared.items()}
    try:
        yield
    finally:
        _DECLARED_EXPORT_PARAMS = before


def pretrain_key_for(cell: Mapping[str, Any]) -> str:
    """``pretrain_key_of`` with the method's ``export_params`` (parameters read only when the
    encoder is exported, so cells that differ only in them share one pre-training)."""
    from benchmark.core.registry import BUILT_IN

    load_builtins()
    name = cell["method"]["name"]
    declared = _DECLARED_EXPORT_PARAMS
    if declared is not None and METHODS.origin(name) not in (BUILT_IN, None):
        if name not in declared:
            raise UsageError(
                f"plugin method {name!r} was not imported in the box: accept does not import "
                "it in its own process"
            )
        return pretrain_key_of(cell, declared[name])
    cls = METHODS.get(name)
    return pretrain_key_of(cell, tuple(cls.export_params))


@dataclass(frozen=True)
class Cell:
    """One fully resolved experiment. No grid name: the same cell in two grids is one run."""

    dataset: ComponentSpec
    backbone: ComponentSpec
    method: ComponentSpec
    partition: ComponentSpec
    partition_seed: int
    public: ComponentSpec | None
    fl: FLConfig
    seed: int
    tasks: tuple[ComponentSpec, ...]
    # training precision of the pre-training (benchmark.core.precision); tasks evaluate in fp32
    precision: str = "fp32"
    # CPU kernels (benchmark.portable.mode): "native" (what torch picks for this CPU) or "portable"
    # (the same numbers on any x86-64 CPU with AVX2). In the identity only when portable, with the
    # mode's revision (``kernels_revision``), so every native cell keeps its id and a portable cell
    # changes id when what the mode computes changes.
    kernels: str = "native"

    def to_dict(self) -> dict[str, Any]:
        out = config_dict(self)
        if out.get("kernels") == "native":
            del out["kernels"]
        else:
            out["kernels_revision"] = PORTABLE_REVISION
        return out

    @property
    def cell_id(self) -> str:
        return cell_id_of(self.to_dict())

    @property
    def pretrain_key(self) -> str:
        return pretrain_key_for(self.to_dict())

    def label(self) -> str:
        return (
            f"{self.method.name} | {self.dataset.name} | {self.partition.label()} | "
            f"K={self.fl.num_clients} p={self.fl.participation} | seed={self.seed}"
            + ("" if self.precision == "fp32" else f" | {self.precision}")
            + ("" if self.kernels == "native" else f" | {self.kernels} kernels")
        )

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Cell:
        def comp(v: Any) -> ComponentSpec | None:
            return (
                None
                if v is None
                else ComponentSpec(v["name"], v["version"], dict(v.get("params", {})))
            )

        revision = raw.get("kernels_revision", 1)
        if raw.get("kernels", "native") != "native" and revision != PORTABLE_REVISION:
            raise UsageError(
                f"this cell ran under portable kernels revision {revision}; this version of the "
                f"benchmark computes revision {PORTABLE_REVISION} (CHANGELOG): it cannot re-run it"
            )
        return cls(
            dataset=comp(raw["dataset"]),
            backbone=comp(raw["backbone"]),
            method=comp(raw["method"]),
            partition=comp(raw["partition"]),
            partition_seed=int(raw["partition_seed"]),
            public=comp(raw.get("public")),
            fl=from_mapping(FLConfig, raw["fl"]),
            seed=int(raw["seed"]),
            tasks=tuple(comp(t) for t in raw["tasks"]),
            precision=str(raw.get("precision", "fp32")),
            kernels=str(raw.get("kernels", "native")),
        )
