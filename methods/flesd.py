"""FLESD (Shi, Zhang, Shen, Tang, Li, Guo, Zhuang; arXiv 2109.14611): ensemble similarity
distillation.

Spec: docs/methods/flesd.md. Implemented: local SimCLR (one-directional cross-view InfoNCE, Adam)
from the global model (§2.6), inference on the public set D_pub with the uploaded N × 128 embeddings
(default) or the paper's N × N similarity matrix, dense or top-n% sparsified (§2.4, §2.7), the
server's ensemble of sharpened similarities (Eq. 5-6) and the similarity distillation with a
momentum encoder and an anchor queue (Eq. 7-10, §2.8), with the distilled student broadcast back
(§2.5). Needs a public split: ``requires = {PUBLIC_DATA}``; the engine hands the public view to
clients (``ctx.public``) and to the server.

Config keys beyond the spec's names: ``head_hidden`` (None = the backbone's feature dimension, the
spec's d), ``augment`` (the training views of §2.9, used locally and in ESD).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Literal

import torch
import torch.nn.functional as F
from torch import nn

from benchmark.api import (
    FP32,
    METHODS,
    PRECISIONS,
    AugmentConfig,
    ClientData,
    ClientState,
    ComponentSpec,
    Diverged,
    Encoder,
    Inert,
    InputSpec,
    MethodBase,
    Payload,
    Precision,
    Requirement,
    RoundContext,
    Sent,
    ServerState,
    ServerTensors,
    Stream,
    TrafficContext,
    UnlabeledView,
    adam,
    build_backbone,
    fp32_math,
    load_tensors,
    mlp_head,
    normalize,
    run_local_epochs,
    scoped_torch_seed,
    tensors_of,
    to_device,
    two_views,
)
from benchmark.api import portable_math as pmath
from methods._shared.ema import momentum_update_
from methods._shared.losses import CONTRASTIVE_LOSSES
from methods._shared.nets import BackboneHead, WorkingNets

# --------------------------------------------------------------------------------------------------
# Ensemble similarity distillation maths (FLESD, Shi et al. arXiv 2109.14611; docs/methods/flesd.md
# §2.6-§2.8): pure functions.
#
# - ``similarity_matrix``: M = Rᵀ R of unit-norm representations (Eq. 4; rows here are samples, so M =
#   R Rᵀ).
# - ``topk_sparsify`` / ``topk_payload`` / ``densify_topk``: top-n% of each row kept (self + k'
#   others), the rest set to 0 in cosine space, before the exponential (§2.7 step 2, code semantics).
# - ``ensemble_similarities``: Ebar = mean_k exp((M_k − 1)/τ_T) (Eq. 5-6, shifted by the constant 1,
#   §2.7 step 3).
# - ``distill_targets``: p_iu = Ebar[I_i, qidx_u] / Σ_u' Ebar[I_i, qidx_u'] (Eq. 8).
# - ``similarity_distill_loss``: KL(p ‖ softmax(qs·Qk/τ_S)) (Eq. 7, 9) and the code's cross-entropy
#   form.
# (folded in from methods/_shared/distill.py: this method is its only user)
# --------------------------------------------------------------------------------------------------


@fp32_math
def similarity_matrix(reps: torch.Tensor) -> torch.Tensor:
    """N × N cosine similarities of N representations (rows normalised first). Symmetric, diagonal
    1."""
    r = F.normalize(reps.float(), dim=1)  # fp32: fp32_math casts every float input, float64 too
    return r @ r.t()


def topk_count(percent: float, n: int) -> int:
    """k' = floor(n · N / 100) off-diagonal entries kept per row (docs/methods/flesd.md §2.4)."""
    # DEVIATION: the official code keeps int(n / 100 · N) + 1 entries in all, self included, which
    # float rounding makes one fewer for 98 of 197,109 (n, N) pairs (n = 29, N = 100: 29 against
    # our 30);
    # we keep the exact floor of n % (docs/official-code.md)
    return int(percent * n // 100)


@torch.no_grad()
def topk_payload(sim: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Client-side sparsification: the k largest off-diagonal entries of each row → (values f32,
    indices int32).

    The diagonal is implicit (1.0) and not sent. Ties are broken by ``torch.topk`` (lower index
    first is not guaranteed); ``topk_sparsify`` keeps all threshold ties, so the two agree barring
    ties.
    """
    s = sim.float().clone()
    s.fill_diagonal_(-float("inf"))
    values, indices = torch.topk(s, k, dim=1)
    return values.contiguous(), indices.to(torch.int32).contiguous()


@torch.no_grad()
def densify_topk(values: torch.Tensor, indices: torch.Tensor, n: int) -> torch.Tensor:
    """Server-side: the dense N × N matrix of a top-k payload; dropped entries 0, the diagonal 1."""
    dense = torch.zeros(n, n, dtype=torch.float32, device=values.device)
    dense.scatter_(1, indices.long(), values.float())
    dense.fill_diagonal_(1.0)
    return dense


@torch.no_grad()
def topk_sparsify(sim: torch.Tensor, k: int) -> torch.Tensor:
    """Keep, per row, the self entry and the k largest other entries (ties at the threshold kept);
    zero the rest.

    Code semantics (docs/methods/flesd.md §2.7 step 2, §6 item 8): zeroed in cosine space, so after
    the shifted exponential a dropped entry weighs exp(−1/τ_T), not 0. The result is no longer
    symmetric.
    """
    s = sim.float()
    n = s.shape[0]
    if k >= n - 1:
        return s.clone()
    off = s.clone()
    off.fill_diagonal_(-float("inf"))
    thresh = (
        torch.topk(off, k, dim=1).values[:, -1:]
        if k > 0
        else torch.full((n, 1), float("inf"), device=s.device)
    )
    # DEVIATION: compared exactly; the official code keeps values above thresh - 1e-6 (near-ties)
    keep = off >= thresh
    keep.fill_diagonal_(True)
    return torch.where(keep, s, torch.zeros_like(s))


# similarities and distillation targets in fp32 under any autocast (benchmark.core.precision)
@fp32_math
def ensemble_similarities(sims: Sequence[torch.Tensor], tau_teacher: float) -> torch.Tensor:
    """Ebar = (1/|S|) Σ_k exp((M_k − 1)/τ_T): unweighted, order-free; = mean exp(M_k/τ_T) ·
    exp(−1/τ_T)."""
    if not sims:
        raise ValueError("need at least one similarity matrix")
    acc = torch.zeros_like(sims[0], dtype=sims[0].dtype)
    for m in sims:
        # DEVIATION: the official code (`ensemble_sims`) subtracts each row's maximum, we the
        # constant 1 (Eq. 5-6 up to one global factor). The two agree wherever a row's maximum is
        # its diagonal, 1; they differ on the row of a zero embedding (normalised to 0, so the row
        # is all 0): the official code gives it exp(0) = 1 everywhere, which outweighs every other
        # client's row in the mean, we exp(-1/τ_T), a cosine of 0 as Eq. 5 reads it
        # (docs/official-code.md; tests/methods/test_flesd_distill.py pins it)
        acc = acc + pmath.exp((m - 1.0) / tau_teacher)
    return acc / len(sims)


# similarities and distillation targets in fp32 under any autocast (benchmark.core.precision)
@fp32_math
def distill_targets(ebar: torch.Tensor, rows: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
    """p_iu = Ebar[I_i, qidx_u] / Σ_u' Ebar[I_i, qidx_u'] (Eq. 8): B' × m, rows sum to 1, scale
    invariant."""
    sub = ebar[rows.long()][:, anchors.long()]
    return sub / sub.sum(dim=1, keepdim=True)


# similarities and distillation targets in fp32 under any autocast (benchmark.core.precision)
@fp32_math
def similarity_distill_loss(
    queries: torch.Tensor, keys: torch.Tensor, targets: torch.Tensor, tau_student: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(cross-entropy −Σ p log Q, KL(p‖Q)), both averaged over queries (Eq. 7, 9).

    ``queries`` B' × h and ``keys`` (the anchor queue, as rows) m × h are unit-norm; Q =
    softmax(q·k/τ_S). The cross-entropy is what is minimised (same gradient as KL, the code's form);
    the KL is what is logged.
    """
    log_q = F.log_softmax(queries.float() @ keys.float().t() / tau_student, dim=1)
    p = targets.float()
    ce = -(p * log_q).sum(dim=1).mean()
    # p log p, 0 at p = 0: -entr(p), whose log is the C library's per element, not MKL's vector
    # maths (whose bits depend on the CPU's vendor; benchmark.portable.math_ops)
    plogp = -torch.special.entr(p)
    kl = (plogp - p * log_q).sum(dim=1).mean()
    return ce, kl


def esd_schedule(
    num_public: int, batch_size: int, queue_size: int, epochs: int, skip_fill: str
) -> int:
    """Optimiser steps of one ESD round (docs/methods/flesd.md §2.8 step 4, §6 item 10); raises on
    an invalid setting.

    Each epoch has floor(N/B') batches (drop_last); the first m/B' batches are skipped every epoch
    (``every_epoch``, the code) or only in epoch 1 (``first_epoch``).
    """
    if queue_size % batch_size != 0:
        raise ValueError(
            f"queue_size m={queue_size} must be a multiple of distill_batch_size B'={batch_size}"
        )
    per_epoch = num_public // batch_size
    fill = queue_size // batch_size
    if skip_fill == "every_epoch":
        if per_epoch <= fill:
            raise ValueError(
                f"ESD would take no step: floor(N/B') = {per_epoch} <= m/B' = {fill} "
                f"(N={num_public}, B'={batch_size}, m={queue_size}); lower queue_size"
            )
        return epochs * (per_epoch - fill)
    if skip_fill == "first_epoch":
        return max(0, epochs * per_epoch - fill)
    raise ValueError(f"unknown skip_fill {skip_fill!r}")


# §2.9 CIFAR training views: RRC(scale (0.2, 1)), ColorJitter(0.8, 0.8, 0.8, 0.2) p 0.8, grayscale
# 0.2, flip, no blur.
AUGMENT_FLESD = AugmentConfig(
    crop_scale=(0.2, 1.0),
    jitter=(0.8, 0.8, 0.8, 0.2),
    jitter_p=0.8,
    gray_p=0.2,
    flip_p=0.5,
    blur_p=0.0,
)
IMAGENET_STATS = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))


