"""The specs a cell is made of: a component (name, version, resolved config) and the federation
settings."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from benchmark.core.config import ConfigError


@dataclass(frozen=True)
class ComponentSpec:
    name: str  # canonical registry name
    version: str  # the component's version at expansion time
    # fully resolved config, defaults filled in
    params: Mapping[str, Any] = field(default_factory=dict)

    def label(self) -> str:
        if not self.params:
            return self.name
        inner = ",".join(
            f"{k}={v}" for k, v in sorted(self.params.items()) if not isinstance(v, (dict, list))
        )
        return f"{self.name}({inner})"


# What a federation may ask for (issue 52: `plan` took 10**29 rounds and printed 2.1e21 GPU-hours).
# The project's grids ask for at most a few hundred rounds, 100 clients and 10 local epochs; the
# bounds leave room for cross-device studies and refuse what no run could finish.
FL_BOUNDS = {"num_clients": 100_000, "rounds": 100_000, "local_epochs": 1_000}


@dataclass(frozen=True, kw_only=True)
class FLConfig:
    num_clients: int = 10
    # fraction p of clients sampled per round: |M_t| = max(floor(p K), 1)
    participation: float = 1.0
    rounds: int = 1
    local_epochs: int = 1

    def __post_init__(self) -> None:
        for name, most in FL_BOUNDS.items():
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= most:
                shown = f"{value:.3g}" if isinstance(value, (int, float)) else repr(value)[:40]
                raise ConfigError(
                    f"fl.{name} must be a whole number from 1 to {most:,}, got {shown}"
                )
        if self.num_clients < 1:
            raise ConfigError(f"fl.num_clients must be >= 1, got {self.num_clients}")
        if not 0 < self.participation <= 1:
            raise ConfigError(f"fl.participation must be in (0, 1], got {self.participation}")
        if self.rounds < 1 or self.local_epochs < 1:
            raise ConfigError("fl.rounds and fl.local_epochs must be >= 1")

    @property
    def clients_per_round(self) -> int:
        return max(int(self.participation * self.num_clients), 1)
