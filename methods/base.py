"""The ``Method`` protocol: one FSSL algorithm, client and server halves in one object (DESIGN §3).

A method instance holds only its config and the modules it builds; everything that must survive a round lives in
``ServerState`` / ``ClientState``, which come in as arguments and leave as return values. A fresh instance given the
same states continues identically (the resume-equivalence test checks this for every registered method).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Protocol, runtime_checkable

from benchmark.api import (
    ClientData,
    ClientState,
    ComponentSpec,
    Encoder,
    Payload,
    Requirement,
    RoundContext,
    ServerState,
    UnlabeledView,
)


@runtime_checkable
class Method(Protocol):
    name: ClassVar[str]  # registry key, e.g. "fedema"
    version: ClassVar[str]  # bump whenever numbers can change; part of the cell id
    Config: ClassVar[type]
    requires: ClassVar[frozenset[Requirement]]
    # Tensor names a client may upload / the server may send: fnmatch patterns, checked by check-method.
    payload_up: ClassVar[tuple[str, ...]]
    payload_down: ClassVar[tuple[str, ...]]

    def __init__(self, cfg: Any, backbone: ComponentSpec) -> None: ...
    def init_server(self, ctx: RoundContext) -> ServerState: ...
    def init_client(self, client_id: int, server: ServerState) -> ClientState: ...
    def broadcast(self, server: ServerState, ctx: RoundContext) -> Payload: ...
    def client_update(
        self, down: Payload, state: ClientState, data: ClientData, ctx: RoundContext
    ) -> tuple[Payload, ClientState]: ...
    def server_aggregate(
        self, server: ServerState, ups: Mapping[int, Payload], ctx: RoundContext, public: UnlabeledView | None
    ) -> ServerState: ...
    def encoder(self, server: ServerState) -> Encoder: ...


__all__ = ["Method"]