@dataclass(frozen=True, kw_only=True)
class FLESDConfig:
    """Hyperparameters of docs/methods/flesd.md §3 (project defaults = the official CIFAR
    scripts)."""

    local_loss: Literal["crossview_1dir", "ntxent_2b"] = "crossview_1dir"  # §6 item 1 [C]
    local_tau: float = 0.4  # τ, local InfoNCE (CIFAR, §2 of the paper)
    local_lr: float = 1e-3  # Adam [P]
    local_weight_decay: float = 1e-6  # [C]
    local_batch_size: int = 1024  # B, CIFAR [P §2 / C]
    head_dim: int = 128  # h, head output width [C]
    head_hidden: int | None = None  # Linear(d, d) of the head; None = backbone feature dimension
    tau_teacher: float = 0.1  # τ_T, sharpening exp(M/τ_T), Eq. 5-6
    tau_student: float = 0.1  # τ_S, student softmax over anchors, Eq. 7
    distill_lr: float = 1e-3  # Adam [P]
    distill_weight_decay: float = 1e-6  # [C]
    distill_batch_size: int = 128  # B' [P]
    distill_epochs: int = 200  # E_esd, epochs over D_pub per round [P]
    key_momentum: float = 0.999  # ζ, momentum encoder, Eq. 10 [P]
    queue_size: int = 2048  # m, anchors [P]
    topk_percent: float = 100.0  # top-n% of each similarity row kept (§4.3 ablation) [P]
    skip_fill: Literal["every_epoch", "first_epoch"] = "every_epoch"  # §6 item 10 [C]
    # DEVIATION: the paper uploads the N × N similarity matrix M_k; the official code (and our
    # default) uploads the N × 128 embeddings and the server forms M_k (docs/design.md §4.12,
    # docs/methods/flesd.md §6 item 4). Training is identical; bytes are counted for what is
    # actually sent. "similarity" reproduces the paper's protocol and byte counts.
    upload: Literal["embeddings", "similarity"] = "embeddings"
    infer_normalization: Literal["train", "imagenet"] = "train"  # §6 item 5
    infer_batch_size: int = 128  # [C]
    nan_policy: Literal["raise", "skip"] = "raise"
    augment: AugmentConfig = field(default_factory=lambda: AUGMENT_FLESD)

    def __post_init__(self) -> None:
        if self.queue_size % self.distill_batch_size != 0:
            raise ValueError(
                f"queue_size m={self.queue_size} must be a multiple of "
                f"distill_batch_size B'={self.distill_batch_size}"
            )
        if not 0 < self.topk_percent <= 100:
            raise ValueError("topk_percent must be in (0, 100]")
        if min(self.local_tau, self.tau_teacher, self.tau_student) <= 0:
            raise ValueError("temperatures must be > 0")
        if not 0 <= self.key_momentum <= 1:
            raise ValueError("key_momentum must be in [0, 1]")
        if self.local_batch_size < 2 or self.distill_batch_size < 1:
            raise ValueError("batch sizes too small")


