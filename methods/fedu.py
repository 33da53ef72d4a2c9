"""FedU (Zhuang et al., "Collaborative Unsupervised Visual Representation Learning from Decentralized Data",
ICCV 2021, arXiv 2108.06492; official code EasyFL ``applications/fedssl``). Spec: shared/specs/fedu.md.

BYOL on every client. Clients upload the online encoder (backbone + projector) and the predictor; the server
averages them with n_k weights; the target encoder never leaves the client (ClientState). At the start of a round
the global online encoder replaces the client's, and the divergence-aware predictor update (DAPU) keeps the local
predictor when D(θ_g, θ_k) ≥ μ_dapu (§2.4). FedEMA (methods/fedema.py) subclasses this class and replaces only
:meth:`FedU.merge`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Literal

import torch

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
    scoped_torch_seed,
    two_views,
)
from methods._shared.aggregate import aggregation_weights, weighted_average
from methods._shared.byol import BYOLEncoder, BYOLNet, byol_forward_loss, byol_heads, cosine_round_lr
from methods._shared.ema import divergence, divergence_tensor_names, ema_params_
from methods._shared.local_train import run_local_epochs
from methods._shared.modules import load_tensors, select, tensors_of

ONLINE, PREDICTOR, TARGET = "online.", "predictor.", "target."
SHARED_PREFIXES = (ONLINE, PREDICTOR)  # the 116 tensors of fedu.md §2.3 (at ResNet-18 size)

# EasyFL transform.py SimCLRTransform: ColorJitter(0.8, 0.8, 0.8, 0.2) p=0.8, grayscale p=0.2, no blur.
EASYFL_AUGMENT = AugmentConfig(jitter=(0.8, 0.8, 0.8, 0.2))


@dataclass(frozen=True, kw_only=True)
class FedUConfig:
    """Hyperparameters of fedu.md §3 (project defaults = EasyFL ``main.py`` / ``model.py``)."""

    dapu_threshold: float = 0.4  # μ_dapu, EasyFL main.py --dapu_threshold
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
    weighting: Literal["num_examples", "uniform"] = "num_examples"  # strategies.federated_averaging: n_k
    nan_policy: Literal["raise", "skip"] = "raise"
    augment: AugmentConfig = field(default_factory=lambda: EASYFL_AUGMENT)

    def __post_init__(self) -> None:
        if self.lr <= 0 or self.batch_size < 2 or not 0.0 <= self.target_momentum <= 1.0:
            raise ValueError("lr must be > 0, batch_size >= 2 and target_momentum in [0, 1]")


@dataclass(frozen=True)
class MergeResult:
    """What the client starts local training from, plus state that is not a network and logged metrics."""

    start: dict[str, torch.Tensor]  # online.*, predictor.*, target.*
    extra: dict[str, torch.Tensor]  # e.g. FedEMA's scaler
    metrics: dict[str, float]
    first: bool  # first participation (or reset): the target was just copied from the global online encoder


# smoke-sized heads: the spec's 4096/2048 heads would dominate a micro backbone's cost in CPU tests
BYOL_SMOKE = {"method": {"proj_hidden": 32, "proj_out": 16, "pred_hidden": 32}}


@METHODS.register("fedu")
class FedU(MethodBase):
    """FedU (Zhuang et al., ICCV 2021): BYOL clients, online encoder + predictor aggregated, DAPU (fedu.md §2)."""

    name: ClassVar[str] = "fedu"
    version: ClassVar[str] = "1"
    Config: ClassVar[type] = FedUConfig
    requires: ClassVar[frozenset[Requirement]] = frozenset()
    payload_up: ClassVar[tuple[str, ...]] = ("online.backbone.*", "online.projector.*", "predictor.*")
    payload_down: ClassVar[tuple[str, ...]] = ("online.backbone.*", "online.projector.*", "predictor.*")
    smoke_settings: ClassVar[dict] = BYOL_SMOKE

    def __init__(self, cfg: FedUConfig, backbone: ComponentSpec, inputs: InputSpec) -> None:
        super().__init__(cfg, backbone, inputs)
        self._net: BYOLNet | None = None
        self._device: torch.device | None = None

    # ---- model plumbing -------------------------------------------------------------------------------------
    def build(self) -> BYOLNet:
        cfg = self.cfg
        backbone, feat_dim = build_backbone(self.backbone.name, dict(self.backbone.params))
        projector, predictor = byol_heads(feat_dim, cfg.proj_hidden, cfg.proj_out, cfg.pred_hidden)
        tb, _ = build_backbone(self.backbone.name, dict(self.backbone.params))
        tp, _ = byol_heads(feat_dim, cfg.proj_hidden, cfg.proj_out, cfg.pred_hidden)
        return BYOLNet(BYOLEncoder(backbone, projector), predictor, BYOLEncoder(tb, tp))

    def net(self, device: torch.device) -> BYOLNet:
        """One working module per instance, reloaded from tensors at every use (it carries no state)."""
        if self._net is None or self._device != device:
            with scoped_torch_seed(0, Stream.INIT, 0):
                self._net = self.build().to(device)
            self._device = device
        return self._net

    def _cpu_net(self) -> BYOLNet:
        return self._net if self._net is not None else self.net(torch.device("cpu"))

    def divergence_names(self) -> list[str]:
        """𝒞: non-shortcut backbone conv weights of the online encoder (17 for ResNet-18), fedu.md §2.4."""
        return divergence_tensor_names(self._cpu_net().online.backbone, f"{ONLINE}backbone.")

    def param_names(self, prefix: str) -> set[str]:
        """Names of trainable parameters (not BN buffers) under ``prefix`` ("online." or "predictor.")."""
        return {k for k, _ in self._cpu_net().named_parameters() if k.startswith(prefix)}

    @staticmethod
    def as_target(online: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """An independent copy of an online encoder, renamed target.* (no shared storage)."""
        return {TARGET + k[len(ONLINE):]: v.clone() for k, v in online.items() if k.startswith(ONLINE)}

    # ---- hooks ------------------------------------------------------------------------------------------------
    def init_server(self, ctx: RoundContext) -> ServerState:
        with scoped_torch_seed(ctx.seed, Stream.INIT):
            net = self.build()
        tensors = tensors_of(net)
        return ServerState(model={k: v for k, v in tensors.items() if k.startswith(SHARED_PREFIXES)})

    def init_client(self, client_id: int, server: ServerState) -> ClientState:
        return ClientState()

    def broadcast(self, server: ServerState, ctx: RoundContext) -> Payload:
        return Payload({k: v for k, v in server.model.items() if k.startswith(SHARED_PREFIXES)})

    def local_divergence(self, down: Payload, state: ClientState) -> float:
        """d for the merge rule: D(θ_g, θ_k) (``global``) or the stored drift of the last training (§6.1)."""
        if self.cfg.divergence_ref == "local_drift":
            return float(state.tensors["drift"])
        return divergence(down.tensors, state.tensors, self.divergence_names())

    def merge(self, down: Payload, state: ClientState, ctx: RoundContext) -> MergeResult:
        """fedu.md §2.4 steps 1–2: first participation copies the global model; later ones apply DAPU."""
        glob = {k: v.clone() for k, v in down.tensors.items()}
        if state.last_round is None:
            return MergeResult({**glob, **self.as_target(glob)}, {}, {}, True)
        d = self.local_divergence(down, state)
        take_global = d < self.cfg.dapu_threshold
        pred = select(glob if take_global else state.tensors, PREDICTOR)
        start = {**select(glob, ONLINE), **{k: v.clone() for k, v in pred.items()}, **select(state.tensors, TARGET)}
        return MergeResult(start, {}, {"divergence": d, "dapu_global": float(take_global)}, False)

    def client_update(
        self, down: Payload, state: ClientState, data: ClientData, ctx: RoundContext
    ) -> tuple[Payload, ClientState]:
        cfg = self.cfg
        merged = self.merge(down, state, ctx)
        net = self.net(ctx.device)
        load_tensors(net, merged.start)
        net.train()
        alias = merged.first and cfg.first_round_target == "alias"
        lr = cosine_round_lr(cfg.lr, ctx.round, ctx.num_rounds)
        params = list(net.online.parameters()) + list(net.predictor.parameters())  # not ξ
        opt = torch.optim.SGD(params, lr=lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
        target_params, online_params = list(net.target.parameters()), list(net.online.parameters())
        view = data.train

        def step(batch: torch.Tensor) -> torch.Tensor:
            v1, v2 = two_views(batch, cfg.augment, ctx.generator, mean=view.mean, std=view.std)
            return byol_forward_loss(net, v1, v2, target_alias=alias)

        def after_step() -> None:  # ξ ← m ξ + (1 − m) θ on parameters only (fedu.md §2.4 step 3)
            if not alias:
                ema_params_(target_params, online_params, cfg.target_momentum)

        stats = run_local_epochs(view, step, opt, ctx, batch_size=cfg.batch_size, epochs=ctx.local_epochs,
                                 drop_last=cfg.drop_last, nan_policy=cfg.nan_policy, after_step=after_step)
        out = tensors_of(net)
        if alias:  # EasyFL: the target *is* the online encoder during the first round (§6.3)
            out.update(self.as_target(out))
        keep = {k: v for k, v in out.items() if k.startswith((ONLINE, PREDICTOR, TARGET))}
        keep.update(merged.extra)
        if cfg.divergence_ref == "local_drift":  # step 5: drift of this training, used at the next participation
            keep["drift"] = torch.tensor(divergence(merged.start, out, self.divergence_names()), dtype=torch.float64)
        up = {k: v for k, v in out.items() if k.startswith(SHARED_PREFIXES)}
        metrics = {**stats.as_dict(), "lr": lr, **merged.metrics}
        return (Payload(up, num_examples=data.num_examples, metrics=metrics),
                ClientState(tensors=keep, last_round=ctx.round))

    def server_aggregate(
        self, server: ServerState, ups: Mapping[int, Payload], ctx: RoundContext, public: UnlabeledView | None
    ) -> ServerState:
        """fedu.md §2.5: n_k-weighted average of every up-link tensor (parameters and BN running statistics)."""
        if not ups:
            return server
        payloads = [ups[k] for k in sorted(ups)]
        weights = aggregation_weights([p.num_examples for p in payloads], self.cfg.weighting)
        model = weighted_average([p.tensors for p in payloads], weights)
        return ServerState(model={**server.model, **model}, extra=server.extra)

    def encoder(self, server: ServerState, clients: Mapping[int, ClientState] | None = None) -> Encoder:
        """The global online backbone f_θg, projector removed (fedu.md §2.6)."""
        backbone, feat_dim = build_backbone(self.backbone.name, dict(self.backbone.params))
        load_tensors(backbone, select(server.model, f"{ONLINE}backbone.", strip=True))
        backbone.eval()
        return self.export(backbone, feat_dim)


def is_nan(t: torch.Tensor | None) -> bool:
    return t is None or math.isnan(float(t))
