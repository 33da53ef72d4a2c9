"""FedAvg-SimCLR, the Dec-SSL method (Wang et al., ICLR 2023, arXiv 2210.10947, §2.1 and App. C.1).

Plain FedAvg whose local objective is SimCLR: each participating client starts from the global weights, runs E local
epochs of SimCLR (NT-Xent, τ = 0.5, Adam 1e-3, wd 1e-6, optimizer reset each round), and the server averages the
returned weights. Spec: shared/specs/fedavg_simclr.md (§2 algorithm, §4 hyperparameters, §7 resolutions).

Config keys beyond the spec's names: ``proj_hidden``/``proj_out`` (None = the backbone's feature dimension, which is
the spec's 512 for ResNet-18), ``augment`` (the two-view pipeline; default = Dec-SSL CIFAR, §2.5).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Literal

import torch
from torch import nn

from benchmark.api import (
    METHODS,
    AugmentConfig,
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
    build_backbone,
    prepare_module,
    scoped_torch_seed,
    two_views,
)
from methods._shared.aggregate import aggregation_weights, weighted_average
from methods._shared.heads import mlp_head
from methods._shared.local_train import run_local_epochs
from methods._shared.losses import CONTRASTIVE_LOSSES
from methods._shared.modules import bn_tensor_names, load_tensors, tensors_of


@dataclass(frozen=True, kw_only=True)
class FedAvgSimCLRConfig:
    """Hyperparameters of fedavg_simclr.md §4 (project defaults = Dec-SSL CIFAR code unless noted)."""

    loss_form: Literal["ntxent_2b", "crossview_1dir"] = "ntxent_2b"  # §2.3
    tau: float = 0.5  # τ, hard-coded 0.5 in the Dec-SSL code
    optimizer: Literal["adam", "sgd"] = "adam"
    lr: float = 1e-3
    weight_decay: float = 1e-6
    momentum: float = 0.9  # SGD only (Orchestra f-SimCLR preset)
    batch_size: int = 256
    lr_schedule: Literal["step_rounds", "constant"] = "step_rounds"  # ×γ at 30/60/90 % of rounds (§2.4)
    lr_milestones: tuple[float, ...] = (0.3, 0.6, 0.9)
    lr_gamma: float = 0.3
    weighting: Literal["uniform", "num_examples", "num_batches"] = "num_examples"  # §7.2
    bn: Literal["average", "local"] = "average"  # §7.1
    optimizer_state: Literal["reset", "keep"] = "reset"  # §4
    nan_policy: Literal["raise", "skip"] = "raise"  # §7.9
    proj_hidden: int | None = None  # None: the backbone's feature dimension (512 for ResNet-18)
    proj_out: int | None = None  # None: the feature dimension ("flesd": 128)
    # Projector shape (§5 presets): "decssl" Linear-BN-ReLU-Linear (Dec-SSL SimCLR); "orchestra" Linear(no bias)-BN-
    # ReLU-Linear-BN(affine=False) (Orchestra's f-SimCLR); "flesd" Linear-ReLU-Linear(d, 128) (FLESD's FedAvg).
    projector: Literal["decssl", "orchestra", "flesd"] = "decssl"
    augment: AugmentConfig = field(default_factory=AugmentConfig)

    def __post_init__(self) -> None:
        if self.tau <= 0 or self.lr <= 0 or self.batch_size < 2:
            raise ValueError("tau and lr must be > 0 and batch_size >= 2")


def simclr_projector(cfg: FedAvgSimCLRConfig, feat_dim: int) -> nn.Sequential:
    """The projector of the configured shape (fedavg_simclr.md §5)."""
    hidden = cfg.proj_hidden or feat_dim
    if cfg.projector == "orchestra":
        return mlp_head(feat_dim, hidden, cfg.proj_out or feat_dim, bias_hidden=False, bn_last=True,
                        bn_last_affine=False)
    if cfg.projector == "flesd":
        return mlp_head(feat_dim, hidden, cfg.proj_out or 128, bn_hidden=False)
    return mlp_head(feat_dim, hidden, cfg.proj_out or feat_dim)


class SimCLRNet(nn.Module):
    def __init__(self, encoder: nn.Module, projector: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder
        self.projector = projector

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.projector(self.encoder(x))


def round_lr(base_lr: float, round_1based: int, num_rounds: int, milestones: tuple[float, ...], gamma: float) -> float:
    """lr_t = lr · γ^{#{m ∈ milestones : m ≤ t}}, t = round − 1, milestones int(f·R) (fedavg_simclr.md §2.4)."""
    t = round_1based - 1
    steps = sum(1 for f in milestones if int(f * num_rounds) <= t)
    return base_lr * gamma**steps


def make_optimizer(cfg: FedAvgSimCLRConfig, params: list[nn.Parameter], lr: float) -> torch.optim.Optimizer:
    if cfg.optimizer == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=cfg.weight_decay)
    return torch.optim.SGD(params, lr=lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)


