"""Federated BYOL as FedU and FedEMA run it (docs/methods/fedu.md §2, §3; docs/methods/fedema.md
§2): the config fields, the client's networks, the first-participation copy, the local training
after a merge, and the tensors that are shared.

The two methods differ only in how a returning client merges the global model into its own (FedU:
DAPU, FedEMA: a divergence-aware EMA): :class:`FederatedBYOL` holds every hook but ``merge``, and
each method file writes its merge.

Tensor layout (docs/methods/fedu.md §2.3): ``online.backbone.*``, ``online.projector.*``,
``predictor.*`` (shared with the server) and ``target.backbone.*``, ``target.projector.*`` (never
leave the client).
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
    Requirement,
    RoundContext,
    Sent,
    ServerState,
    ServerTensors,
    Stream,
    TrafficContext,
    build_backbone,
    divergence,
    load_tensors,
    run_local_epochs,
    scoped_torch_seed,
    select,
    tensors_of,
)
from methods._shared.aggregate import FedAvgServer
from methods._shared.byol import (
    BYOLNet,
    byol_encoder,
    byol_heads,
    cosine_round_lr,
)
from methods._shared.ema import divergence_tensor_names, ema_params_
from methods._shared.nets import WorkingNets

ONLINE, PREDICTOR, TARGET = "online.", "predictor.", "target."
# the 116 tensors of docs/methods/fedu.md §2.3 (at ResNet-18 size)
SHARED_PREFIXES = (ONLINE, PREDICTOR)

# EasyFL transform.py SimCLRTransform: ColorJitter(0.8, 0.8, 0.8, 0.2) p=0.8, grayscale p=0.2, no
# blur.
EASYFL_AUGMENT = AugmentConfig(jitter=(0.8, 0.8, 0.8, 0.2))

# BYOLConfig's fields that do not move the first round of the live-settings cell
# (benchmark.commands.live_settings), each with why and where they do
BYOL_INERT: dict[str, str | Inert] = {
    "dapu_threshold": Inert(
        "DAPU (fedu.md §2.4 step 2) compares the divergence with it at a client's next "
        "participation",
        from_round=2,
    ),
    "nan_policy": (
        "acts only on a non-finite loss (raise, or skip the step); "
        "tests/benchmark/test_local_train.py holds both"
    ),
}

# smoke-sized heads: the spec's 4096/2048 heads would dominate a micro backbone's cost in CPU tests
BYOL_SMOKE = {"method": {"proj_hidden": 32, "proj_out": 16, "pred_hidden": 32}}


@dataclass(frozen=True, kw_only=True)
class BYOLConfig:
    """Hyperparameters of docs/methods/fedu.md §3 (project defaults = EasyFL ``main.py`` /
    ``model.py``)."""

    dapu_threshold: float = 0.4  # μ_dapu, EasyFL main.py --dapu_threshold
    # DEVIATION: FedU's default compares the new global model with the client's old local one (the
    # paper's
    # formula); EasyFL's code uses the drift of the client's last local training ("local_drift",
    # FedEMA's
    # default). The spec keeps the paper's; native_fedu runs both (docs/official-code.md)
    divergence_ref: Literal["global", "local_drift"] = "global"  # §6.1
    first_round_target: Literal["copy", "alias"] = "copy"  # §6.3 (EasyFL aliases online and target)
    target_momentum: float = 0.99  # m, EasyFL model.py moving_average_decay
    lr: float = 0.032  # η₀, cosine over rounds, constant within a round (client.py:compute_lr)
    momentum: float = 0.9  # SGD momentum (client.py:load_optimizer)
    weight_decay: float = 5e-4
    batch_size: int = 128  # main.py
    drop_last: bool = True  # EasyFL data loader
    proj_hidden: int = 4096  # model.py projection_hidden_size
    proj_out: int = 2048  # model.py projection_size
    pred_hidden: int = 4096  # --predictor_network 2_layer
    # strategies.federated_averaging: n_k
    weighting: Literal["num_examples", "uniform"] = "num_examples"
    nan_policy: Literal["raise", "skip"] = "raise"
    augment: AugmentConfig = field(default_factory=lambda: EASYFL_AUGMENT)

    def __post_init__(self) -> None:
        if self.lr <= 0 or self.batch_size < 2 or not 0.0 <= self.target_momentum <= 1.0:
            raise ValueError("lr must be > 0, batch_size >= 2 and target_momentum in [0, 1]")


@dataclass(frozen=True)
class MergeResult:
    """What the client starts local training from, plus state that is not a network and logged
    metrics."""

    start: dict[str, torch.Tensor]  # online.*, predictor.*, target.*
    extra: dict[str, torch.Tensor]  # e.g. FedEMA's scaler
    metrics: dict[str, float]
    # first participation (or reset): the target was just copied from the global online encoder
    first: bool


def byol_net(backbone: ComponentSpec, cfg: BYOLConfig) -> BYOLNet:
    """Online encoder θ (backbone + projector), predictor h, target ξ; built in that order (the
    seeded draws)."""
    online_backbone, feat_dim = build_backbone(backbone.name, dict(backbone.params))
    projector, predictor = byol_heads(feat_dim, cfg.proj_hidden, cfg.proj_out, cfg.pred_hidden)
    target_backbone, _ = build_backbone(backbone.name, dict(backbone.params))
    target_projector, _ = byol_heads(feat_dim, cfg.proj_hidden, cfg.proj_out, cfg.pred_hidden)
    return BYOLNet(
        byol_encoder(online_backbone, projector),
        predictor,
        byol_encoder(target_backbone, target_projector),
    )


def shared(tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The tensors that travel between client and server: online encoder and predictor
    (docs/methods/fedu.md §2.3)."""
    return {k: v for k, v in tensors.items() if k.startswith(SHARED_PREFIXES)}