@dataclass
class AnchorQueue:
    """m anchors (rows, unit norm) with the D_pub index each one came from; FIFO pointer
    (docs/methods/flesd.md §2.8 step 2-3)."""

    keys: torch.Tensor  # m × h
    index: torch.Tensor  # m, long
    ptr: int = 0

    @classmethod
    def random(
        cls, size: int, dim: int, generator: torch.Generator, device: torch.device
    ) -> AnchorQueue:
        keys = F.normalize(torch.randn(size, dim, generator=generator), dim=1).to(device)
        return cls(keys=keys, index=torch.zeros(size, dtype=torch.long, device=device))

    def enqueue(self, keys: torch.Tensor, index: torch.Tensor) -> None:
        b = keys.shape[0]
        m = self.keys.shape[0]
        if m % b != 0:
            raise ValueError(f"queue size {m} is not a multiple of the batch size {b}")
        self.keys[self.ptr : self.ptr + b] = keys.detach().float()
        self.index[self.ptr : self.ptr + b] = to_device(index, self.index.device).long()
        self.ptr = (self.ptr + b) % m


def esd_batch(
    student: nn.Module,
    momentum: nn.Module,
    queue: AnchorQueue,
    v1: torch.Tensor,
    v2: torch.Tensor,
    rows: torch.Tensor,
    ebar: torch.Tensor,
    *,
    tau_student: float,
    zeta: float,
    compute_loss: bool = True,
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """One ESD batch (§2.8 step 4): query, momentum update, keys, enqueue, then (cross-entropy, KL)
    or None (skip)."""
    qs = F.normalize(student(v1).float(), dim=1)
    with torch.no_grad():
        momentum_update_(momentum, student, zeta)
        ks = F.normalize(momentum(v2).float(), dim=1)
    queue.enqueue(ks, rows)
    if not compute_loss:
        return None
    rows, index = to_device(rows, ebar.device), queue.index.to(ebar.device)
    targets = distill_targets(ebar, rows, index).to(qs.device)
    return similarity_distill_loss(qs, queue.keys, targets, tau_student)


@METHODS.register("flesd")
class FLESD(MethodBase):
    """FLESD (Shi et al., arXiv 2109.14611 v1; Alg. 1, Eq. 3-10): local SimCLR + server similarity
    distillation."""

    name: ClassVar[str] = "flesd"
    version: ClassVar[str] = "2"
    # every step through ctx.precision (benchmark.core.precision)
    precisions: ClassVar[tuple[str, ...]] = PRECISIONS
    Config: ClassVar[type] = FLESDConfig
    requires: ClassVar[frozenset[Requirement]] = frozenset({Requirement.PUBLIC_DATA})
    payload_up: ClassVar[tuple[str, ...]] = (
        "embeddings",
        "sim_matrix",
        "sim_topk_values",
        "sim_topk_indices",
    )
    payload_down: ClassVar[tuple[str, ...]] = ("backbone.*", "head.*")
    smoke_settings: ClassVar[dict] = {
        "public": {"name": "holdout", "fraction": 0.2},
        "method": {
            "local_batch_size": 32,
            "distill_batch_size": 16,
            "queue_size": 32,
            "distill_epochs": 1,
        },
    }
    # benchmark.commands.live_settings
    inert_settings: ClassVar[Mapping[str, str | Inert]] = {
        "skip_fill": Inert(
            "§6 item 10: every_epoch and first_epoch skip the same batches in the first epoch",
            live_with={"distill_epochs": 2},
        ),
        "nan_policy": (
            "acts only on a non-finite local loss (raise, or skip the step); "
            "tests/benchmark/test_local_train.py holds both"
        ),
        **{
            f"augment.{name}": Inert(
                "FLESD's CIFAR views have no blur (§2.9): read only when blur_p > 0",
                live_with={"augment": {"blur_p": 0.5}},
            )
            for name in ("blur_sigma", "blur_kernel")
        },
    }

    def __init__(self, cfg: FLESDConfig, backbone: ComponentSpec, inputs: InputSpec) -> None:
        super().__init__(cfg, backbone, inputs)
        # roles "model" (client, student) and "momentum" (ESD key encoder)
        self.nets = WorkingNets(self.build)

    # ---- model plumbing --------------------------------------------------------------------------
    def build(self) -> BackboneHead:
        """Backbone f + projection head (Linear(d, d) → ReLU → Linear(d, 128), with biases;
        §2.2)."""
        backbone, feat_dim = build_backbone(self.backbone.name, dict(self.backbone.params))
        hidden = self.cfg.head_hidden or feat_dim
        # no BN in the head [C]
        head = mlp_head(feat_dim, hidden, self.cfg.head_dim, bn_hidden=False)
        return BackboneHead(backbone, head, ("backbone", "head"))

    # ---- hooks -----------------------------------------------------------------------------------
    def init_server(self, ctx: RoundContext) -> ServerState:
        with scoped_torch_seed(ctx.seed, Stream.INIT):
            net = self.build()  # w^(0)
        return ServerState(model=tensors_of(net))

    @classmethod
    def check_data(cls, cfg: FLESDConfig, *, client_sizes, public_size: int | None) -> None:
        """§6 item 10: under ``skip_fill: every_epoch`` floor(N/B') <= m/B' would take no ESD step;
        rejected at the door (it used to fail only when distillation started, after a full round of
        local training)."""
        if public_size is None:
            raise ValueError("FLESD needs a public split (public: {name: first_shard} or holdout)")
        esd_schedule(
            public_size, cfg.distill_batch_size, cfg.queue_size, cfg.distill_epochs, cfg.skip_fill
        )

    def init_client(self, client_id: int, server: ServerState) -> ClientState:
        return ClientState()  # clients restart from w every round [P Alg. 1]

    def broadcast(self, server: ServerState, ctx: RoundContext) -> Payload:
        return Payload(dict(server.model))

    @torch.no_grad()
    def infer(
        self,
        net: nn.Module,
        public: UnlabeledView,
        device: torch.device,
        precision: Precision = FP32,
    ) -> torch.Tensor:
        """Raw head outputs on D_pub, in D_pub order: eval mode, no augmentation, batch 128 (§2.6
        step 3)."""
        mean, std = (
            (public.mean, public.std) if self.cfg.infer_normalization == "train" else IMAGENET_STATS
        )
        # DEVIATION: the official ImageNet-100 D_pub inference resizes to 256 and centre-crops 224;
        # the engine
        # holds D_pub at the dataset's stored 224-px size (short side 224, centre crop), so no
        # resize happens here
        net.eval()
        view = public.to(device)
        outs = []
        for start in range(0, len(view), self.cfg.infer_batch_size):
            x = normalize(view.images[start : start + self.cfg.infer_batch_size], mean, std)
            with precision.autocast(device):
                outs.append(net(x).float())
        return torch.cat(outs)

    def declared_traffic(self, tensors: ServerTensors, at: TrafficContext) -> Sent | None:
        """§2.4: the global model comes down; up goes the client's view of D_pub (N images): its
        N × head_dim embeddings, or the N × N similarity matrix, or each row's k largest
        off-diagonal similarities (float32 values and int32 indices), all 4 bytes an entry."""
        cfg, n = self.cfg, at.public_size
        if n is None:
            raise ValueError("FLESD needs a public split (public: {name: first_shard} or holdout)")
        if cfg.upload == "embeddings":
            up = n * cfg.head_dim * 4
        elif cfg.topk_percent >= 100:
            up = n * n * 4
        else:
            up = 2 * n * topk_count(cfg.topk_percent, n) * 4
        return Sent(up=up, down=tensors.model_bytes())

    def upload(self, embeddings: torch.Tensor) -> dict[str, torch.Tensor]:
        """What a client sends (docs/methods/flesd.md §2.4) for its D_pub embeddings."""
        cfg = self.cfg
        if cfg.upload == "embeddings":
            return {"embeddings": embeddings.detach().to("cpu", torch.float32).contiguous()}
        sim = similarity_matrix(embeddings)
        if cfg.topk_percent >= 100:
            return {"sim_matrix": sim.to("cpu", torch.float32).contiguous()}
        values, indices = topk_payload(sim, topk_count(cfg.topk_percent, sim.shape[0]))
        return {"sim_topk_values": values.cpu(), "sim_topk_indices": indices.cpu()}

    def similarity_of(self, up: Payload, n: int, device: torch.device) -> torch.Tensor:
        """M_k on the server, with top-n% applied (code semantics), from any upload form (§2.7 steps
        1-2)."""
        t = up.tensors
        if "embeddings" in t:
            sim = similarity_matrix(t["embeddings"].to(device))
            k = topk_count(self.cfg.topk_percent, n)
            return sim if self.cfg.topk_percent >= 100 else topk_sparsify(sim, k)
        if "sim_matrix" in t:
            return t["sim_matrix"].to(device).float()
        return densify_topk(t["sim_topk_values"].to(device), t["sim_topk_indices"].to(device), n)

    def client_update(
        self, down: Payload, state: ClientState, data: ClientData, ctx: RoundContext
    ) -> tuple[Payload, ClientState]:
        """§2.6: E local epochs of SimCLR from the broadcast model (the loss of one batch:
        ``step`` below), then the client's embeddings of D_pub as its upload (§2.4)."""
        cfg = self.cfg
        if ctx.public is None:
            raise ValueError("FLESD needs the public view on the client (ctx.public)")
        net = self.nets.get(ctx.device)
        load_tensors(net, down.tensors)
        net.train()
        opt = adam(net.parameters(), lr=cfg.local_lr, weight_decay=cfg.local_weight_decay)
        # fp16 (the official code's AMP): dynamic loss scaling
        scaler = ctx.precision.scaler(ctx.device)
        view = data.train
        # §2.6: SimCLR from w, the configured contrastive loss at τ: crossview_1dir (the official
        # losses.py) or ntxent_2b, both in methods/_shared/losses.py
        contrastive = CONTRASTIVE_LOSSES[cfg.local_loss]

        def step(batch: torch.Tensor) -> torch.Tensor:
            v1, v2 = two_views(batch, cfg.augment, ctx.generator, mean=view.mean, std=view.std)
            # one forward pass per view, as the official code (§2.6.2)
            return contrastive(net(v1), net(v2), cfg.local_tau)

        # the official loader keeps the last partial batch (no drop_last) [C]
        # DEVIATION: a last batch of one image is dropped (UnlabeledView.batch_indices); the
        # official loader
        # would take an Adam step on it (its one-sample InfoNCE loss is 0, the step weight decay
        # only)
        stats = run_local_epochs(
            view,
            step,
            opt,
            ctx,
            batch_size=cfg.local_batch_size,
            epochs=ctx.local_epochs,
            drop_last=False,
            nan_policy=cfg.nan_policy,
            scaler=scaler,
        )
        emb = self.infer(net, ctx.public, ctx.device, ctx.precision)
        # num_examples is set but unused: the ensemble is unweighted (Eq. 6)
        return Payload(
            self.upload(emb), num_examples=data.num_examples, metrics=stats.as_dict()
        ), ClientState(last_round=ctx.round)

    def server_aggregate(
        self,
        server: ServerState,
        ups: Mapping[int, Payload],
        ctx: RoundContext,
        public: UnlabeledView | None,
    ) -> ServerState:
        if not ups:
            return server
        if public is None:
            raise ValueError("FLESD needs a public split on the server")
        n = len(public)
        sims = [self.similarity_of(ups[k], n, ctx.device) for k in sorted(ups)]
        ebar = ensemble_similarities(sims, self.cfg.tau_teacher)
        del sims
        model, stats = self.distill(server.model, ebar, public, ctx)
        return ServerState(model=model, extra=server.extra, metrics=stats)

    def distill(
        self,
        model: Mapping[str, torch.Tensor],
        ebar: torch.Tensor,
        public: UnlabeledView,
        ctx: RoundContext,
    ) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
        """ESD (§2.8): student θ ← w^(t−1), momentum μ ← θ, random queue, fresh Adam; returns θ (not
        μ)."""
        cfg = self.cfg
        device = ctx.device
        planned = esd_schedule(
            len(public), cfg.distill_batch_size, cfg.queue_size, cfg.distill_epochs, cfg.skip_fill
        )
        student = self.nets.get(device, "model")
        momentum = self.nets.get(device, "momentum")
        load_tensors(student, model)
        load_tensors(momentum, model)
        for p in momentum.parameters():
            p.requires_grad_(False)
        student.train()
        momentum.train()
        queue = AnchorQueue.random(cfg.queue_size, cfg.head_dim, ctx.generator, device)
        opt = adam(student.parameters(), lr=cfg.distill_lr, weight_decay=cfg.distill_weight_decay)
        scaler = ctx.precision.scaler(device)
        view = public.to(device)
        ebar = ebar.to(device)
        fill = cfg.queue_size // cfg.distill_batch_size
        # the step losses stay on the device and are read once, after the last epoch (a host read
        # per step would stall a GPU's queue every step): the same values, summed in the same order
        steps, ces, kls, per_epoch = 0, [], [], []
        for epoch in range(cfg.distill_epochs):
            per_epoch.append(0)
            batches = view.batch_indices(cfg.distill_batch_size, ctx.generator, drop_last=True)
            for b, rows in enumerate(batches):
                # the batch's indices, drawn on the host: copied once, without making the host wait
                rows = to_device(rows, device)
                imgs = view.images[rows.to(view.images.device)]
                v1, v2 = two_views(imgs, cfg.augment, ctx.generator, mean=view.mean, std=view.std)
                skip = b < fill and (cfg.skip_fill == "every_epoch" or epoch == 0)
                with ctx.precision.autocast(device):
                    out = esd_batch(
                        student,
                        momentum,
                        queue,
                        v1,
                        v2,
                        rows,
                        ebar,
                        tau_student=cfg.tau_student,
                        zeta=cfg.key_momentum,
                        compute_loss=not skip,
                    )
                if out is None:
                    continue
                ce, kl = out
                ces.append(ce.detach().double())
                kls.append(kl.detach().double())
                opt.zero_grad(set_to_none=True)
                scaler.backward(ce)
                scaler.step(opt)
                steps += 1
                per_epoch[-1] += 1
        assert steps == planned, (steps, planned)
        ce_values, kl_values = (
            torch.stack([torch.stack(ces), torch.stack(kls)]).cpu().tolist() if steps else ([], [])
        )
        if not all(math.isfinite(v) for v in ce_values):
            raise Diverged(f"non-finite ESD loss at round {ctx.round}")
        kl_sum, kl_last_epoch, start = 0.0, [], 0
        for n in per_epoch:
            kl_epoch = kl_values[start : start + n]
            start += n
            kl_sum += sum(kl_epoch)
            kl_last_epoch = kl_epoch or kl_last_epoch
        return tensors_of(student), {
            "esd_steps": float(steps),
            "esd_kl": kl_sum / max(steps, 1),
            "esd_kl_last_epoch": sum(kl_last_epoch) / max(len(kl_last_epoch), 1),
        }

    def encoder(
        self, server: ServerState, clients: Mapping[int, ClientState] | None = None
    ) -> Encoder:
        net = self.build()
        load_tensors(net, server.model)
        enc = net.backbone.eval()  # the head is discarded at evaluation [C]
        return self.export(enc)
