from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import pytest

from benchmark.core.config import ConfigError, canonical_json, digest, from_mapping


@dataclass(frozen=True, kw_only=True)
class Inner:
    scale: tuple[float, float] = (0.08, 1.0)


@dataclass(frozen=True, kw_only=True)
class Cfg:
    lr: float = 1e-3
    steps: int = 3
    mode: Literal["a", "b"] = "a"
    name: str | None = None
    inner: Inner = field(default_factory=Inner)


def test_unknown_key_names_nearest_field() -> None:
    with pytest.raises(ConfigError, match="no field 'lrr'; did you mean 'lr'"):
        from_mapping(Cfg, {"lrr": 0.1})


@pytest.mark.parametrize(
    "raw",
    [
        {"steps": 1.5},
        {"steps": True},
        {"lr": "x"},
        {"mode": "c"},
        {"name": 3},
        {"inner": {"scale": [1]}},
    ],
)
def test_wrong_types_are_rejected(raw: dict) -> None:
    with pytest.raises(ConfigError):
        from_mapping(Cfg, raw)


def test_coercion_and_nesting() -> None:
    cfg = from_mapping(Cfg, {"lr": 1, "inner": {"scale": [0.2, 1]}})
    assert cfg.lr == 1.0 and isinstance(cfg.lr, float)
    assert cfg.inner == Inner(scale=(0.2, 1.0))


def test_canonical_json_ignores_key_order_and_digest_is_stable() -> None:
    assert canonical_json({"b": 1, "a": [1, 2]}) == canonical_json({"a": [1, 2], "b": 1})
    assert digest({"a": 1}) == digest({"a": 1}) != digest({"a": 2})
    with pytest.raises(ValueError):
        canonical_json({"x": float("nan")})


def test_a_nested_override_merges_into_the_fields_default_key_by_key() -> None:
    """``augment: {flip_p: 0}`` overrides one key of the method's own default augmentation; the
    other keys keep the method's values (FedU's EasyFL jitter 0.8), not AugmentConfig's class
    defaults (0.4)."""
    from methods._shared.fedbyol import EASYFL_AUGMENT
    from methods.fedu import FedUConfig

    cfg = from_mapping(FedUConfig, {"augment": {"flip_p": 0.0}})
    assert cfg.augment.flip_p == 0.0 and cfg.augment.jitter == EASYFL_AUGMENT.jitter == (
        0.8,
        0.8,
        0.8,
        0.2,
    )


def test_every_grid_cell_keeps_its_methods_own_augmentation_under_method_common() -> None:
    """The quickstart's method_common.augment names crop_scale and flip_p only: FedU/FedEMA keep
    EasyFL's jitter, FedMAE keeps its bicubic jitter-free MAE views, and every method with an
    ``augment`` gets flip_p 0 on digits."""
    from benchmark.grids.expand import expand_grid, load_grid

    for name in ("quickstart", "quickstart_extra", "quickstart_tune", "quickstart_pooled"):
        for c in expand_grid(load_grid(name)):
            aug = c.method.params.get("augment")
            if aug is None:
                continue
            assert aug["flip_p"] == 0.0 and list(aug["crop_scale"]) == [0.2, 1.0], (
                name,
                c.method.name,
            )
            if c.method.name in ("fedu", "fedema"):
                assert list(aug["jitter"]) == [0.8, 0.8, 0.8, 0.2], (name, c.method.name)
            if c.method.name == "fedmae":
                assert aug["interpolation"] == "bicubic" and aug["jitter_p"] == 0.0, name
