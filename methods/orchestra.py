"""Orchestra (Lubana, Tang, Kawsar, Dick, Mathur; ICML 2022, arXiv 2205.11506): globally consistent
clustering.

Spec: docs/methods/orchestra.md. Implemented: online + EMA target networks (§2.2, §2.6), the
cluster-assignment loss against the server's global centroids, the 4-way rotation-prediction
degeneracy loss, the FIFO memory of target projections clustered locally into N_l equal-size
centroids (§2.7, Sinkhorn-Knopp §2.8), FedAvg of the encoders and the server's gradient-based global
clustering into N_G centroids (§2.9), the extra initialisation round (engine round 1, §2.5), the
view routing and augmentations of §2.10, and the Table 6 / Table 2 ablation switches (§6 item 16).

Config keys beyond the spec's names: ``proj_dim`` (None = the backbone's feature dimension, the
spec's d = 512 for ResNet-18); ``augment_target`` / ``augment_online`` / ``solarize_p`` (the A and
A' pipelines of §2.10).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
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
    UnlabeledView,
    augment,
    build_backbone,
    fp32_math,
    load_tensors,
    local_drop_last,
    mlp_head,
    normalize,
    run_local_epochs,
    scoped_torch_seed,
    tensors_of,
    to_device,
    weighted_average,
)
from methods._shared.ema import momentum_update_
from methods._shared.nets import BackboneHead, WorkingNets

# --------------------------------------------------------------------------------------------------
# Balanced clustering maths (Orchestra, Lubana et al. ICML 2022; docs/methods/orchestra.md
# §2.7-§2.9): pure functions.
#
# - ``sinkhorn_knopp``: the official code's ``sknopp`` (Genevay et al. 2019 style balanced soft
#   assignment).
# - ``equal_size_kmeans``: the client's local clustering of its projection memory
#   (``orchestra.local_clustering``).
# - ``global_clustering``: the server's gradient-based centroid learning against SK targets
#   (``orchestra.global_clustering``): 500 SGD steps on C with a negative-cosine loss.
#
# No function here touches a global RNG; randomness comes in as an explicit ``torch.Generator``.
# (folded in from methods/_shared/clustering.py: this method is its only user)
# --------------------------------------------------------------------------------------------------


@fp32_math  # Sinkhorn and cluster logits in fp32 under any autocast (benchmark.core.precision)
@torch.no_grad()
def sinkhorn_knopp(
    scores: torch.Tensor, *, lam: float = 25.0, max_iters: int = 100, tol: float = 1e-2
) -> torch.Tensor:
    """Balanced soft assignment Q (N × K) of N points to K centroids from scores S
    (docs/methods/orchestra.md §2.8).

    P = row-softmax(λS)ᵀ (K × N); alternate r = (1/K)/(P c), c' = (1/N)/(Pᵀ r); every 10 iterations
    err = Σ|c/c' − 1| (NaN terms count 0); stop when err < tol; Q_nk = N c_n P_kn r_k.
    Rows of Q sum to 1; columns sum to ≈ N/K. No gradient flows through it.

    The loop runs up to ``max_iters`` times per call (the server's clustering calls it on every one
    of its steps), on small matrices, so it calls the kernels directly: ``torch.mv`` is what ``p @
    c`` dispatches to for a matrix and a vector, and ``reciprocal`` then ``mul`` by the Python
    number is what ``number / tensor`` runs (``Tensor.__rdiv__``): the same ATen calls on the same
    values (so the same bits, and the same kernel census: ``benchmark.commands.kernel_census``), without
    the Python operator layers (issue 53).
    """
    s = scores.detach().float()
    n, k = s.shape
    p = torch.softmax(lam * s, dim=1).t().contiguous()  # K × N
    pt = p.t()  # N × K, the same transposed view ``p.t()`` gives
    r = torch.full((k,), 1.0 / k, dtype=s.dtype, device=s.device)
    c = torch.full((n,), 1.0 / n, dtype=s.dtype, device=s.device)
    err = math.inf
    inv_k, inv_n = 1.0 / k, 1.0 / n
    for it in range(max_iters):
        r = torch.mv(p, c).reciprocal().mul(inv_k)
        c_new = torch.mv(pt, r).reciprocal().mul(inv_n)
        if it % 10 == 0:
            ratio = torch.nan_to_num(c / c_new - 1.0, nan=0.0)
            err = float(ratio.abs().sum())
        c = c_new
        if err < tol:
            break
    return (n * c[:, None]) * p.t() * r[None, :]


@fp32_math  # Sinkhorn and cluster logits in fp32 under any autocast (benchmark.core.precision)
@torch.no_grad()
def equal_size_kmeans(
    memory: torch.Tensor,
    num_clusters: int,
    generator: torch.Generator,
    *,
    iters: int = 5,
    lam: float = 25.0,
    sk_iters: int = 10,
    tol: float = 1e-2,
) -> torch.Tensor:
    """Orchestra's local clustering (§2.7): N_l unit-norm centroids of the unit-norm rows of
    ``memory``.

    Initialise with N_l distinct random rows; 5 times: Q = SK(Z Uᵀ), hard-assign by argmax, set each
    centroid to the normalised mean of its members, reseeding an empty cluster with a random row.
    Randomness: ``generator`` (CPU).

    Host reads (each waits for a GPU's queue): one per iteration for the cluster sizes, plus
    Sinkhorn's tolerance reads (one per 10 of its iterations), so ``2 × iters`` at the defaults
    (``sk_iters`` 10), whatever the number of clusters: a cluster's members are its rows in row
    order, gathered as consecutive rows by a stable sort (no per-cluster ``members.any()`` or
    boolean mask, which read twice per cluster), and each mean is taken over a copy of the same
    rows in the same order as ``z[members]``: the same numbers.
    """
    z = memory.detach().float()
    m = z.shape[0]
    if m < num_clusters:
        raise ValueError(f"memory has {m} rows, fewer than {num_clusters} clusters")
    init = to_device(torch.randperm(m, generator=generator)[:num_clusters], z.device)
    u = z[init].clone()
    for _ in range(iters):
        q = sinkhorn_knopp(z @ u.t(), lam=lam, max_iters=sk_iters, tol=tol)
        assign = q.argmax(dim=1)
        grouped = z[torch.sort(assign, stable=True).indices]  # cluster by cluster, in row order
        ones = torch.ones_like(assign)
        sizes = torch.zeros(num_clusters, dtype=assign.dtype, device=z.device)
        start = 0
        for j, size in enumerate(sizes.index_add_(0, assign, ones).cpu().tolist()):  # one read
            if size:  # the members' mean over a fresh copy of their rows, as z[members] was
                u[j] = F.normalize(grouped[start : start + size].clone().mean(0), dim=0)
            else:
                u[j] = z[int(torch.randint(m, (1,), generator=generator))]
            start += size
    return F.normalize(u, dim=1)


@fp32_math  # Sinkhorn and cluster logits in fp32 under any autocast (benchmark.core.precision)
def global_clustering_loss(
    y: torch.Tensor,
    centroids: torch.Tensor,
    *,
    temperature: float,
    lam: float,
    sk_iters: int,
    tol: float,
) -> torch.Tensor:
    """L_glob = −(1/M) Σ_j cos(Q_j, P_j), Q = SK(Y Cᵀ) (no grad), P_j = softmax(⟨normalize(Y_j),
    c⟩/T) (§2.9)."""
    q = sinkhorn_knopp(y @ centroids.detach().t(), lam=lam, max_iters=sk_iters, tol=tol)
    p = torch.softmax(F.normalize(y, dim=1) @ centroids.t() / temperature, dim=1)
    return -F.cosine_similarity(q, p, dim=1).mean()


def global_clustering(
    local_centroids: torch.Tensor,
    init_centroids: torch.Tensor,
    *,
    steps: int = 500,
    lr: float = 0.01,
    momentum: float = 0.9,
    weight_decay: float = 1e-4,
    temperature: float = 0.1,
    lam: float = 25.0,
    sk_iters: int = 100,
    tol: float = 1e-2,
) -> tuple[torch.Tensor, float]:
    """Server clustering of all uploaded local centroids Y (M × d) into N_G centroids, warm-started
    from C (§2.9).

    A fresh SGD(C, lr, momentum, weight decay) runs ``steps`` times: loss
    ``global_clustering_loss``, step, then row-normalise C. Returns (C, last loss); with ``steps =
    0`` C comes back unchanged. Deterministic (no randomness).
    """
    y = local_centroids.detach().float()
    c = init_centroids.detach().float().clone().requires_grad_(True)
    opt = torch.optim.SGD([c], lr=lr, momentum=momentum, weight_decay=weight_decay)
    # server maths stays fp32 in every cell, declared (benchmark.core.precision)
    fp32_steps = FP32.scaler(c.device)
    last = None  # the last step's loss, read once after the loop (no host read per step)
    for _ in range(steps):
        with torch.enable_grad():
            loss = global_clustering_loss(
                y, c, temperature=temperature, lam=lam, sk_iters=sk_iters, tol=tol
            )
            opt.zero_grad(set_to_none=True)
            loss.backward()
        fp32_steps.step(opt)
        with torch.no_grad():
            c.copy_(F.normalize(c, dim=1))
        last = loss.detach()
    return c.detach().clone(), math.nan if last is None else float(last)


@fp32_math  # Sinkhorn and cluster logits in fp32 under any autocast (benchmark.core.precision)
def cluster_assignment_loss(
    z_online: torch.Tensor, z_target: torch.Tensor, centroids: torch.Tensor, temperature: float
) -> torch.Tensor:
    """Orchestra's L_cluster = −(1/B) Σ_i Σ_j p^T_ij log p^O_ij (docs/methods/orchestra.md §2.6 step
    5).

    p = softmax(⟨z, c_j⟩/T) over the global centroids; the target side and the centroids carry no
    gradient; log-softmax (not log of softmax); p^T is a plain temperature softmax, neither balanced
    nor sharpened.
    """
    c = centroids.detach()
    p_target = torch.softmax(z_target.detach() @ c.t() / temperature, dim=1)
    log_p_online = F.log_softmax(z_online @ c.t() / temperature, dim=1)
    return -(p_target * log_p_online).sum(dim=1).mean()


def fifo_push(
    memory: torch.Tensor, rows: torch.Tensor, capacity: int, *, keep: str = "last"
) -> torch.Tensor:
    """Append ``rows`` to ``memory`` (detached) and keep the ``capacity`` most recent
    (``keep="last"``, the FIFO of docs/methods/orchestra.md §2.2) or the first ``capacity`` ever
    pushed (``keep="first"``, the initialisation round)."""
    out = torch.cat([memory, rows.detach().to(memory.dtype)])
    return out[-capacity:] if keep == "last" else out[:capacity]


# §2.10 A (view 1, to the target; base of the rotation view): RRC(scale (0.5, 1), bicubic), flip
# 0.5, ColorJitter(0.4, 0.4, 0.2, 0.1) p 0.8, grayscale 0.2, GaussianBlur(3, σ ∈ [0.1, 2]) p 0.5.
AUGMENT_A = AugmentConfig(
    crop_scale=(0.5, 1.0),
    interpolation="bicubic",
    flip_p=0.5,
    jitter=(0.4, 0.4, 0.2, 0.1),
    jitter_p=0.8,
    gray_p=0.2,
    blur_p=0.5,
    blur_sigma=(0.1, 2.0),
    blur_kernel=3,
)
# A' (view 2, to the online model): as A with blur p 0.1, then solarize p 0.2 (applied by
# ``solarize``).
AUGMENT_A_PRIME = AugmentConfig(
    crop_scale=(0.5, 1.0),
    interpolation="bicubic",
    flip_p=0.5,
    jitter=(0.4, 0.4, 0.2, 0.1),
    jitter_p=0.8,
    gray_p=0.2,
    blur_p=0.1,
    blur_sigma=(0.1, 2.0),
    blur_kernel=3,
)
_UNIT = ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0))  # "normalisation" that keeps pixels in [0, 1]


@dataclass(frozen=True, kw_only=True)
class OrchestraConfig:
    """Hyperparameters of docs/methods/orchestra.md §3 (project defaults = CIFAR-10
    cross-device)."""

    num_global_clusters: int = 32  # N_G; Table 2 base for CIFAR-10 (256 for CIFAR-100), §6 item 1
    num_local_clusters: int = 8  # N_l; paper §6 (16 for CIFAR-100)
    memory_size: int = 0  # m_mem; 0 = auto: max(128, B) (§6 item 9)
    temperature: float = 0.1  # T, assignment softmax [C]
    sk_lambda: float = 25.0  # λ, Sinkhorn sharpness (ε = 0.04) [C]
    sk_iters_server: int = 100  # [C]
    sk_iters_local: int = 10  # [C]
    sk_tol: float = 1e-2  # on Σ|c/c' − 1|, checked every 10 iterations [C]
    local_kmeans_iters: int = 5  # [C]
    global_steps: int = 500  # server SGD steps on C per round [C]
    global_lr: float = 0.01  # [C]
    global_momentum: float = 0.9  # [C]
    global_weight_decay: float = 1e-4  # [C]
    deg_weight: float = 1.0  # L_cluster : L_deg = 1 : 1 [C]
    ema: float = 0.996  # m; 0.996 cross-device, 0.99 cross-silo [P]
    lr: float = 0.003  # η; 0.003 cross-device, 0.01 cross-silo [P]
    momentum: float = 0.9  # local SGD [C]
    weight_decay: float = 1e-4  # local SGD, on every parameter [C]
    batch_size: int = 16  # B; 16 cross-device, 256 cross-silo [P]
    weighting: Literal["num_examples", "num_batches", "uniform"] = "num_examples"  # §6 item 11
    # d, projector width; None = backbone feature dimension (512 for ResNet-18)
    proj_dim: int | None = None
    use_rotation: bool = True  # Table 6 "No degeneracy regularisation" = False
    use_target: bool = True  # Table 6 "No target model" = False
    # Table 2 "Reps": upload the memory instead of local centroids
    share_representations: bool = False
    nan_policy: Literal["raise", "skip"] = "raise"
    augment_target: AugmentConfig = field(default_factory=lambda: AUGMENT_A)
    augment_online: AugmentConfig = field(default_factory=lambda: AUGMENT_A_PRIME)
    solarize_p: float = 0.2  # A' only: PIL solarize at threshold 128 [C]

    def __post_init__(self) -> None:
        if self.num_local_clusters < 1 or self.num_global_clusters < 1:
            raise ValueError("cluster counts must be >= 1")
        if self.batch_size < 2 or self.lr <= 0 or self.temperature <= 0:
            raise ValueError("batch_size >= 2, lr > 0 and temperature > 0 are required")
        if not 0 <= self.ema <= 1:
            raise ValueError("ema must be in [0, 1]")
        if self.memory_size and self.memory_size < self.num_local_clusters:
            raise ValueError("memory_size must hold at least num_local_clusters projections")

    @property
    def memory_capacity(self) -> int:
        return self.memory_size or max(128, self.batch_size)


def solarize(
    x: torch.Tensor, p: float, gen: torch.Generator, threshold: float = 128 / 255
) -> torch.Tensor:
    """PIL ``ImageOps.solarize`` on [0, 1] images with probability ``p`` per image: pixels >=
    threshold → 1 − x."""
    apply = to_device(torch.rand(x.shape[0], generator=gen) < p, x.device)
    apply = apply.view(-1, 1, 1, 1)
    return torch.where(apply & (x >= threshold - 1e-6), 1.0 - x, x)


def rotation_labels(n: int, gen: torch.Generator) -> torch.Tensor:
    """r_i ~ Uniform{0, 1, 2, 3}, one per sample."""
    return torch.randint(0, 4, (n,), generator=gen)


def rotate_batch(x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """Rotate image i by 90°·r_i counter-clockwise (rot90 over H, W)."""
    # every rotation of the whole batch, each image taking its own: the same values as rotating the
    # selected images, with no host read (a boolean-mask selection waits for the device)
    r = to_device(r, x.device).view(-1, 1, 1, 1)
    out = x
    for a in range(1, 4):
        out = torch.where(r == a, torch.rot90(x, a, dims=(2, 3)), out)
    # in x's memory layout, as the masked copy of x was (torch.where follows rot90's strides)
    return torch.empty_like(x).copy_(out)


def branch(backbone: nn.Module, projector: nn.Module) -> BackboneHead:
    """Backbone f + projector g (online or target)."""
    return BackboneHead(backbone, projector, ("backbone", "projector"))


class OrchestraNet(nn.Module):
    def __init__(self, online: BackboneHead, target: BackboneHead, rot_head: nn.Linear) -> None:
        super().__init__()
        self.online = online
        self.target = target
        self.rot_head = rot_head
        for p in self.target.parameters():
            p.requires_grad_(False)


@METHODS.register("orchestra")
class Orchestra(MethodBase):
    """Orchestra (Lubana et al., ICML 2022; §3, Alg. 1-2, App. C.2): clustering-based FSSL,
    stateless clients."""

    name: ClassVar[str] = "orchestra"
    version: ClassVar[str] = "2"  # 2: a client smaller than B trains (issue 46)
    # every step through ctx.precision (benchmark.core.precision)
    precisions: ClassVar[tuple[str, ...]] = PRECISIONS
    Config: ClassVar[type] = OrchestraConfig
    requires: ClassVar[frozenset[Requirement]] = frozenset()
    payload_up: ClassVar[tuple[str, ...]] = (
        "online.*",
        "target.*",
        "rot_head.*",
        "local_centroids",
        "local_representations",
    )
    payload_down: ClassVar[tuple[str, ...]] = (
        "online.*",
        "target.*",
        "rot_head.*",
        "global_centroids",
    )
    smoke_settings: ClassVar[dict] = {
        "method": {"global_steps": 50, "num_global_clusters": 8, "batch_size": 64}
    }
    # engine round 1 is the initialisation round (§2.5): no client trains in it by design
    setup_rounds: ClassVar[int] = 1
    # benchmark.commands.live_settings
    inert_settings: ClassVar[Mapping[str, str | Inert]] = {
        "nan_policy": (
            "acts only on a non-finite loss (raise, or skip the step); "
            "tests/benchmark/test_local_train.py holds both"
        ),
    }

    def __init__(self, cfg: OrchestraConfig, backbone: ComponentSpec, inputs: InputSpec) -> None:
        super().__init__(cfg, backbone, inputs)
        self.nets = WorkingNets(self.build)

    # ---- model plumbing --------------------------------------------------------------------------
    def build(self) -> OrchestraNet:
        backbone, feat_dim = build_backbone(self.backbone.name, dict(self.backbone.params))
        d = self.cfg.proj_dim or feat_dim
        # §2.2: Linear(d, d, no bias) → BN → ReLU → Linear(d, d, no bias) → BN(affine=False)
        projector = mlp_head(
            feat_dim, d, d, bias_hidden=False, bias_last=False, bn_last=True, bn_last_affine=False
        )
        online = branch(backbone, projector)
        target = branch(*_clone_modules(backbone, projector))
        return OrchestraNet(online, target, nn.Linear(d, 4))

    def proj_dim(self) -> int:
        return int(self.nets.structure().rot_head.in_features)

    # ---- hooks -----------------------------------------------------------------------------------
    def init_server(self, ctx: RoundContext) -> ServerState:
        with scoped_torch_seed(ctx.seed, Stream.INIT):
            net = self.build()
        net.target.load_state_dict(net.online.state_dict())  # identical copies at init
        d = net.rot_head.in_features
        bound = 1.0 / math.sqrt(d)  # like a default nn.Linear(d, N_G) weight, not normalised [C]
        c = (torch.rand(self.cfg.num_global_clusters, d, generator=ctx.generator) * 2 - 1) * bound
        return ServerState(model=tensors_of(net), extra={"global_centroids": c})

    def init_client(self, client_id: int, server: ServerState) -> ClientState:
        return ClientState()  # stateless clients [P, Table 3]

    def broadcast(self, server: ServerState, ctx: RoundContext) -> Payload:
        if ctx.round == 1:  # initialisation round: the initial encoder only (§2.4)
            return Payload({k: v for k, v in server.model.items() if k.startswith("target.")})
        return Payload({**server.model, "global_centroids": server.extra["global_centroids"]})

    def declared_traffic(self, tensors: ServerTensors, at: TrafficContext) -> Sent | None:
        """§2.4-2.5: round 1 sends the target encoder down and the local centroids up; every later
        round the whole model and the global centroids down, the trained model and the local
        centroids up. The centroids (N_L × d float32, d the projection size) are sent when the
        client's memory holds at least N_L projections; ``share_representations`` sends the
        memory itself (its rows × d float32)."""
        d = tensors.model["rot_head.weight"].shape[1]
        rows = self.memory_rows(at.examples, at.local_epochs, first=at.round == 1)
        if self.cfg.share_representations:
            centroids = rows * d * 4
        else:
            centroids = (
                self.cfg.num_local_clusters * d * 4 if rows >= self.cfg.num_local_clusters else 0
            )
        if at.round == 1:
            return Sent(up=centroids, down=tensors.model_bytes(prefix="target."))
        model = tensors.model_bytes()
        return Sent(up=model + centroids, down=model + tensors["global_centroids"].nbytes)

    def memory_rows(self, examples: int, epochs: int, *, first: bool) -> int:
        """Rows of a client's projection memory when its round ends: the first ``capacity`` of the
        initialisation round's first batches (:meth:`_init_round`), else the last ``capacity`` of
        every trained batch (one push per step, drop_last under the small-client policy)."""
        cfg = self.cfg
        B, cap = cfg.batch_size, cfg.memory_capacity
        full, rest = divmod(examples, B)
        sizes = [B] * full + ([rest] if rest and not local_drop_last(examples, B, True) else [])
        sizes = [s for s in sizes if s > 1]  # UnlabeledView.batch_indices: no batch of one
        pushed = sum(sizes[: math.ceil(cap / B)]) if first else epochs * sum(sizes)
        return min(cap, pushed)

    def _views(self, batch: torch.Tensor, view: UnlabeledView, ctx: RoundContext):
        cfg = self.cfg
        x1 = augment(batch, cfg.augment_target, ctx.generator, mean=view.mean, std=view.std)
        raw2 = augment(batch, cfg.augment_online, ctx.generator, mean=_UNIT[0], std=_UNIT[1])
        x2 = normalize(solarize(raw2, cfg.solarize_p, ctx.generator), view.mean, view.std)
        r = rotation_labels(batch.shape[0], ctx.generator)
        x3 = rotate_batch(
            augment(batch, cfg.augment_target, ctx.generator, mean=view.mean, std=view.std), r
        )
        # DEVIATION: the paper's code normalises with mean = std = 0.5; we use the dataset's
        # normalisation (the one the downstream tasks use), so every method sees one normalisation
        # per dataset.
        return x1, x2, x3, to_device(r, batch.device)

    def _local_centroids(self, memory: torch.Tensor, ctx: RoundContext) -> dict[str, torch.Tensor]:
        cfg = self.cfg
        if cfg.share_representations:
            return {"local_representations": memory.detach().to("cpu", torch.float32).clone()}
        if memory.shape[0] < cfg.num_local_clusters:  # §6 item 19: too few projections to cluster
            return {}
        u = equal_size_kmeans(
            memory,
            cfg.num_local_clusters,
            ctx.generator,
            iters=cfg.local_kmeans_iters,
            lam=cfg.sk_lambda,
            sk_iters=cfg.sk_iters_local,
            tol=cfg.sk_tol,
        )
        return {"local_centroids": u.to("cpu", torch.float32)}

    def _init_round(self, down: Payload, data: ClientData, ctx: RoundContext) -> Payload:
        """§2.5 step 1: target in train mode on view-1 batches; memory → local centroids; model
        untouched."""
        cfg = self.cfg
        net = self.nets.get(ctx.device)
        load_tensors(net.target, down.tensors, prefix="target.")
        before = {k: v.clone() for k, v in net.target.state_dict().items()}
        net.target.train()
        view = data.train.to(ctx.device)
        cap = cfg.memory_capacity
        memory = torch.zeros(0, net.rot_head.in_features, device=ctx.device)
        # the small-client policy of the local loop (docs/protocols/small-clients.md): a client
        # smaller than B fills its memory from one batch of all its images
        drop_last = local_drop_last(len(view), cfg.batch_size, True)
        batches = view.batch_indices(cfg.batch_size, ctx.generator, drop_last=drop_last)
        with torch.no_grad(), ctx.precision.autocast(ctx.device):
            for idx in batches[: math.ceil(cap / cfg.batch_size)]:
                batch = view.images[to_device(idx, view.images.device)]
                x1 = augment(batch, cfg.augment_target, ctx.generator, mean=view.mean, std=view.std)
                memory = fifo_push(
                    memory, F.normalize(net.target(x1).float(), dim=1), cap, keep="first"
                )
        # restore BN running buffers: the round leaves the model bit-identical
        net.target.load_state_dict(before)
        up = self._local_centroids(memory, ctx)
        return Payload(
            up,
            num_examples=data.num_examples,
            metrics={"init": 1.0, "steps": 0.0, "num_steps": 0.0},
        )

    def client_update(
        self, down: Payload, state: ClientState, data: ClientData, ctx: RoundContext
    ) -> tuple[Payload, ClientState]:
        if ctx.round == 1:
            return self._init_round(down, data, ctx), ClientState(last_round=ctx.round)
        cfg = self.cfg
        net = self.nets.get(ctx.device)
        load_tensors(net, down.tensors)
        net.train()
        centroids = down.tensors["global_centroids"].to(ctx.device).float()
        params = [p for m in (net.online, net.rot_head) for p in m.parameters()]
        opt = torch.optim.SGD(
            params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay
        )
        view = data.train
        cap = cfg.memory_capacity
        box: dict[str, torch.Tensor] = {
            "memory": torch.zeros(0, centroids.shape[1], device=ctx.device)
        }
        # on the device, read once
        parts: dict[str, list[torch.Tensor]] = {"loss_cluster": [], "loss_deg": []}

        def step(batch: torch.Tensor) -> torch.Tensor:
            x1, x2, x3, r = self._views(batch, view, ctx)
            z_online = F.normalize(net.online(x2).float(), dim=1)
            with torch.no_grad():
                branch = net.target if cfg.use_target else net.online
                z_target = F.normalize(branch(x1).float(), dim=1)
            box["pending"] = z_target
            loss_cluster = cluster_assignment_loss(z_online, z_target, centroids, cfg.temperature)
            parts["loss_cluster"].append(loss_cluster.detach())
            if not cfg.use_rotation:
                return loss_cluster
            loss_deg = F.cross_entropy(net.rot_head(net.online(x3)).float(), r)
            parts["loss_deg"].append(loss_deg.detach())
            return loss_cluster + cfg.deg_weight * loss_deg

        def after_step() -> None:
            # DEVIATION: the official code updates the target before each target forward pass (the
            # first step
            # of a round included); Algorithm 1's order is kept: a one-step shift per round
            if cfg.use_target:  # Alg. 1 order: EMA after the SGD step (§6 item 7)
                momentum_update_(net.target, net.online, cfg.ema)
            box["memory"] = fifo_push(box["memory"], box.pop("pending"), cap)

        stats = run_local_epochs(
            view,
            step,
            opt,
            ctx,
            batch_size=cfg.batch_size,
            epochs=ctx.local_epochs,
            drop_last=True,
            nan_policy=cfg.nan_policy,
            after_step=after_step,
        )
        out = tensors_of(net)
        up = {**out, **self._local_centroids(box["memory"], ctx)}
        if stats.steps == 0:
            # DEVIATION: §6 item 19 resolves a client with fewer than B samples (0 steps under
            # drop_last) to an unchanged upload of weight 0; under the project's one small-client
            # policy (docs/protocols/small-clients.md) such a client trains one batch of all its
            # images, so only a client of one image takes no step and uploads weight 0
            weight = 0
        elif cfg.weighting == "num_batches":
            weight = stats.batches
        else:
            weight = data.num_examples
        steps = max(stats.steps, 1)
        sums = {key: _sequential_sum(vals) for key, vals in parts.items()}
        metrics = {
            **stats.as_dict(),
            "num_steps": float(stats.steps),
            "loss_cluster": sums["loss_cluster"] / steps,
            "loss_deg": sums["loss_deg"] / steps,
        }
        return Payload(up, num_examples=weight, metrics=metrics), ClientState(last_round=ctx.round)

    def server_aggregate(
        self,
        server: ServerState,
        ups: Mapping[int, Payload],
        ctx: RoundContext,
        public: UnlabeledView | None,
    ) -> ServerState:
        cfg = self.cfg
        model = dict(server.model)
        order = sorted(ups)
        if ctx.round > 1:  # encoders are not aggregated in the initialisation round
            keys = list(server.model)
            payloads = [ups[k] for k in order if ups[k].num_examples > 0]
            if payloads:
                weights = (
                    [1.0] * len(payloads)
                    if cfg.weighting == "uniform"
                    else [float(p.num_examples) for p in payloads]
                )
                model.update(
                    weighted_average([{k: p.tensors[k] for k in keys} for p in payloads], weights)
                )
        name = "local_representations" if cfg.share_representations else "local_centroids"
        parts = [ups[k].tensors[name] for k in order if name in ups[k].tensors]
        extra = dict(server.extra)
        if parts:
            c, _ = global_clustering(
                torch.cat(parts).to(ctx.device),
                extra["global_centroids"].to(ctx.device),
                steps=cfg.global_steps,
                lr=cfg.global_lr,
                momentum=cfg.global_momentum,
                weight_decay=cfg.global_weight_decay,
                temperature=cfg.temperature,
                lam=cfg.sk_lambda,
                sk_iters=cfg.sk_iters_server,
                tol=cfg.sk_tol,
            )
            extra["global_centroids"] = c.to("cpu")
        return ServerState(model=model, extra=extra)

    def encoder(
        self, server: ServerState, clients: Mapping[int, ClientState] | None = None
    ) -> Encoder:
        net = self.build()
        load_tensors(net, server.model)
        enc = net.online.backbone.eval()  # evaluation uses online.backbone only [C]
        return self.export(enc)


def _sequential_sum(values: list[torch.Tensor]) -> float:
    """The float64 sum, in step order, of per-step device scalars, read from the device in one
    copy."""
    total = 0.0
    for v in torch.stack([t.reshape(()) for t in values]).double().cpu().tolist() if values else []:
        total += v
    return total


def _clone_modules(*modules: nn.Module) -> list[nn.Module]:
    import copy

    return [copy.deepcopy(m) for m in modules]
