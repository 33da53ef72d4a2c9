"""``Pretrained``: what a finished (or diverged) pre-training leaves for evaluation — a typed value,
saved as the pre-training folder's final state (``PretrainDir.final``) and read back by sibling
cells, ``submit`` and ``status``.

The file keeps the key layout it has always had, so run roots made before this type existed still
load.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

from benchmark.contracts.types import ClientState, ServerState


@dataclass(frozen=True, eq=False)
class Pretrained:
    status: Literal["ok", "diverged"]
    reason: str | None  # why it diverged
    rounds_completed: int
    server: ServerState  # the final server state (empty model when diverged)
    comm_up: tuple[int, ...] = ()  # bytes per round, clients → server
    comm_down: tuple[int, ...] = ()
    history: tuple[Mapping[str, float], ...] = ()  # per-round metrics
    client_steps: int = 0  # optimizer steps summed over clients and rounds
    # client-state files
    clients_manifest: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # final client states, kept only for methods whose encoder needs them
    # (Method.encoder_needs_clients)
    client_tensors: Mapping[int, Mapping[str, torch.Tensor]] = field(default_factory=dict)
    # wall time of the pre-training (None: not measured, e.g. diverged)
    pretrain_time_s: float | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def client_epochs_run(self) -> int:
        """Participations that trained (took an optimizer step), summed over rounds: times the
        local epochs, the client epochs trained. A round that trains nobody (Orchestra's
        initialisation round, a reference point's rounds) counts none; a history written before
        ``clients_trained`` existed counts a round's clients when it took any step."""
        return int(sum(_trained(h) for h in self.history))

    @property
    def client_samples(self) -> int:
        """Training examples the clients' optimizer steps drew, summed over clients and rounds (0
        for a history written before it was counted)."""
        return int(sum(h.get("client_samples", 0) for h in self.history))

    @property
    def clients_without_step(self) -> int | None:
        """Participations that took no optimizer step in a round the method trains in, summed over
        rounds; None for a history written before it was counted."""
        if any("clients_without_step" not in h for h in self.history):
            return None
        return int(sum(h["clients_without_step"] for h in self.history))

    def client_states(self) -> dict[int, ClientState]:
        return {int(k): ClientState(tensors=dict(v)) for k, v in self.client_tensors.items()}

    def state_digest(self) -> str:
        """The record's ``final_state_digest``: :func:`evaluated_state_digest` of this state."""
        return evaluated_state_digest(self.server, self.client_tensors)

    @classmethod
    def diverged(cls, reason: str, rounds_completed: int) -> Pretrained:
        return cls(
            status="diverged",
            reason=reason,
            rounds_completed=rounds_completed,
            server=ServerState(model={}, extra={}),
        )

    # ---- the saved form (the key layout of earlier run roots) ------------------------------------
    def to_payload(self) -> dict[str, Any]:
        payload = {
            "status": self.status,
            "reason": self.reason,
            "rounds_completed": self.rounds_completed,
            "model": dict(self.server.model),
            "extra": dict(self.server.extra),
            "comm_up": list(self.comm_up),
            "comm_down": list(self.comm_down),
            "history": [dict(h) for h in self.history],
            "client_steps": self.client_steps,
            "clients": {k: dict(v) for k, v in self.clients_manifest.items()},
        }
        if self.pretrain_time_s is not None:
            payload["pretrain_time_s"] = self.pretrain_time_s
        if self.client_tensors:
            payload["client_tensors"] = {k: dict(v) for k, v in self.client_tensors.items()}
        return payload

    @classmethod
    def from_payload(cls, raw: Mapping[str, Any]) -> Pretrained:
        return cls(
            status=raw["status"],
            reason=raw["reason"],
            rounds_completed=int(raw["rounds_completed"]),
            server=ServerState(model=raw["model"], extra=raw["extra"]),
            comm_up=tuple(int(x) for x in raw["comm_up"]),
            comm_down=tuple(int(x) for x in raw["comm_down"]),
            history=tuple(raw["history"]),
            client_steps=int(raw["client_steps"]),
            clients_manifest=dict(raw.get("clients", {})),
            client_tensors={int(k): v for k, v in raw.get("client_tensors", {}).items()},
            pretrain_time_s=raw.get("pretrain_time_s"),
        )

    def save(self, path: Path) -> None:
        from benchmark.engine.client_store import atomic_torch_save

        atomic_torch_save(self.to_payload(), Path(path))

    @classmethod
    def load(cls, path: Path, *, untrusted: bool = False) -> Pretrained:
        """``untrusted`` (a checkpoint from someone else's bundle: ``accept``): unpickle tensors and
        plain values only (``torch.load(weights_only=True)``), so that a crafted file cannot run
        code; anything else raises."""
        return cls.from_payload(torch.load(Path(path), map_location="cpu", weights_only=untrusted))


def _trained(h: Mapping[str, float]) -> float:
    if "clients_trained" in h:
        return h["clients_trained"]
    return h.get("clients", 0) if h.get("client_steps", 0) > 0 else 0


def evaluated_state_digest(
    server: ServerState, clients: Mapping[int, Mapping[str, torch.Tensor]] | None = None
) -> str:
    """sha256 of every tensor a method's evaluation can read: the server's ``model`` and ``extra``
    (FedMAE's block pool, FeatARC's cluster assignments, Orchestra's centroids) and the final client
    states kept for the methods whose encoder reads them (``encoder_needs_clients``: local_ssl). A
    state with no ``extra`` and no client states hashes as its model alone (the digest records had
    before ``extra`` was covered); "" for an empty state (a diverged pre-training).

    Raises TypeError when a value is not a tensor (a checkpoint that is not this project's)."""
    clients = clients or {}
    if not server.extra and not clients:
        return state_digest(server.model) if server.model else ""
    parts = {
        "model": state_digest(server.model),
        "extra": state_digest(server.extra),
        "clients": {str(k): state_digest(clients[k]) for k in sorted(clients, key=int)},
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def state_digest(tensors: Mapping[str, torch.Tensor]) -> str:
    """:func:`benchmark.engine.client_store.state_digest`, with a one-line TypeError for a value that
    is not a tensor."""
    from benchmark.engine.client_store import state_digest as digest

    bad = next((k for k, v in tensors.items() if not isinstance(v, torch.Tensor)), None)
    if bad is not None:
        raise TypeError(f"{bad!r} is a {type(tensors[bad]).__name__}, not a tensor")
    return digest(tensors)


__all__ = ["Pretrained", "evaluated_state_digest"]
