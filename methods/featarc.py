"""FeatARC (Wang et al., "Does Learning from Decentralized Non-IID Unlabeled Data Benefit from Self
Supervision?", ICLR 2023, arXiv 2210.10947, §5, App. C.3, Algorithms 1–2; code liruiw/Dec-SSL).
Spec: docs/methods/featarc.md.

IFCA-style clustered FedAvg-SimCLR with C cluster models. A sampled client scores each cluster model
by how well its (eval-mode, clean-image, normalised) backbone features align with those of the
client's own previous local model, picks the best (argmin of the mean −cos), trains SimCLR from that
cluster model plus λ · L_align towards the cluster model's features, and the server averages uploads
within each cluster. The evaluated encoder is the cluster with the largest training mass (§3),
chosen from assignments and sizes only, never from test scores.

Composes the SimCLR network, contrastive loss, optimizer and lr schedule that FedAvg-SimCLR also
uses (methods/_shared/simclr.py, methods/_shared/optim.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch
import torch.nn.functional as F

from benchmark.api import (
    METHODS,
    PRECISIONS,
    ClientData,
    ClientState,
    ComponentSpec,
    Encoder,
    IndexView,
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
    UnlabeledView,
    aggregation_weights,
    build_backbone,
    load_tensors,
    run_local_epochs,
    scoped_torch_seed,
    select,
    tensors_of,
    to_device,
    two_views,
    weighted_average,
)
from methods._shared.losses import CONTRASTIVE_LOSSES
from methods._shared.nets import BackboneHead, WorkingNets
from methods._shared.optim import make_optimizer, scheduled_lr
from methods._shared.simclr import (
    SIMCLR_INERT,
    SimCLRConfig,
    encoder_of,
    local_bn_names,
    simclr_net,
)

# --------------------------------------------------------------------------------------------------
# FeatARC maths (Dec-SSL, Wang et al. ICLR 2023, §5 and Algorithms 1–2; docs/methods/featarc.md
# §2–3): small and pure.
#
# D(z1, z2) = −⟨z1, z2⟩ / (‖z1‖ ‖z2‖) everywhere (paper App. C.3).
# (folded in from methods/_shared/feature_align.py: this method is its only user)
# --------------------------------------------------------------------------------------------------


TensorDict = Mapping[str, torch.Tensor]


def neg_cosine(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Row-wise D(a, b) = −cos(a, b)."""
    return -(F.normalize(a.float(), dim=-1) * F.normalize(b.float(), dim=-1)).sum(dim=-1)


def alignment_scores(local: torch.Tensor, clusters: Sequence[torch.Tensor]) -> torch.Tensor:
    """A_j = (1/n) Σ_k D(Zg_j[k], Zl[k]) for each cluster j (Algorithm 1 lines 8–12), float64, shape
    (C,)."""
    return torch.stack([neg_cosine(z, local).double().mean() for z in clusters])


def pick_cluster(scores: torch.Tensor) -> int:
    """I = argmin_j A_j; exact ties go to the smallest j (Algorithm 1 line 14)."""
    best = scores.min()
    return int(torch.nonzero(scores == best)[0, 0])


