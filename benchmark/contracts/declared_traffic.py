"""What a method declares it sends per round (issue 52, item 2; plugin API 2.5): the optional hook
:meth:`~benchmark.contracts.method.MethodBase.declared_traffic` and the values it reads and returns.

The runner counts traffic from the payloads themselves (``benchmark.engine.rounds``: each round, the
bytes of every sampled client's upload, and the broadcast's bytes once per sampled client). Where
accept does not re-run the training (a GPU track), that count is the submitter's word; a method that
declares its traffic lets accept derive it instead: ``declared_traffic(tensors, at)`` returns the
bytes one sampled client sends up and receives down in round ``at.round``, a small pure function of
the method's config (``self.cfg``), the cell's federated settings and client (``at``) and the
shapes of the server's tensors (``tensors``: those of the cell's initial server state, built on the
meta device from the cell's configuration, never a submitted checkpoint's).
``benchmark.submission.traffic`` sums it over the round's sampled clients exactly as the runner
counts and requires the record's per-round traffic to equal it, byte for byte; ``check-method``
requires the same of a tiny real run (its ``declared_traffic`` check). A method that declares
nothing (``None``, the default) keeps working: its traffic is shown as the submitter's word,
badged "traffic not derived" on the site.

Torch-free: the shapes come as :class:`TensorShape` (shape and bytes per element)."""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class TensorShape:
    """One tensor of the server state: its shape and the bytes of one element."""

    shape: tuple[int, ...]
    itemsize: int

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.itemsize


class ServerTensors(Mapping[str, TensorShape]):
    """The shapes of the server's tensors (its model, then its extra state), by name,
    with the byte counts a declaration sums."""

    def __init__(self, model: Mapping[str, TensorShape], extra: Mapping[str, TensorShape]) -> None:
        self.model = dict(model)
        self.extra = dict(extra)
        self._all = {**self.extra, **self.model}

    def __getitem__(self, name: str) -> TensorShape:
        return self._all[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all)

    def __len__(self) -> int:
        return len(self._all)

    def model_bytes(
        self, *, prefix: str | tuple[str, ...] = "", exclude: Iterable[str] = ()
    ) -> int:
        """Bytes of the server model's tensors whose name starts with ``prefix`` (one of them, for
        a tuple), those named in ``exclude`` left out."""
        skip = set(exclude)
        return sum(
            t.nbytes for k, t in self.model.items() if k.startswith(prefix) and k not in skip
        )

    def matching_bytes(self, *patterns: str) -> int:
        """Bytes of every tensor (model and extra) whose name matches one of the fnmatch
        ``patterns``."""
        return sum(
            t.nbytes for k, t in self._all.items() if any(fnmatch.fnmatch(k, p) for p in patterns)
        )


@dataclass(frozen=True)
class TrafficContext:
    """What a traffic declaration may read besides the config and the server's shapes: the
    round, the cell's federated settings, and the one sampled client it is asked about.
    ``num_clients`` is the number of clients the engine runs (1 for a ``pooled`` method, whose one
    client holds the union of the partition; ``examples`` is then the union's size)."""

    round: int
    num_rounds: int
    num_clients: int
    local_epochs: int
    examples: int
    public_size: int | None = None


@dataclass(frozen=True)
class Sent:
    """Bytes one sampled client uploads (``up``) and the broadcast it receives (``down``) in one
    round, counted as the runner counts a payload: the bytes of its tensors."""

    up: int
    down: int

    def __post_init__(self) -> None:
        for name in ("up", "down"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"Sent.{name} must be a whole number of bytes >= 0, got {value!r}")


NOTHING = Sent(0, 0)

__all__ = ["NOTHING", "Sent", "ServerTensors", "TensorShape", "TrafficContext"]