def optimizer_tensors(opt: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """Flatten an optimizer's per-parameter state into named CPU tensors (for ``optimizer_state: keep``)."""
    out = {}
    for idx, st in opt.state_dict()["state"].items():
        for key, value in st.items():
            t = value if isinstance(value, torch.Tensor) else torch.tensor(value)
            out[f"opt.{idx}.{key}"] = t.detach().to("cpu", copy=True)
    return out


def restore_optimizer(opt: torch.optim.Optimizer, tensors: Mapping[str, torch.Tensor], device: torch.device) -> None:
    state: dict[int, dict[str, torch.Tensor]] = {}
    for name, value in tensors.items():
        if not name.startswith("opt."):
            continue
        _, idx, key = name.split(".", 2)
        state.setdefault(int(idx), {})[key] = value.to(device) if key != "step" else value.clone()
    if state:
        sd = opt.state_dict()
        sd["state"] = state
        opt.load_state_dict(sd)


@METHODS.register("fedavg_simclr", aliases=("dec_ssl", "fedsimclr", "f-simclr"))
class FedAvgSimCLR(MethodBase):
    """FedAvg-SimCLR / Dec-SSL (Wang et al., ICLR 2023; §2.1, App. C.1); also Orchestra's f-SimCLR, FLESD's FedAvg."""

    name: ClassVar[str] = "fedavg_simclr"
    version: ClassVar[str] = "1"
    Config: ClassVar[type] = FedAvgSimCLRConfig
    requires: ClassVar[frozenset[Requirement]] = frozenset()
    payload_up: ClassVar[tuple[str, ...]] = ("encoder.*", "projector.*")
    payload_down: ClassVar[tuple[str, ...]] = ("encoder.*", "projector.*")

    def __init__(self, cfg: FedAvgSimCLRConfig, backbone: ComponentSpec, inputs: InputSpec) -> None:
        super().__init__(cfg, backbone, inputs)
        self._net: SimCLRNet | None = None
        self._device: torch.device | None = None

    # ---- model plumbing -------------------------------------------------------------------------------------
    def build(self) -> SimCLRNet:
        encoder, feat_dim = build_backbone(self.backbone.name, dict(self.backbone.params))
        return SimCLRNet(encoder, simclr_projector(self.cfg, feat_dim))

    def net(self, device: torch.device) -> SimCLRNet:
        """One working module per instance, reloaded from tensors at every use (it carries no state)."""
        if self._net is None or self._device != device:
            with scoped_torch_seed(0, Stream.INIT, 0):
                self._net = self.build().to(device)
            self._device = device
        return self._net

    def bn_names(self) -> set[str]:
        return bn_tensor_names(self.net(torch.device("cpu")) if self._net is None else self._net)

    # ---- hooks ------------------------------------------------------------------------------------------------
    def init_server(self, ctx: RoundContext) -> ServerState:
        with scoped_torch_seed(ctx.seed, Stream.INIT):
            net = self.build()
        return ServerState(model=tensors_of(net))

    def init_client(self, client_id: int, server: ServerState) -> ClientState:
        if self.cfg.bn == "local":
            bn = self.bn_names()
            return ClientState(tensors={k: v.clone() for k, v in server.model.items() if k in bn})
        return ClientState()

    def broadcast(self, server: ServerState, ctx: RoundContext) -> Payload:
        if self.cfg.bn == "local":
            bn = self.bn_names()
            return Payload({k: v for k, v in server.model.items() if k not in bn})
        return Payload(dict(server.model))

    def start_tensors(self, down: Payload, state: ClientState) -> dict[str, torch.Tensor]:
        tensors = dict(down.tensors)
        if self.cfg.bn == "local":
            tensors.update({k: v for k, v in state.tensors.items() if not k.startswith("opt.")})
        return tensors

    def client_update(
        self, down: Payload, state: ClientState, data: ClientData, ctx: RoundContext
    ) -> tuple[Payload, ClientState]:
        cfg = self.cfg
        net = prepare_module(self.net(ctx.device), ctx.device, channels_last=ctx.channels_last)
        load_tensors(net, self.start_tensors(down, state))
        net.train()
        lr = round_lr(cfg.lr, ctx.round, ctx.num_rounds, cfg.lr_milestones, cfg.lr_gamma) \
            if cfg.lr_schedule == "step_rounds" else cfg.lr
        params = [p for p in net.parameters() if p.requires_grad]
        opt = make_optimizer(cfg, params, lr)
        if cfg.optimizer_state == "keep":
            restore_optimizer(opt, state.tensors, ctx.device)
            for group in opt.param_groups:
                group["lr"] = lr
        loss_fn = CONTRASTIVE_LOSSES[cfg.loss_form]
        view = data.train

        def step(batch: torch.Tensor) -> torch.Tensor:
            v1, v2 = two_views(batch, cfg.augment, ctx.generator, mean=view.mean, std=view.std)
            z = net(torch.cat([v1, v2]))
            z1, z2 = z.chunk(2)
            return loss_fn(z1, z2, cfg.tau)

        stats = run_local_epochs(view, step, opt, ctx, batch_size=cfg.batch_size, epochs=ctx.local_epochs,
                                 nan_policy=cfg.nan_policy)
        out = tensors_of(net)
        keep: dict[str, torch.Tensor] = {}
        if cfg.bn == "local":
            bn = bn_tensor_names(net)
            keep.update({k: v.clone() for k, v in out.items() if k in bn})
        if cfg.optimizer_state == "keep":
            keep.update(optimizer_tensors(opt))
        weight = stats.batches if cfg.weighting == "num_batches" else data.num_examples
        metrics = {**stats.as_dict(), "lr": lr}
        return Payload(out, num_examples=weight, metrics=metrics), ClientState(tensors=keep, last_round=ctx.round)

    def server_aggregate(
        self, server: ServerState, ups: Mapping[int, Payload], ctx: RoundContext, public: UnlabeledView | None
    ) -> ServerState:
        if not ups:
            return server
        payloads = [ups[k] for k in sorted(ups)]
        counts = [p.num_examples for p in payloads]
        mode = "num_examples" if self.cfg.weighting == "num_batches" else self.cfg.weighting
        weights = aggregation_weights(counts, mode)
        model = weighted_average([p.tensors for p in payloads], weights)
        return ServerState(model={**server.model, **model}, extra=server.extra)

    def encoder(self, server: ServerState, clients: Mapping[int, ClientState] | None = None) -> Encoder:
        net = self.build()
        load_tensors(net, server.model)
        enc = net.encoder.eval()
        return self.export(enc)