def alignment_loss(p1: torch.Tensor, p2: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """L_align = ½ mean D(p1, T) + ½ mean D(p2, T), T detached (Algorithm 2; code ``reg_loss``)."""
    t = targets.detach()
    return 0.5 * neg_cosine(p1, t).mean() + 0.5 * neg_cosine(p2, t).mean()


def cluster_average(
    current: Sequence[TensorDict],
    uploads: Sequence[TensorDict],
    assign: Sequence[int],
    weights: Sequence[float],
) -> list[dict[str, torch.Tensor]]:
    """θ_j = Σ_{k∈M_j} w_k θ̃_k / Σ_{k∈M_j} w_k for every cluster j; an empty cluster is returned
    unchanged.

    ``uploads``, ``assign`` and ``weights`` are aligned lists in client-id order
    (docs/methods/featarc.md §2.2, 7.4–7.5).
    """
    out = []
    for j, cur in enumerate(current):
        members = [i for i, a in enumerate(assign) if a == j]
        if not members:
            out.append(dict(cur))
            continue
        out.append(weighted_average([uploads[i] for i in members], [weights[i] for i in members]))
    return out


def largest_cluster(assign: Sequence[int], sizes: Sequence[int], num_clusters: int) -> int:
    """j* = argmax_j m_j, m_j = Σ n_k over clients whose latest assignment is j; ties to the
    smallest j (§3).

    Uses only training-side information (assignments and client sizes), never test data.
    """
    mass = [0] * num_clusters
    for a, n in zip(assign, sizes):
        mass[int(a)] += int(n)
    return max(range(num_clusters), key=lambda j: (mass[j], -j))


LOCAL = "local."
# (seed, INIT, "cluster", j) for cluster j >= 1 (docs/methods/featarc.md §2.1 step 1)
CLUSTER_SEED_PATH = 0xC1A5
# images per no-grad forward of the assignment step (a memory knob, not a hyperparameter)
FEATURE_BATCH = 512


@dataclass(frozen=True, kw_only=True)
class FeatARCConfig(SimCLRConfig):
    """docs/methods/featarc.md §4; SimCLR / optimisation fields are FedAvg-SimCLR's
    (docs/methods/fedavg_simclr.md §4)."""

    num_clusters: int = 2  # C, paper C.1/C.3, --num_clusters 2
    reg_scale: float = 1.0  # λ, paper C.3, --reg_scale 1
    # §7.2 (code: projector output of the 2 views)
    align_local: Literal["projector", "backbone"] = "projector"
    # §7.2 (code: cluster backbone feature, clean x)
    align_target: Literal["backbone", "projector"] = "backbone"
    align_views: Literal["two_views", "view_and_clean"] = "two_views"  # §7.1
    # §3: "largest_cluster" (project default, no test selection) or "max_over_clusters" (the
    # official code's behaviour: every cluster model is scored and the maximum reported; such scores
    # select on the test set, carry that selection on their card and stay out of leaderboard main
    # columns; per-cluster scores and their mass-weighted mean are reported beside it).
    report_model: Literal["largest_cluster", "max_over_clusters"] = "largest_cluster"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.num_clusters < 1 or self.reg_scale < 0:
            raise ValueError("num_clusters must be >= 1 and reg_scale >= 0")
        if self.optimizer_state != "reset":
            raise ValueError(
                "FeatARC uses a fresh optimizer every round (docs/methods/featarc.md §4)"
            )


# docs/methods/featarc.md §5: ablation presets of Dec-SSL Fig. 5 (config overrides on the project
# default)
PRESETS: dict[str, dict] = {
    "featarc_align_only": {"num_clusters": 1, "reg_scale": 1.0},
    "featarc_cluster_only": {"num_clusters": 2, "reg_scale": 0.0},
    "featarc_decssl": {
        "weighting": "uniform",
        "bn": "average",
        "lr_schedule": "constant",
        "optimizer": "adam",
        "lr": 1e-3,
        "weight_decay": 1e-6,
        "batch_size": 256,
        "tau": 0.5,
        # §5: the paper's reporting, flagged selects_on_test
        "report_model": "max_over_clusters",
    },
}


def preset(name: str, **overrides) -> FeatARCConfig:
    return FeatARCConfig(**{**PRESETS[name], **overrides})


def client_size(up: Payload) -> int:
    """n_k of an upload: the sent size under ``num_batches`` (its weight is a batch count), else its
    weight. The cluster mass of featarc.md §3 is Σ n_k in examples, whatever the weighting."""
    return int(up.tensors["size"]) if "size" in up.tensors else int(up.num_examples)


def onehot(j: int, c: int) -> torch.Tensor:
    return F.one_hot(torch.tensor(j), c).to(torch.float32)


@METHODS.register("featarc")
class FeatARC(MethodBase):
    """FeatARC (Dec-SSL, ICLR 2023): C cluster models, alignment-based assignment, SimCLR +
    λ·L_align."""

    name: ClassVar[str] = "featarc"
    version: ClassVar[str] = "3"  # 3: the cluster mass counts examples under num_batches
    # every step through ctx.precision (benchmark.core.precision)
    precisions: ClassVar[tuple[str, ...]] = PRECISIONS
    Config: ClassVar[type] = FeatARCConfig
    # "size": n_k, sent only under weighting num_batches (then num_examples holds the batch count)
    payload_up: ClassVar[tuple[str, ...]] = ("encoder.*", "projector.*", "assign", "size")
    payload_down: ClassVar[tuple[str, ...]] = ("cluster*.encoder.*", "cluster*.projector.*")
    # read only by encoder(): cells that differ only in it share one pre-training
    # (benchmark.contracts.cell.pretrain_key_for)
    export_params: ClassVar[tuple[str, ...]] = ("report_model",)
    # benchmark.commands.live_settings: the SimCLR fields' declarations, and FeatARC's own
    inert_settings: ClassVar[Mapping[str, str | Inert]] = {
        **SIMCLR_INERT,
        "weighting": Inert(
            "round 1 puts client k in cluster k mod C (§2.1), so each cluster averages one upload "
            "and the weights cancel; with one cluster both clients share it",
            live_with={"num_clusters": 1},
        ),
        "optimizer_state": "a fresh optimizer every round (featarc.md §4): the config rejects keep",
        "bn": Inert(
            "§7.8 bn local: a client's own BN tensors replace its cluster's at its next "
            "participation; with one client per cluster (round 1's k mod C) they are the same",
            live_with={"num_clusters": 1},
            from_round=2,
        ),
        "bn_filter": Inert(
            "which tensors bn local keeps, read only under bn local at a client's next "
            "participation (one cluster, so that they differ from the cluster's)",
            live_with={"bn": "local", "num_clusters": 1},
            from_round=2,
        ),
        "proj_out": Inert(
            "the §7.2 dimension guard: the projector's width must equal the backbone's unless both "
            "ends of the alignment are projector outputs",
            live_with={"align_target": "projector"},
        ),
    }
    # check-method's state checks: the chosen cluster is kept with the local model, but no hook reads
    # it back (each round chooses again, Algorithm 1 line 14) and it is the same while the choice is
    evolving_client_state: ClassVar[tuple[str, ...]] = (LOCAL + "*",)
    state_read_exempt: ClassVar[Mapping[str, str]] = {
        "cluster": "a record of the cluster chosen last; no hook reads it (each round chooses again)"
    }
    cfg: FeatARCConfig

    def __init__(self, cfg: FeatARCConfig, backbone: ComponentSpec, inputs: InputSpec) -> None:
        super().__init__(cfg, backbone, inputs)
        self.nets = WorkingNets(self.build)
        _, feat_dim = build_backbone(backbone.name, dict(backbone.params))
        proj_out = cfg.proj_out or feat_dim
        dims = {"projector": proj_out, "backbone": feat_dim}
        if dims[cfg.align_local] != dims[cfg.align_target]:  # §7.2 dimension guard
            raise ValueError(
                f"FeatARC aligns {cfg.align_local} ({dims[cfg.align_local]}-d) with the cluster "
                f"{cfg.align_target} ({dims[cfg.align_target]}-d): dimensions must match"
            )

    # ---- plumbing --------------------------------------------------------------------------------
    def build(self) -> BackboneHead:
        return simclr_net(self.backbone, self.cfg)

    def bn_names(self) -> set[str]:
        return local_bn_names(self.nets.structure(), self.cfg)

    @staticmethod
    def prefix(j: int) -> str:
        return f"cluster{j}."

    def init_cluster(self, seed: int, j: int) -> dict[str, torch.Tensor]:
        """θ_0 with the fedavg_simclr init seed (C = 1, λ = 0 reproduces it); θ_j from (seed,
        cluster, j)."""
        path = () if j == 0 else (CLUSTER_SEED_PATH, j)
        with scoped_torch_seed(seed, Stream.INIT, *path):
            net = self.build()
        return tensors_of(net)

    def cluster_tensors(
        self, tensors: Mapping[str, torch.Tensor], j: int
    ) -> dict[str, torch.Tensor]:
        return select(tensors, self.prefix(j), strip=True)

    def with_local_bn(
        self, model: Mapping[str, torch.Tensor], local: Mapping[str, torch.Tensor]
    ) -> dict[str, torch.Tensor]:
        """``bn: local``: the client's own BN tensors replace the cluster model's (§7.8)."""
        if self.cfg.bn != "local":
            return dict(model)
        bn = self.bn_names()
        return {**{k: v for k, v in model.items() if k not in bn}, **{k: local[k] for k in bn}}

    @torch.no_grad()
    def features(
        self,
        net: BackboneHead,
        tensors: Mapping[str, torch.Tensor],
        images: torch.Tensor,
        view: UnlabeledView,
        *,
        projector: bool = False,
    ) -> torch.Tensor:
        """Normalised eval-mode features of clean images (evaluation transform, no augmentation,
        §7.9)."""
        load_tensors(net, tensors)
        net.eval()
        out = []
        for start in range(0, images.shape[0], FEATURE_BATCH):
            x = view.normalize(images[start : start + FEATURE_BATCH])
            h = net.encoder(x)
            out.append(F.normalize((net.projector(h) if projector else h).float(), dim=1))
        return torch.cat(out) if out else torch.zeros(0)

    # ---- hooks -----------------------------------------------------------------------------------
    def init_server(self, ctx: RoundContext) -> ServerState:
        model = {}
        for j in range(self.cfg.num_clusters):
            model.update({self.prefix(j) + k: v for k, v in self.init_cluster(ctx.seed, j).items()})
        empty = torch.zeros(0, dtype=torch.int64)
        extra = {
            "assign": empty,
            "n": empty.clone(),
            "assign_history": torch.zeros(0, 0, dtype=torch.int64),
        }
        # every registered client from the start (i mod C, size 0): with participation < 1 a client
        # never sampled still has an assignment, so per-client cards cover all K clients
        return ServerState(model=model, extra=self.grow_extra(extra, ctx.num_clients))

    def init_client(self, client_id: int, server: ServerState) -> ClientState:
        return ClientState()

    def broadcast(self, server: ServerState, ctx: RoundContext) -> Payload:
        if self.cfg.bn == "local":
            bn = self.bn_names()
            return Payload({k: v for k, v in server.model.items() if k.split(".", 1)[1] not in bn})
        return Payload(dict(server.model))

    def declared_traffic(self, tensors: ServerTensors, at: TrafficContext) -> Sent | None:
        """Algorithm 1: every cluster model comes down (its BN tensors left out under ``bn:
        local``); one trained model goes up with its one-hot cluster choice (C float32) and, under
        ``weighting: num_batches``, its example count (one int64)."""
        C = self.cfg.num_clusters
        local = self.bn_names() if self.cfg.bn == "local" else set()
        down = tensors.model_bytes(exclude={self.prefix(j) + k for j in range(C) for k in local})
        up = tensors.model_bytes(prefix=self.prefix(0)) + 4 * C
        return Sent(up=up + (8 if self.cfg.weighting == "num_batches" else 0), down=down)

    def assign(
        self,
        down: Payload,
        local: Mapping[str, torch.Tensor],
        view: UnlabeledView,
        net: BackboneHead,
        device: torch.device,
    ) -> tuple[int, torch.Tensor, list[torch.Tensor]]:
        """Algorithm 1 lines 8–14: (I, A, cluster features Zg_j) on the client's clean training
        images."""
        images = view.to(device).images
        local_feats = self.features(net, local, images, view)
        cluster_feats = [
            self.features(
                net, self.with_local_bn(self.cluster_tensors(down.tensors, j), local), images, view
            )
            for j in range(self.cfg.num_clusters)
        ]
        scores = alignment_scores(local_feats, cluster_feats)
        return pick_cluster(scores), scores, cluster_feats

    def client_update(
        self, down: Payload, state: ClientState, data: ClientData, ctx: RoundContext
    ) -> tuple[Payload, ClientState]:
        cfg = self.cfg
        C = cfg.num_clusters
        k = int(ctx.client_id if ctx.client_id is not None else data.client_id)
        net = self.nets.get(ctx.device)
        view = data.train
        # §2.1 step 2: an unseen client's local model is the initial cluster (k mod C), regenerated
        # from its seed
        local = (
            select(state.tensors, LOCAL, strip=True)
            if state.tensors
            else self.init_cluster(ctx.seed, k % C)
        )
        I, scores, cluster_feats = self.assign(down, local, view, net, ctx.device)
        model = self.with_local_bn(self.cluster_tensors(down.tensors, I), local)
        if cfg.align_target == "backbone":
            targets = cluster_feats[I]
        else:
            targets = self.features(net, model, view.to(ctx.device).images, view, projector=True)
        load_tensors(net, model)
        net.train()
        lr = scheduled_lr(cfg, ctx.round, ctx.num_rounds, ctx.local_epochs)
        opt = make_optimizer(cfg, [p for p in net.parameters() if p.requires_grad], lr)
        loss_fn = CONTRASTIVE_LOSSES[cfg.loss_form]
        images = view.to(ctx.device).images

        def local_out(h: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
            return z if cfg.align_local == "projector" else h

        # LocalUpdate-FAR (Algorithm 2, docs/methods/featarc.md §2.3)
        def step(idx: torch.Tensor) -> torch.Tensor:
            # the host's row indices, copied once without making the host wait
            idx = to_device(idx, images.device)
            batch = images[idx]
            v1, v2 = two_views(batch, cfg.augment, ctx.generator, mean=view.mean, std=view.std)
            # one forward pass per view (docs/methods/featarc.md §2.3, the code)
            h1, h2 = net.encoder(v1), net.encoder(v2)
            z1, z2 = net.projector(h1), net.projector(h2)
            loss = loss_fn(z1, z2, cfg.tau)
            if cfg.reg_scale == 0:
                return loss
            a1, a2 = local_out(h1, z1), local_out(h2, z2)
            # literal paper reading (§7.1): second term on clean x
            if cfg.align_views == "view_and_clean":
                hc = net.encoder(view.normalize(batch))
                a2 = local_out(hc, net.projector(hc))
            return loss + cfg.reg_scale * alignment_loss(a1, a2, targets[idx])

        stats = run_local_epochs(
            IndexView(len(view), view.mean, view.std),
            step,
            opt,
            ctx,
            batch_size=cfg.batch_size,
            epochs=ctx.local_epochs,
            nan_policy=cfg.nan_policy,
        )
        out = tensors_of(net)
        weight = stats.batches if cfg.weighting == "num_batches" else data.num_examples
        metrics = {
            **stats.as_dict(),
            "lr": lr,
            "cluster": float(I),
            **{f"align_score{j}": float(scores[j]) for j in range(C)},
        }
        keep = {LOCAL + name: v.clone() for name, v in out.items()}
        keep["cluster"] = torch.tensor(I, dtype=torch.int64)
        up = {**out, "assign": onehot(I, C)}
        if cfg.weighting == "num_batches":  # weight = batch count; the mass of §3 needs n_k
            up["size"] = torch.tensor([data.num_examples], dtype=torch.int64)
        return (
            Payload(up, num_examples=weight, metrics=metrics),
            ClientState(tensors=keep, last_round=ctx.round),
        )

    def server_aggregate(
        self,
        server: ServerState,
        ups: Mapping[int, Payload],
        ctx: RoundContext,
        public: UnlabeledView | None,
    ) -> ServerState:
        cfg = self.cfg
        C = cfg.num_clusters
        # DEVIATION: uploads, weights and assignments are aligned in client-id order, whatever order
        # the mapping has (docs/methods/featarc.md §7.5); the official code keeps the uploads in
        # sampling order but looks their weights up by client id, so under partial participation
        # its cluster models are not the weighted averages the paper describes
        # (docs/official-code.md)
        ids = sorted(ups)
        extra = self.grow_extra(server.extra, (max(ids) + 1) if ids else 0)
        if not ids:
            return ServerState(model=server.model, extra=extra)
        payloads = [ups[k] for k in ids]
        assign = [int(torch.argmax(p.tensors["assign"])) for p in payloads]
        mode = "num_examples" if cfg.weighting == "num_batches" else cfg.weighting
        # normalised per cluster below
        weights = aggregation_weights([p.num_examples for p in payloads], mode)
        uploads = [
            {k: v for k, v in p.tensors.items() if k not in ("assign", "size")} for p in payloads
        ]
        current = [self.cluster_tensors(server.model, j) for j in range(C)]
        model = {}
        for j, tensors in enumerate(cluster_average(current, uploads, assign, weights)):
            model.update({self.prefix(j) + k: v for k, v in tensors.items()})
        a, n = extra["assign"].clone(), extra["n"].clone()
        row = torch.full((1, a.numel()), -1, dtype=torch.int64)
        for k, j, p in zip(ids, assign, payloads):
            a[k], n[k], row[0, k] = j, client_size(p), j
        hist = torch.cat([extra["assign_history"], row])
        extra = {"assign": a, "n": n, "assign_history": hist}
        mass = [int(n[a == j].sum()) for j in range(C)]
        reported = self.reported_cluster(ServerState(model=model, extra=extra))
        return ServerState(
            model=model,
            extra=extra,
            metrics={
                "reported_cluster": float(reported),
                **{f"cluster_mass{j}": float(m) for j, m in enumerate(mass)},
            },
        )

    def grow_extra(self, extra: Mapping[str, torch.Tensor], k: int) -> dict[str, torch.Tensor]:
        """Pad the per-client arrays to k clients: assignment i mod C (§2.1), size 0, history −1
        (not sampled)."""
        a, n, h = extra["assign"], extra["n"], extra["assign_history"]
        if a.numel() >= k:
            return dict(extra)
        extra_ids = torch.arange(a.numel(), k, dtype=torch.int64)
        h = torch.cat([h, torch.full((h.shape[0], k - h.shape[1]), -1, dtype=torch.int64)], dim=1)
        return {
            "assign": torch.cat([a, extra_ids % self.cfg.num_clusters]),
            "n": torch.cat([n, torch.zeros(k - n.numel(), dtype=torch.int64)]),
            "assign_history": h,
        }

    def reported_cluster(self, server: ServerState) -> int:
        """j* of §3: the cluster with the largest training mass (assignments and sizes only)."""
        return largest_cluster(
            server.extra["assign"].tolist(), server.extra["n"].tolist(), self.cfg.num_clusters
        )

    def cluster_encoder(self, server: ServerState, j: int) -> torch.nn.Module:
        return encoder_of(self.build(), self.cluster_tensors(server.model, j))

    def encoder(
        self, server: ServerState, clients: Mapping[int, ClientState] | None = None
    ) -> Encoder:
        reported = self.reported_cluster(server)
        clusters = tuple(self.cluster_encoder(server, j) for j in range(self.cfg.num_clusters))
        enc = clusters[reported]
        a, n = server.extra["assign"], server.extra["n"]
        # perclient@v1: each client is evaluated with the cluster of its last assignment
        # (docs/protocols/evaluation.md §3.7)
        common = {"client_models": clusters, "client_index": tuple(int(j) for j in a.tolist())}
        mass = tuple(float(n[a == j].sum()) for j in range(self.cfg.num_clusters))
        if self.cfg.report_model == "largest_cluster":
            # §3: the largest cluster's scores are the value; every cluster model's and their
            # mass-weighted mean are computed and logged beside it (never a main column)
            return self.export(
                enc,
                members=clusters,
                member_rule="designated",
                designated_member=reported,
                member_weights=mass,
                **common,
            )
        return self.export(
            enc, members=clusters, member_rule="max_over_models_test", member_weights=mass, **common
        )
