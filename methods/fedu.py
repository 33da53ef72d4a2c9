"""FedU (Zhuang et al., "Collaborative Unsupervised Visual Representation Learning from
Decentralized Data", ICCV 2021, arXiv 2108.06492; official code EasyFL ``applications/fedssl``).
Spec: docs/methods/fedu.md.

BYOL on every client. Clients upload the online encoder (backbone + projector) and the predictor;
the server averages them with n_k weights; the target encoder never leaves the client (ClientState).
At the start of a round the global online encoder replaces the client's, and the divergence-aware
predictor update (DAPU) keeps the local predictor when D(θ_g, θ_k) ≥ μ_dapu (§2.4). The BYOL
networks, local training and shared tensors are the same as FedEMA's (methods/_shared/fedbyol.py);
this file holds what is FedU's own, the DAPU merge (:meth:`FedU.merge`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from benchmark.api import (
    METHODS,
    PRECISIONS,
    ClientData,
    ClientState,
    ComponentSpec,
    Encoder,
    InputSpec,
    MethodBase,
    Payload,
    Requirement,
    RoundContext,
    ServerState,
    Stream,
    UnlabeledView,
    scoped_torch_seed,
)
from methods._shared.aggregate import FedAvgFold, average_uploads
from methods._shared.byol import BYOLNet
from methods._shared.fedbyol import (
    BYOL_SMOKE,
    ONLINE,
    PREDICTOR,
    TARGET,
    BYOLConfig,
    MergeResult,
    byol_net,
    divergence_names,
    first_merge,
    local_divergence,
    local_update,
    online_backbone,
    shared,
)
from methods._shared.modules import select, tensors_of
from methods._shared.nets import WorkingNets


@dataclass(frozen=True, kw_only=True)
class FedUConfig(BYOLConfig):
    """Hyperparameters of docs/methods/fedu.md §3 (project defaults = EasyFL ``main.py`` /
    ``model.py``); the fields are :class:`~methods._shared.fedbyol.BYOLConfig`'s."""


@METHODS.register("fedu")
class FedU(MethodBase):
    """FedU (Zhuang et al., ICCV 2021): BYOL clients, online encoder + predictor aggregated, DAPU
    (docs/methods/fedu.md §2)."""

    name: ClassVar[str] = "fedu"
    version: ClassVar[str] = "1"
    # every step through ctx.precision (benchmark.core.precision)
    precisions: ClassVar[tuple[str, ...]] = PRECISIONS
    Config: ClassVar[type] = FedUConfig
    requires: ClassVar[frozenset[Requirement]] = frozenset()
    payload_up: ClassVar[tuple[str, ...]] = (
        "online.backbone.*",
        "online.projector.*",
        "predictor.*",
    )
    payload_down: ClassVar[tuple[str, ...]] = (
        "online.backbone.*",
        "online.projector.*",
        "predictor.*",
    )
    smoke_settings: ClassVar[dict] = BYOL_SMOKE
    cfg: FedUConfig

    def __init__(self, cfg: FedUConfig, backbone: ComponentSpec, inputs: InputSpec) -> None:
        super().__init__(cfg, backbone, inputs)
        self.nets = WorkingNets(self.build)

    # ---- model plumbing --------------------------------------------------------------------------
    def build(self) -> BYOLNet:
        return byol_net(self.backbone, self.cfg)

    def divergence_names(self) -> list[str]:
        """𝒞 of docs/methods/fedu.md §2.4: the online backbone's non-shortcut conv weights (17 for
        ResNet-18)."""
        return divergence_names(self.nets.structure())

    # ---- hooks -----------------------------------------------------------------------------------
    def init_server(self, ctx: RoundContext) -> ServerState:
        with scoped_torch_seed(ctx.seed, Stream.INIT):
            net = self.build()
        return ServerState(model=shared(tensors_of(net)))

    def init_client(self, client_id: int, server: ServerState) -> ClientState:
        return ClientState()

    def broadcast(self, server: ServerState, ctx: RoundContext) -> Payload:
        return Payload(shared(server.model))

    def merge(self, down: Payload, state: ClientState, ctx: RoundContext) -> MergeResult:
        """docs/methods/fedu.md §2.4 steps 1–2: first participation copies the global model; later
        ones apply DAPU."""
        glob = {k: v.clone() for k, v in down.tensors.items()}
        if state.last_round is None:
            return first_merge(glob)
        d = local_divergence(self.cfg, down, state, self.divergence_names())
        take_global = d < self.cfg.dapu_threshold
        pred = select(glob if take_global else state.tensors, PREDICTOR)
        start = {
            **select(glob, ONLINE),
            **{k: v.clone() for k, v in pred.items()},
            **select(state.tensors, TARGET),
        }
        return MergeResult(start, {}, {"divergence": d, "dapu_global": float(take_global)}, False)

    def client_update(
        self, down: Payload, state: ClientState, data: ClientData, ctx: RoundContext
    ) -> tuple[Payload, ClientState]:
        """§2.4: merge, then BYOL local training (methods/_shared/fedbyol.py ``local_update``)."""
        merged = self.merge(down, state, ctx)
        return local_update(self.nets.get(ctx.device), self.cfg, merged, data, ctx)

    def server_aggregate(
        self,
        server: ServerState,
        ups: Mapping[int, Payload],
        ctx: RoundContext,
        public: UnlabeledView | None,
    ) -> ServerState:
        """docs/methods/fedu.md §2.5: n_k-weighted average of every up-link tensor (parameters and
        BN running statistics)."""
        if not ups:
            return server
        return ServerState(
            model={**server.model, **average_uploads(ups, self.cfg.weighting)}, extra=server.extra
        )

    def upload_fold(
        self, server: ServerState, sizes: Mapping[int, int], ctx: RoundContext
    ) -> FedAvgFold:
        """§2.5 as the uploads come (the engine need not hold them)."""
        return FedAvgFold(server, sizes, self.cfg.weighting)

    def encoder(
        self, server: ServerState, clients: Mapping[int, ClientState] | None = None
    ) -> Encoder:
        """The global online backbone f_θg, projector removed (docs/methods/fedu.md §2.6)."""
        return self.export(*online_backbone(self.backbone, server.model))
