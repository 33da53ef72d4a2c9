from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import pytest

from benchmark.config import ConfigError, canonical_json, digest, from_mapping


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


@pytest.mark.parametrize("raw", [{"steps": 1.5}, {"steps": True}, {"lr": "x"}, {"mode": "c"}, {"name": 3},
                                 {"inner": {"scale": [1]}}])
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
