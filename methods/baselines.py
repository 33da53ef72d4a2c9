"""Reference points of the Dec-SSL paper (docs/methods/fedavg_simclr.md §3): central_ssl, local_ssl,
dec_sl, no_pretrain.

central_ssl and local_ssl compose FedAvg-SimCLR's SimCLR network and the loop of its local update
(methods/_shared/simclr.py); their client step and its loss are this file's
(:func:`simclr_batch_loss`, called from each one's ``client_update``). They differ only in what is
federated:

- ``central_ssl``: SimCLR on the union of all client data (the engine pools the partition into one
  client, ``federation = "pooled"``); one optimizer for the whole run (``optimizer_state: keep``).
- ``local_ssl``: every client trains alone on its own data, nothing is communicated (``federation =
  "isolated"``); all K client encoders are exported and the tasks report their mean and min (never
  the max).
- ``dec_sl``: FedAvg with supervised cross-entropy on backbone + Linear(d, C), the same data as
  Dec-SSL. Its backbone under any probe card is Dec-SLRep; its classifier is exported for the
  e2e-classifier card.
- ``no_pretrain``: a seeded random initialisation, nothing trained.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Literal

import torch
import torch.nn.functional as F
from torch import nn

from benchmark.api import (
    METHODS,
    PRECISIONS,
    AugmentConfig,
    ClientData,
    ClientState,
    ComponentSpec,
    Encoder,
    Federation,
    IndexView,
    Inert,
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
    augment,
    build_backbone,
    load_tensors,
    run_local_epochs,
    scoped_torch_seed,
    select,
    tensors_of,
    to_device,
    two_views,
)
from methods._shared.aggregate import FedAvgServer
from methods._shared.losses import CONTRASTIVE_LOSSES
from methods._shared.nets import BackboneHead, WorkingNets
from methods._shared.optim import make_optimizer, scheduled_lr
from methods._shared.simclr import (
    NAN_POLICY_INERT,
    SIMCLR_INERT,
    SimCLRConfig,
    SimCLRFamily,
    encoder_of,
    local_update,
)


def simclr_batch_loss(
    net: nn.Module, cfg: SimCLRConfig, view: UnlabeledView, ctx: RoundContext
) -> Callable[[torch.Tensor], torch.Tensor]:
    """The SimCLR loss of one batch of central_ssl and local_ssl, FedAvg-SimCLR's
    (docs/methods/fedavg_simclr.md §2.3): two augmented views, one forward pass per view, the
    configured contrastive loss at τ."""
    # NT-Xent at τ: ntxent_2b (benchmark/building_blocks/heads.py, through benchmark.api);
    # loss_form crossview_1dir: methods/_shared/losses.py
    contrastive = CONTRASTIVE_LOSSES[cfg.loss_form]

    def batch_loss(batch: torch.Tensor) -> torch.Tensor:
        v1, v2 = two_views(batch, cfg.augment, ctx.generator, mean=view.mean, std=view.std)
        return contrastive(net(v1), net(v2), cfg.tau)  # one forward pass per view (§2.3)

    return batch_loss


@dataclass(frozen=True, kw_only=True)
class CentralSSLConfig(SimCLRConfig):
    # docs/methods/fedavg_simclr.md §3: one optimizer over the whole run (the round milestones
    # become epoch milestones).
    optimizer_state: Literal["reset", "keep"] = "keep"


@METHODS.register("central_ssl", aliases=("central_simclr", "centralized"))
class CentralSSL(FedAvgServer, SimCLRFamily):
    """Central-SSL (Dec-SSL §2.1): SimCLR on the pooled data of all clients, same budget as the
    federated cells."""

    name: ClassVar[str] = "central_ssl"
    version: ClassVar[str] = "2"
    Config: ClassVar[type] = CentralSSLConfig
    federation: ClassVar[Federation] = "pooled"
    # benchmark.commands.live_settings: one pooled client, whose average is its own upload
    inert_settings: ClassVar[Mapping[str, str | Inert]] = {
        **SIMCLR_INERT,
        "weighting": "one pooled client: the average of one upload is that upload",
    }
    cfg: CentralSSLConfig

    # The engine pools the partition into one client that takes part in every round; its hooks are
    # FedAvg-SimCLR's (the average of one upload is that upload), so the pooled run is SimCLR with
    # the same budget and schedule.
    def fedavg_folds(self) -> bool:
        """The one pooled upload is averaged at once, as before the family existed."""
        return False

    def client_update(
        self, down: Payload, state: ClientState, data: ClientData, ctx: RoundContext
    ) -> tuple[Payload, ClientState]:
        """FedAvg-SimCLR's client step on the pooled client: E local epochs of SimCLR, the loss of
        one batch :func:`simclr_batch_loss`; the loop (optimizer kept over the run, epochs, upload)
        is methods/_shared/simclr.py: local_update."""
        net = self.nets.get(ctx.device, channels_last=ctx.channels_last)
        batch_loss = simclr_batch_loss(net, self.cfg, data.train, ctx)
        return local_update(
            net, self.start_tensors(down, state), self.cfg, state, data, ctx, batch_loss
        )


@dataclass(frozen=True, kw_only=True)
class LocalSSLConfig(SimCLRConfig):
    """FedAvg-SimCLR's fields (docs/methods/fedavg_simclr.md §4); ``weighting`` has nothing to
    weigh."""


@METHODS.register("local_ssl", aliases=("local_simclr", "local_only"))
class LocalSSL(SimCLRFamily):
    """Local-SSL: each client trains SimCLR alone on D_k; no communication; K encoders are
    evaluated."""

    name: ClassVar[str] = "local_ssl"
    version: ClassVar[str] = "2"
    Config: ClassVar[type] = LocalSSLConfig
    federation: ClassVar[Federation] = "isolated"
    encoder_needs_clients: ClassVar[bool] = True
    payload_up: ClassVar[tuple[str, ...]] = ()
    payload_down: ClassVar[tuple[str, ...]] = ()
    # benchmark.commands.live_settings: each client trains alone and keeps its whole model
    inert_settings: ClassVar[Mapping[str, str | Inert]] = {
        **SIMCLR_INERT,
        "weighting": "nothing is averaged: each client keeps its own model",
        "bn": "each client keeps its whole model, BN tensors included, whatever bn says",
        "bn_filter": "each client keeps its whole model, BN tensors included, whatever bn says",
    }
    cfg: LocalSSLConfig

    def init_client(self, client_id: int, server: ServerState) -> ClientState:
        return ClientState(tensors={k: v.clone() for k, v in server.model.items()})

    def broadcast(self, server: ServerState, ctx: RoundContext) -> Payload:
        return Payload({})

    def start_tensors(self, down: Payload, state: ClientState) -> dict[str, torch.Tensor]:
        return {k: v for k, v in state.tensors.items() if not k.startswith("opt.")}

    def declared_traffic(self, tensors: ServerTensors, at: TrafficContext) -> Sent | None:
        """Nothing travels: each client keeps its own model."""
        return Sent(0, 0)

    def client_update(
        self, down: Payload, state: ClientState, data: ClientData, ctx: RoundContext
    ) -> tuple[Payload, ClientState]:
        """E local epochs of SimCLR from the client's own model, the loss of one batch
        :func:`simclr_batch_loss` (the loop: methods/_shared/simclr.py: local_update); nothing is
        uploaded, the client keeps its whole model."""
        net = self.nets.get(ctx.device, channels_last=ctx.channels_last)
        batch_loss = simclr_batch_loss(net, self.cfg, data.train, ctx)
        start = self.start_tensors(down, state)
        up, new_state = local_update(net, start, self.cfg, state, data, ctx, batch_loss)
        keep = {**new_state.tensors, **up.tensors}  # the client's own model stays with the client
        return Payload({}, num_examples=data.num_examples, metrics=up.metrics), ClientState(
            keep, ctx.round
        )

    def server_aggregate(self, server, ups, ctx, public):
        return server

    def encoder(
        self, server: ServerState, clients: Mapping[int, ClientState] | None = None
    ) -> Encoder:
        members = tuple(encoder_of(self.build(), clients[k].tensors) for k in sorted(clients or {}))
        return self.export(encoder_of(self.build(), server.model), members=members)


@dataclass(frozen=True, kw_only=True)
class DecSLConfig:
    optimizer: Literal["adam", "sgd"] = "adam"
    lr: float = 1e-3
    # Dec-SL code (update.py): Adam 1e-3, weight decay 1e-6, as its SSL clients
    weight_decay: float = 1e-6
    momentum: float = 0.9
    batch_size: int = 256
    # §7.6: same schedule as fedavg_simclr
    lr_schedule: Literal["step_rounds", "constant"] = "step_rounds"
    lr_milestones: tuple[float, ...] = (0.3, 0.6, 0.9)
    lr_gamma: float = 0.3
    weighting: Literal["uniform", "num_examples"] = "num_examples"
    # §7.7: the code trains with the SimCLR augmentation
    sl_augment: Literal["simclr", "crop_flip"] = "simclr"
    nan_policy: Literal["raise", "skip"] = "raise"
    augment: AugmentConfig = field(default_factory=AugmentConfig)


@METHODS.register("dec_sl", aliases=("fedavg_supervised", "fedavg_sup"))
class DecSL(FedAvgServer, MethodBase):
    """Dec-SL (Dec-SSL §2.1): supervised FedAvg on the same client data; Dec-SLRep = its backbone
    under a probe."""

    name: ClassVar[str] = "dec_sl"
    version: ClassVar[str] = "2"
    # every step through ctx.precision (benchmark.core.precision)
    precisions: ClassVar[tuple[str, ...]] = PRECISIONS
    Config: ClassVar[type] = DecSLConfig
    requires: ClassVar[frozenset[Requirement]] = frozenset({Requirement.LABELS})
    payload_up: ClassVar[tuple[str, ...]] = ("encoder.*", "classifier.*")
    payload_down: ClassVar[tuple[str, ...]] = ("encoder.*", "classifier.*")
    # benchmark.commands.live_settings
    inert_settings: ClassVar[Mapping[str, str | Inert]] = {
        "momentum": Inert(
            "SGD momentum: read only under optimizer sgd (the default is Adam)",
            live_with={"optimizer": "sgd"},
        ),
        "nan_policy": NAN_POLICY_INERT,
    }
    fedavg_merge: ClassVar[bool] = False  # supervised FedAvg: the average is the whole model

    def __init__(self, cfg: DecSLConfig, backbone: ComponentSpec, inputs: InputSpec) -> None:
        super().__init__(cfg, backbone, inputs)
        self.nets = WorkingNets(self.build)

    def build(self, num_classes: int) -> BackboneHead:
        """Backbone (``encoder``) + Linear(d, C) (``classifier``)."""
        encoder, feat_dim = build_backbone(self.backbone.name, dict(self.backbone.params))
        return BackboneHead(encoder, nn.Linear(feat_dim, num_classes), ("encoder", "classifier"))

    def init_server(self, ctx: RoundContext) -> ServerState:
        with scoped_torch_seed(ctx.seed, Stream.INIT):
            net = self.build(ctx.num_classes)
        return ServerState(model=tensors_of(net))

    def init_client(self, client_id: int, server: ServerState) -> ClientState:
        return ClientState()

    def broadcast(self, server: ServerState, ctx: RoundContext) -> Payload:
        return Payload(dict(server.model))

    def declared_traffic(self, tensors: ServerTensors, at: TrafficContext) -> Sent | None:
        """Supervised FedAvg: the whole model (backbone and classifier) both ways."""
        return Sent(up=tensors.model_bytes(), down=tensors.model_bytes())

    def client_update(self, down: Payload, state: ClientState, data: ClientData, ctx: RoundContext):
        cfg = self.cfg
        if data.labels is None:
            raise ValueError("dec_sl needs client labels (Requirement.LABELS)")
        net = self.nets.get(ctx.device, key=(ctx.num_classes,))
        load_tensors(net, down.tensors)
        net.train()
        lr = scheduled_lr(cfg, ctx.round, ctx.num_rounds, ctx.local_epochs)
        opt = make_optimizer(cfg, list(net.parameters()), lr)  # type: ignore[arg-type]
        aug = cfg.augment if cfg.sl_augment == "simclr" else AugmentConfig(jitter_p=0.0, gray_p=0.0)
        view = data.train
        labels = data.labels.to(ctx.device)
        images = view.images.to(ctx.device)

        def step(batch_idx: torch.Tensor) -> torch.Tensor:
            # the host's row indices, copied once without making the host wait
            idx = to_device(batch_idx, ctx.device)
            x = augment(images[idx], aug, ctx.generator, mean=view.mean, std=view.std)
            return F.cross_entropy(net(x), labels[idx])

        # the shared loop batches row indices, so each batch's labels are looked up by the same rows
        stats = run_local_epochs(
            IndexView(len(view), view.mean, view.std),
            step,
            opt,
            ctx,
            batch_size=cfg.batch_size,
            epochs=ctx.local_epochs,
            nan_policy=cfg.nan_policy,
        )
        return (
            Payload(
                tensors_of(net),
                num_examples=data.num_examples,
                metrics={**stats.as_dict(), "lr": lr},
            ),
            ClientState(last_round=ctx.round),
        )

    def fedavg_weighting(self) -> str:
        return self.cfg.weighting

    def encoder(
        self, server: ServerState, clients: Mapping[int, ClientState] | None = None
    ) -> Encoder:
        num_classes = int(server.model["classifier.weight"].shape[0])
        net = self.build(num_classes)
        load_tensors(net, server.model)
        net.eval()
        return self.export(net.encoder, classifier=net)


@dataclass(frozen=True, kw_only=True)
class NoPretrainConfig:
    pass


@METHODS.register("no_pretrain", aliases=("random_init",))
class NoPretrain(MethodBase):
    """No pre-training: the backbone's seeded random initialisation (Dec-SSL Tables 2 and 4, "no
    pretrain")."""

    name: ClassVar[str] = "no_pretrain"
    version: ClassVar[str] = "1"
    pretrains: ClassVar[bool] = False  # trains nothing: plan counts no pre-training
    # reads neither the clients nor the partition: shared across partitions (benchmark.engine.sharing)
    partition_free: ClassVar[bool] = True
    # every step through ctx.precision (benchmark.core.precision)
    precisions: ClassVar[tuple[str, ...]] = PRECISIONS
    Config: ClassVar[type] = NoPretrainConfig
    requires: ClassVar[frozenset[Requirement]] = frozenset()
    payload_up: ClassVar[tuple[str, ...]] = ()
    payload_down: ClassVar[tuple[str, ...]] = ()

    def __init__(self, cfg: NoPretrainConfig, backbone: ComponentSpec, inputs: InputSpec) -> None:
        super().__init__(cfg, backbone, inputs)

    def init_server(self, ctx: RoundContext) -> ServerState:
        with scoped_torch_seed(ctx.seed, Stream.INIT):
            encoder, _ = build_backbone(self.backbone.name, dict(self.backbone.params))
        return ServerState(model=tensors_of(encoder, "encoder."))

    def init_client(self, client_id: int, server: ServerState) -> ClientState:
        return ClientState()

    def broadcast(self, server: ServerState, ctx: RoundContext) -> Payload:
        return Payload({})

    def client_update(self, down, state, data, ctx):
        return Payload({}, num_examples=data.num_examples), ClientState(last_round=ctx.round)

    def declared_traffic(self, tensors: ServerTensors, at: TrafficContext) -> Sent | None:
        """Nothing travels: the seeded initialisation is the server's."""
        return Sent(0, 0)

    def server_aggregate(self, server, ups, ctx, public: UnlabeledView | None):
        return server

    def encoder(
        self, server: ServerState, clients: Mapping[int, ClientState] | None = None
    ) -> Encoder:
        encoder, feat_dim = build_backbone(self.backbone.name, dict(self.backbone.params))
        load_tensors(encoder, select(server.model, "encoder.", strip=True))
        encoder.eval()
        return self.export(encoder, feat_dim)
