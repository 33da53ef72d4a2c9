"""SimCLR pieces composed by FedAvg-SimCLR, its reference points (central_ssl, local_ssl) and
FeatARC (docs/methods/fedavg_simclr.md §2, §4, §5, §7): the config fields, the network, the loop
of FedAvg-SimCLR's client step (:func:`local_update`; the loss of one batch is the method's own,
written in its ``client_update``) and the family's other hooks (:class:`SimCLRFamily`).

Tensor layout: ``encoder.*`` (the backbone) and ``projector.*``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Literal

import torch
from torch import nn

from benchmark.api import (
    PRECISIONS,
    AugmentConfig,
    ClientData,
    ClientState,
    ComponentSpec,
    Encoder,
    Inert,
    InputSpec,
    MethodBase,
    Payload,
    RoundContext,
    Sent,
    ServerState,
    ServerTensors,
    Stream,
    TrafficContext,
    bn_tensor_names,
    build_backbone,
    load_tensors,
    mlp_head,
    run_local_epochs,
    scoped_torch_seed,
    tensors_of,
)
from methods._shared.nets import BackboneHead, WorkingNets
from methods._shared.optim import make_optimizer, optimizer_tensors, restore_optimizer, scheduled_lr

SIMCLR_NAMES = ("encoder", "projector")


@dataclass(frozen=True, kw_only=True)
class SimCLRConfig:
    """Hyperparameters of docs/methods/fedavg_simclr.md §4 (project defaults = Dec-SSL CIFAR code
    unless noted)."""

    loss_form: Literal["ntxent_2b", "crossview_1dir"] = "ntxent_2b"  # §2.3
    tau: float = 0.5  # τ, hard-coded 0.5 in the Dec-SSL code
    optimizer: Literal["adam", "sgd"] = "adam"
    lr: float = 1e-3
    weight_decay: float = 1e-6
    momentum: float = 0.9  # SGD only (Orchestra f-SimCLR preset)
    batch_size: int = 256
    # ×γ at 30/60/90 % of rounds (§2.4); "step_epochs": lr_milestones in epochs (central_ssl's
    # native [30, 60, 90])
    lr_schedule: Literal["step_rounds", "step_epochs", "constant"] = "step_rounds"
    lr_milestones: tuple[float, ...] = (0.3, 0.6, 0.9)
    lr_gamma: float = 0.3
    weighting: Literal["uniform", "num_examples", "num_batches"] = "num_examples"  # §7.2
    bn: Literal["average", "local"] = "average"  # §7.1
    # which tensors `bn: local` keeps on the client (§7.1): "type" = every BatchNorm module's
    # tensors; "decssl_names" = the Dec-SSL ImageNet code's rule, state-dict names containing "bn"
    # or "running" (so the stem's and the downsample's BN affine parameters, named f.1 /
    # downsample.1, are still averaged)
    bn_filter: Literal["type", "decssl_names"] = "type"
    optimizer_state: Literal["reset", "keep"] = "reset"  # §4
    nan_policy: Literal["raise", "skip"] = "raise"  # §7.9
    proj_hidden: int | None = None  # None: the backbone's feature dimension (512 for ResNet-18)
    proj_out: int | None = None  # None: the feature dimension ("flesd": 128)
    # Projector shape (§5 presets): "decssl" Linear-BN-ReLU-Linear (Dec-SSL SimCLR); "orchestra"
    # Linear(no bias)-BN- ReLU-Linear-BN(affine=False) (Orchestra's f-SimCLR); "flesd"
    # Linear-ReLU-Linear(d, 128) (FLESD's FedAvg).
    projector: Literal["decssl", "orchestra", "flesd"] = "decssl"
    augment: AugmentConfig = field(default_factory=AugmentConfig)

    def __post_init__(self) -> None:
        if self.tau <= 0 or self.lr <= 0 or self.batch_size < 2:
            raise ValueError("tau and lr must be > 0 and batch_size >= 2")


NAN_POLICY_INERT = (
    "acts only on a non-finite loss (raise, or skip the step); "
    "tests/benchmark/test_local_train.py holds both"
)
# SimCLRConfig's fields that do not move the first round of the live-settings cell
# (benchmark.commands.live_settings), each with why and where they do
SIMCLR_INERT: dict[str, str | Inert] = {
    "momentum": Inert(
        "SGD momentum: read only under optimizer sgd (the default is Adam)",
        live_with={"optimizer": "sgd"},
    ),
    "bn_filter": Inert(
        "§7.1: which tensors bn local keeps on the client, read only under bn local",
        live_with={"bn": "local"},
    ),
    "nan_policy": NAN_POLICY_INERT,
}


def simclr_projector(cfg: SimCLRConfig, feat_dim: int) -> nn.Sequential:
    """The projector of the configured shape (docs/methods/fedavg_simclr.md §5)."""
    hidden = cfg.proj_hidden or feat_dim
    if cfg.projector == "orchestra":
        return mlp_head(
            feat_dim,
            hidden,
            cfg.proj_out or feat_dim,
            bias_hidden=False,
            bn_last=True,
            bn_last_affine=False,
        )
    if cfg.projector == "flesd":
        return mlp_head(feat_dim, hidden, cfg.proj_out or 128, bn_hidden=False)
    return mlp_head(feat_dim, hidden, cfg.proj_out or feat_dim)


def simclr_net(backbone: ComponentSpec, cfg: SimCLRConfig) -> BackboneHead:
    """Backbone (``encoder``) then projector, built in that order (the order the seeded
    initialisation draws in)."""
    encoder, feat_dim = build_backbone(backbone.name, dict(backbone.params))
    return BackboneHead(encoder, simclr_projector(cfg, feat_dim), SIMCLR_NAMES)


def encoder_of(net: BackboneHead, tensors: Mapping[str, torch.Tensor]) -> nn.Module:
    """The backbone of ``net`` loaded from ``tensors``, in eval mode (the projector is discarded,
    §2.6)."""
    load_tensors(net, tensors)
    return net.encoder.eval()


def upload_weighting(cfg: SimCLRConfig) -> str:
    """The server's weighting mode: a ``num_batches`` client already reports its batch count as its
    weight."""
    return "num_examples" if cfg.weighting == "num_batches" else cfg.weighting


def local_bn_names(net: nn.Module, cfg: SimCLRConfig) -> set[str]:
    """The tensors ``bn: local`` keeps on the client, by ``cfg.bn_filter``
    (docs/methods/fedavg_simclr.md §7.1)."""
    if cfg.bn_filter == "decssl_names":
        return {
            k
            for k in net.state_dict()
            if not k.endswith("num_batches_tracked") and ("bn" in _decssl_name(k) or "running" in k)
        }
    return bn_tensor_names(net)


def _decssl_name(key: str) -> str:
    """Our name as Dec-SSL's model spells it, where it matters for the name rule: the ResNet stem's
    BatchNorm is our ``bn1`` and Dec-SSL's ``f.1`` (an ``nn.Sequential`` index, no "bn" in it, so
    its affine parameters are averaged)."""
    head, sep, rest = key.partition("bn1.")
    return f"{head}f.1.{rest}" if sep and head in ("", "encoder.") else key


def without(tensors: Mapping[str, torch.Tensor], names: set[str]) -> dict[str, torch.Tensor]:
    return {k: v for k, v in tensors.items() if k not in names}


def local_start(down: Payload, state: ClientState, cfg: SimCLRConfig) -> dict[str, torch.Tensor]:
    """The client's starting tensors: the broadcast, with its own BN tensors under ``bn: local``
    (§7.1)."""
    tensors = dict(down.tensors)
    if cfg.bn == "local":
        tensors.update({k: v for k, v in state.tensors.items() if not k.startswith("opt.")})
    return tensors


def local_update(
    net: nn.Module,
    start: Mapping[str, torch.Tensor],
    cfg: SimCLRConfig,
    state: ClientState,
    data: ClientData,
    ctx: RoundContext,
    batch_loss: Callable[[torch.Tensor], torch.Tensor],
) -> tuple[Payload, ClientState]:
    """The loop of FedAvg-SimCLR's client step (docs/methods/fedavg_simclr.md §2.1–2.4): E local
    epochs from ``start`` with a fresh (or, ``optimizer_state: keep``, restored) optimizer at the
    round's lr; uploads every tensor, keeps the BN tensors (``bn: local``) and the optimizer state
    (``keep``) on the client. ``batch_loss``: the loss of one batch, the method's own (its
    ``client_update`` in methods/fedavg_simclr.py and methods/baselines.py)."""
    load_tensors(net, start)
    net.train()
    lr = scheduled_lr(cfg, ctx.round, ctx.num_rounds, ctx.local_epochs)
    opt = make_optimizer(cfg, [p for p in net.parameters() if p.requires_grad], lr)
    if cfg.optimizer_state == "keep":
        restore_optimizer(opt, state.tensors, ctx.device)
        for group in opt.param_groups:
            group["lr"] = lr
    view = data.train
    stats = run_local_epochs(
        view,
        batch_loss,
        opt,
        ctx,
        batch_size=cfg.batch_size,
        epochs=ctx.local_epochs,
        nan_policy=cfg.nan_policy,
    )
    out = tensors_of(net)
    keep: dict[str, torch.Tensor] = {}
    if cfg.bn == "local":
        bn = local_bn_names(net, cfg)
        keep.update({k: v.clone() for k, v in out.items() if k in bn})
    if cfg.optimizer_state == "keep":
        keep.update(optimizer_tensors(opt))
    weight = stats.batches if cfg.weighting == "num_batches" else data.num_examples
    metrics = {**stats.as_dict(), "lr": lr}
    return Payload(out, num_examples=weight, metrics=metrics), ClientState(
        tensors=keep, last_round=ctx.round
    )


class SimCLRFamily(MethodBase):
    """The SimCLR family's hooks (docs/methods/fedavg_simclr.md §2): FedAvg-SimCLR, and its
    reference points central_ssl (one pooled client) and local_ssl (each client alone). The server
    starts from a freshly seeded SimCLR network; a client starts from the global weights (its own BN
    tensors under ``bn: local``, §7.1, :meth:`start_tensors`); the exported encoder is the backbone.
    Abstract: the client step (E local epochs of SimCLR through :func:`local_update`, its loss
    called there) and the server step (FedAvg through ``FedAvgServer``, or none for local_ssl) are
    the method's, with its name, version and Config."""

    # every step through ctx.precision (benchmark.core.precision)
    precisions: ClassVar[tuple[str, ...]] = PRECISIONS
    payload_up: ClassVar[tuple[str, ...]] = ("encoder.*", "projector.*")
    payload_down: ClassVar[tuple[str, ...]] = ("encoder.*", "projector.*")
    inert_settings: ClassVar[Mapping[str, str | Inert]] = SIMCLR_INERT
    cfg: SimCLRConfig

    def __init__(self, cfg: SimCLRConfig, backbone: ComponentSpec, inputs: InputSpec) -> None:
        super().__init__(cfg, backbone, inputs)
        self.nets = WorkingNets(self.build)

    # ---- model plumbing --------------------------------------------------------------------------
    def build(self) -> BackboneHead:
        return simclr_net(self.backbone, self.cfg)

    def bn_names(self) -> set[str]:
        return local_bn_names(self.nets.structure(), self.cfg)

    def fedavg_weighting(self) -> str:
        """The server's weighting mode for ``FedAvgServer`` (:func:`upload_weighting`)."""
        return upload_weighting(self.cfg)

    # ---- hooks -----------------------------------------------------------------------------------
    def init_server(self, ctx: RoundContext) -> ServerState:
        with scoped_torch_seed(ctx.seed, Stream.INIT):
            net = self.build()
        return ServerState(model=tensors_of(net))

    def init_client(self, client_id: int, server: ServerState) -> ClientState:
        if self.cfg.bn == "local":  # §7.1: BN tensors never leave the client
            bn = self.bn_names()
            return ClientState(tensors={k: v.clone() for k, v in server.model.items() if k in bn})
        return ClientState()

    def broadcast(self, server: ServerState, ctx: RoundContext) -> Payload:
        if self.cfg.bn == "local":
            return Payload(without(server.model, self.bn_names()))
        return Payload(dict(server.model))

    def start_tensors(self, down: Payload, state: ClientState) -> dict[str, torch.Tensor]:
        return local_start(down, state, self.cfg)

    def declared_traffic(self, tensors: ServerTensors, at: TrafficContext) -> Sent | None:
        """§2.1: a client uploads every tensor of its network (:func:`local_update`) and receives
        the global one, its BN tensors left out under ``bn: local`` (§7.1)."""
        local = self.bn_names() if self.cfg.bn == "local" else ()
        return Sent(up=tensors.model_bytes(), down=tensors.model_bytes(exclude=local))

    def encoder(
        self, server: ServerState, clients: Mapping[int, ClientState] | None = None
    ) -> Encoder:
        return self.export(encoder_of(self.build(), server.model))