def divergence_names(net: BYOLNet) -> list[str]:
    """𝒞: non-shortcut backbone conv weights of the online encoder (17 for ResNet-18),
    docs/methods/fedu.md §2.4."""
    return divergence_tensor_names(net.online.backbone, f"{ONLINE}backbone.")


def param_names(net: nn.Module, prefix: str) -> set[str]:
    """Names of trainable parameters (not BN buffers) under ``prefix`` ("online." or
    "predictor.")."""
    return {k for k, _ in net.named_parameters() if k.startswith(prefix)}


def as_target(online: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """An independent copy of an online encoder, renamed target.* (no shared storage)."""
    return {TARGET + k[len(ONLINE) :]: v.clone() for k, v in online.items() if k.startswith(ONLINE)}


def first_merge(
    glob: Mapping[str, torch.Tensor], extra: dict[str, torch.Tensor] | None = None
) -> MergeResult:
    """First participation (docs/methods/fedu.md §2.4 step 1): the global networks, the target a
    copy of the online encoder."""
    return MergeResult({**glob, **as_target(glob)}, extra or {}, {}, True)


def local_divergence(cfg: BYOLConfig, down: Payload, state: ClientState, names: list[str]) -> float:
    """d for the merge rule: D(θ_g, θ_k) (``global``) or the stored drift of the last training
    (docs/methods/fedu.md §6.1)."""
    if cfg.divergence_ref == "local_drift":
        return float(state.tensors["drift"])
    return divergence(down.tensors, state.tensors, names)


def target_is_online(cfg: BYOLConfig, merged: MergeResult) -> bool:
    """EasyFL's first round (docs/methods/fedu.md §6.3): the target *is* the online encoder."""
    return merged.first and cfg.first_round_target == "alias"


def local_update(
    net: BYOLNet,
    cfg: BYOLConfig,
    merged: MergeResult,
    data: ClientData,
    ctx: RoundContext,
    batch_loss: Callable[[torch.Tensor], torch.Tensor],
) -> tuple[Payload, ClientState]:
    """docs/methods/fedu.md §2.4 steps 3–5 after the merge: E epochs of BYOL with SGD on θ and h (lr
    cosine over rounds, fresh momentum), ξ ← m ξ + (1 − m) θ after each step; uploads θ and h, keeps
    θ, h, ξ (and the drift). ``batch_loss``: the loss of one batch, the method's own (its
    ``client_update`` in methods/fedu.py and methods/fedema.py)."""
    load_tensors(net, merged.start)
    net.train()
    alias = target_is_online(cfg, merged)
    lr = cosine_round_lr(cfg.lr, ctx.round, ctx.num_rounds)
    params = list(net.online.parameters()) + list(net.predictor.parameters())  # not ξ
    opt = torch.optim.SGD(params, lr=lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    target_params, online_params = list(net.target.parameters()), list(net.online.parameters())
    view = data.train

    # ξ ← m ξ + (1 − m) θ on parameters only (docs/methods/fedu.md §2.4 step 3)
    def after_step() -> None:
        if not alias:
            ema_params_(target_params, online_params, cfg.target_momentum)

    stats = run_local_epochs(
        view,
        batch_loss,
        opt,
        ctx,
        batch_size=cfg.batch_size,
        epochs=ctx.local_epochs,
        drop_last=cfg.drop_last,
        nan_policy=cfg.nan_policy,
        after_step=after_step,
    )
    out = tensors_of(net)
    if alias:  # EasyFL: the target *is* the online encoder during the first round (§6.3)
        out.update(as_target(out))
    keep = {k: v for k, v in out.items() if k.startswith((ONLINE, PREDICTOR, TARGET))}
    keep.update(merged.extra)
    # step 5: drift of this training, used at the next participation
    if cfg.divergence_ref == "local_drift":
        keep["drift"] = torch.tensor(
            divergence(merged.start, out, divergence_names(net)), dtype=torch.float64
        )
    metrics = {**stats.as_dict(), "lr": lr, **merged.metrics}
    return (
        Payload(shared(out), num_examples=data.num_examples, metrics=metrics),
        ClientState(tensors=keep, last_round=ctx.round),
    )


def online_backbone(
    backbone: ComponentSpec, model: Mapping[str, torch.Tensor]
) -> tuple[nn.Module, int]:
    """The global online backbone f_θg, projector removed (docs/methods/fedu.md §2.6), in eval mode,
    and its feature size."""
    module, feat_dim = build_backbone(backbone.name, dict(backbone.params))
    load_tensors(module, select(model, f"{ONLINE}backbone.", strip=True))
    return module.eval(), feat_dim


class FederatedBYOL(FedAvgServer, MethodBase):
    """The federated-BYOL family (docs/methods/fedu.md §2, docs/methods/fedema.md §2.2, §2.5, §2.6):
    BYOL on every client, the online encoder and the predictor averaged by the server (FedAvg,
    :class:`FedAvgServer`), the target encoder kept on the client, the global online backbone
    exported. Abstract: a method subclasses it once and writes ``merge``, how a returning client
    takes the global model (and its name, version and Config)."""

    # every step through ctx.precision (benchmark.core.precision)
    precisions: ClassVar[tuple[str, ...]] = PRECISIONS
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
    inert_settings: ClassVar[Mapping[str, str | Inert]] = BYOL_INERT
    cfg: BYOLConfig

    def __init__(self, cfg: BYOLConfig, backbone: ComponentSpec, inputs: InputSpec) -> None:
        super().__init__(cfg, backbone, inputs)
        self.nets = WorkingNets(self.build)

    # ---- model plumbing --------------------------------------------------------------------------
    def build(self) -> BYOLNet:
        return byol_net(self.backbone, self.cfg)

    def divergence_names(self) -> list[str]:
        """𝒞 of docs/methods/fedu.md §2.4 (docs/methods/fedema.md §2.4 step 3): the online
        backbone's non-shortcut conv weights (17 for ResNet-18)."""
        return divergence_names(self.nets.structure())

    def fedavg_weighting(self) -> str:
        """docs/methods/fedu.md §2.5: n_k (or uniform) weights, by ``weighting``."""
        return self.cfg.weighting

    # ---- hooks -----------------------------------------------------------------------------------
    def merge(self, down: Payload, state: ClientState, ctx: RoundContext) -> MergeResult:
        """The client's start of the round from the global model ``down`` and its own ``state``:
        the one hook a federated-BYOL method writes."""
        raise NotImplementedError(f"{type(self).__name__} must define merge")

    def init_server(self, ctx: RoundContext) -> ServerState:
        with scoped_torch_seed(ctx.seed, Stream.INIT):
            net = self.build()
        return ServerState(model=shared(tensors_of(net)))

    def init_client(self, client_id: int, server: ServerState) -> ClientState:
        return ClientState()

    def broadcast(self, server: ServerState, ctx: RoundContext) -> Payload:
        return Payload(shared(server.model))

    def declared_traffic(self, tensors: ServerTensors, at: TrafficContext) -> Sent | None:
        """docs/methods/fedu.md §2.3: the online encoder and the predictor both ways; the target
        stays on the client."""
        both = tensors.model_bytes(prefix=SHARED_PREFIXES)
        return Sent(up=both, down=both)

    def encoder(
        self, server: ServerState, clients: Mapping[int, ClientState] | None = None
    ) -> Encoder:
        """The global online backbone f_θg, projector removed (docs/methods/fedu.md §2.6)."""
        return self.export(*online_backbone(self.backbone, server.model))
