"""FedMAE (Yang, Chen, Liu, Yuan, Bao, Cui; arXiv 2303.11339): one-block masked auto-encoders on the
clients, cascaded into a multi-block ViT on the server. Spec: docs/methods/fedmae.md.

- Client (§2.1, §2.4): a one-block MAE (one encoder block that sees the 25 % visible patches, one
  decoder block that reconstructs the masked 75 % in pixel space), trained for E local epochs with
  AdamW on MAE's pre-training augmentation; a fresh mask per step, drawn from the round's client
  stream (``ctx.generator``).
- Server (§2.2, §2.5): ``aggregate="none"`` (the paper's stated design, §1/§3.3/§7: no averaging,
  each client keeps its own model) or ``"mean"`` (§5.7: data-share FedAvg of the client models every
  round). Both keep a block pool of the latest upload of each client.
- Export (§2.6): the first N_p pool entries' encoder blocks, in pool order (round desc, client asc),
  stacked into an N-block ViT; trailing blocks seeded fresh; patch embedding and cls token from s_1,
  final norm and decoder from s_{N_p} (``first_last``) or their means. The encoder's pooled feature
  feeds the kNN / linear tasks; the cascaded auto-encoder (with its decoder) is exported as
  ``Encoder.extras["mae"]`` for the ``reconstruction`` task.

The backbone names the ViT size (``vit_micro``, ``vit_tiny_p4``, ``vit_base_p4`` =
``mae_one_block``, ``vit_base_p16``); its ``depth`` is the cascade depth N unless ``cascade_depth``
overrides it, so ``no_pretrain`` with the same backbone is a random ViT of exactly the exported
shape.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import torch
from torch import nn

from benchmark.api import (
    BACKBONES,
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
    adamw,
    aggregation_weights,
    augment,
    from_mapping,
    load_tensors,
    normalize_patches,
    run_local_epochs,
    scoped_torch_seed,
    select,
    tensors_of,
    to_device,
    weighted_average,
)
from methods._shared.nets import WorkingNets

# --------------------------------------------------------------------------------------------------
# Masked auto-encoding maths (MAE, He et al. 2022; FedMAE docs/methods/fedmae.md §2.1): masks,
# targets, the masked-patch loss.
# (folded in from methods/_shared/mae.py: this method is its only user)
# --------------------------------------------------------------------------------------------------


def keep_count(num_patches: int, mask_ratio: float) -> int:
    """L_keep = ⌊L (1 − ρ)⌋ (MAE ``random_masking``)."""
    return int(num_patches * (1 - mask_ratio))


def random_patch_permutation(
    batch: int, num_patches: int, generator: torch.Generator, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """ids_shuffle = argsort(u), u ~ U(0, 1)^{B×L}, drawn on the CPU from ``generator``
    (device-independent)."""
    noise = torch.rand(batch, num_patches, generator=generator)
    return to_device(torch.argsort(noise, dim=1), device)


def masked_patch_mse(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """𝓛 = Σ_ij M_ij · (1/P)‖x̂_ij − t_ij‖² / Σ_ij M_ij: mean squared error over removed patches
    only."""
    per_patch = ((pred.float() - target.float()) ** 2).mean(dim=-1)
    return (per_patch * mask).sum() / mask.sum()


def mae_loss(
    pred: torch.Tensor,
    target_patches: torch.Tensor,
    mask: torch.Tensor,
    *,
    norm_pix_loss: bool = False,
) -> torch.Tensor:
    """FedMAE's client loss (docs/methods/fedmae.md §2.1 step 5; MAE ``forward_loss``)."""
    target = normalize_patches(target_patches) if norm_pix_loss else target_patches
    return masked_patch_mse(pred, target, mask)


# --------------------------------------------------------------------------------------------------
# FedMAE's server side as pure functions (docs/methods/fedmae.md §2.2 block pool, §2.6 cascade).
#
# The block pool lives in ``ServerState.extra`` as ``pool.<slot>.<tensor name>`` plus 0-d integer
# tensors ``pool.<slot>.round`` and ``pool.<slot>.client``; slot 0 is first in pool order (round
# descending, client id ascending), one entry per client (its latest upload), at most ``pool_size``
# entries.
# (folded in from methods/_shared/cascade.py: this method is its only user)
# --------------------------------------------------------------------------------------------------


TensorDict = Mapping[str, torch.Tensor]
_SLOT = re.compile(r"^pool\.(\d+)\.(.+)$")
# from s_1 under first_last (block 1 was trained on them)
ENCODER_SHARED = ("patch_embed.", "cls_token")
DECODER = ("decoder_embed.", "mask_token", "decoder_blocks.", "decoder_norm.", "decoder_pred.")


@dataclass(frozen=True)
class PoolEntry:
    round: int
    client: int
    tensors: TensorDict  # the one-block MAE's 36 tensors, named "mae.*"


def pool_entries(extra: TensorDict) -> list[PoolEntry]:
    """Decode the pool from ``ServerState.extra`` in slot order."""
    slots: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in extra.items():
        m = _SLOT.match(key)
        if m:
            slots.setdefault(int(m.group(1)), {})[m.group(2)] = value
    out = []
    for slot in sorted(slots):
        d = slots[slot]
        out.append(PoolEntry(int(d.pop("round")), int(d.pop("client")), d))
    return out


def pool_to_extra(entries: Sequence[PoolEntry]) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for slot, e in enumerate(entries):
        out.update({f"pool.{slot}.{k}": v for k, v in e.tensors.items()})
        out[f"pool.{slot}.round"] = torch.tensor(e.round, dtype=torch.int64)
        out[f"pool.{slot}.client"] = torch.tensor(e.client, dtype=torch.int64)
    return out


def pool_insert(
    entries: Sequence[PoolEntry], uploads: Mapping[int, TensorDict], round_: int, pool_size: int
) -> list[PoolEntry]:
    """Replace each uploading client's entry by its new upload, order by (round desc, client asc),
    keep pool_size."""
    kept = [e for e in entries if e.client not in uploads]
    new = [PoolEntry(round_, int(k), dict(t)) for k, t in uploads.items()]
    merged = sorted([*kept, *new], key=lambda e: (-e.round, e.client))
    return merged[:pool_size]


def _mean(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """Unweighted mean, accumulated in float64 (bit-exact for one input)."""
    if len(tensors) == 1:
        return tensors[0].clone()
    acc = torch.zeros_like(tensors[0], dtype=torch.float64)
    for t in tensors:
        acc += t.to(torch.float64)
    return (acc / len(tensors)).to(tensors[0].dtype)


def cascade_tensors(
    sources: Sequence[TensorDict],
    fresh: TensorDict,
    depth: int,
    *,
    shared: str = "first_last",
    prefix: str = "mae.",
) -> dict[str, torch.Tensor]:
    """Tensors of the N-block cascaded MAE (docs/methods/fedmae.md §2.6 steps 2–4).

    ``sources`` are s_1..s_{N_p} (one-block MAEs, ``prefix``-named); ``fresh`` is a seeded N-block
    initialisation with the same names. Block i ← s_i's ``blocks.0`` (bitwise) for i < N_p, fresh
    block i otherwise. Shared tensors: ``first_last`` → patch embedding and cls token from s_1,
    final norm and decoder from s_{N_p}; ``mean`` → unweighted means over the sources. Without
    sources every tensor comes from ``fresh``.
    """
    if shared not in ("first_last", "mean"):
        raise ValueError(f"shared must be 'first_last' or 'mean', got {shared!r}")
    if len(sources) > depth:
        raise ValueError("more sources than blocks")
    out: dict[str, torch.Tensor] = {}
    blk = f"{prefix}blocks."
    for key, value in fresh.items():
        if key.startswith(blk):
            index, rest = key[len(blk) :].split(".", 1)
            i = int(index)
            out[key] = sources[i][f"{blk}0.{rest}"].clone() if i < len(sources) else value.clone()
            continue
        if not sources:
            out[key] = value.clone()
            continue
        name = key[len(prefix) :]
        if shared == "mean":
            out[key] = _mean([s[key] for s in sources])
        elif name.startswith(ENCODER_SHARED):
            out[key] = sources[0][key].clone()
        else:  # final norm and decoder from the last pre-trained source
            out[key] = sources[-1][key].clone()
    return out


PREFIX = "mae."
# the deepest cascade a cell may ask for (Table 7 goes to 10 blocks): a bound on what the server
# builds at export, whatever a record's params say
MAX_CASCADE_DEPTH = 64


MAE_AUGMENT = AugmentConfig(
    crop_scale=(0.2, 1.0), interpolation="bicubic", flip_p=0.5, jitter_p=0.0, gray_p=0.0, blur_p=0.0
)


@dataclass(frozen=True, kw_only=True)
class FedMAEConfig:
    """FedMAE hyperparameters (docs/methods/fedmae.md §3; project defaults = the closest code,
    FedMAR-DecMAR, where unstated)."""

    mask_ratio: float = 0.75  # ρ, Fig. 1 / §3.3
    norm_pix_loss: bool = False  # §2.1 step 5; FedMAR-DecMAR default False (§6.7)
    # The paper contradicts itself (§3.3 no averaging; §5.7 averaging each round): both offered,
    # "none" default (§6.1).
    aggregate: Literal["none", "mean"] = "none"
    weighting: Literal["uniform", "num_examples"] = "num_examples"  # `mean` mode weights n_k (§6.9)
    batch_size: int = 128  # B, closest code; drop_last=True
    blr: float = 1.5e-4  # base lr; lr = blr · B / 256, constant, no warmup (closest code)
    betas: tuple[float, float] = (0.9, 0.95)  # AdamW β, closest code
    weight_decay: float = 0.05  # on tensors with ≥ 2 dims except biases (timm add_weight_decay)
    # MAE pre-training views (§2.4): RandomResizedCrop(scale (0.2, 1), bicubic) + horizontal flip,
    # nothing else; a grid's `augment: {flip_p: 0}` (digits) now reaches FedMAE as every other
    # method
    augment: AugmentConfig = field(default_factory=lambda: MAE_AUGMENT)
    pool_size: int = 10  # block pool entries (deepest cascade of Table 7)
    # N (§5.5); None = the backbone's depth (5 for the ViT presets)
    cascade_depth: int | None = None
    cascade_pretrained: int | None = None  # N_p ≤ N leading pre-trained blocks (Table 8); None = N
    cascade_source: Literal["latest_uploads", "global_copies"] = "latest_uploads"  # §6.3
    cascade_shared: Literal["first_last", "mean"] = "first_last"  # §6.4
    cascade_init: int = 0  # seed of the un-pretrained blocks (Tables 7–8)
    server_pretrain_images: int = 0  # §5.5 server training on public images; only 0 is implemented
    nan_policy: Literal["raise", "skip"] = "raise"

    def __post_init__(self) -> None:
        if not 0 < self.mask_ratio < 1:
            raise ValueError("mask_ratio must be in (0, 1)")
        if self.batch_size < 1 or self.blr <= 0 or self.pool_size < 1:
            raise ValueError("batch_size, blr and pool_size must be positive")
        if self.cascade_source == "global_copies" and self.aggregate != "mean":
            raise ValueError(
                "cascade_source='global_copies' needs aggregate='mean' (θ_g exists only then)"
            )
        if self.cascade_depth is not None and not 1 <= self.cascade_depth <= MAX_CASCADE_DEPTH:
            raise ValueError(f"cascade_depth must be in [1, {MAX_CASCADE_DEPTH}]")
        if self.cascade_pretrained is not None and self.cascade_pretrained < 0:
            raise ValueError("cascade_pretrained must be >= 0")
        if self.server_pretrain_images != 0:
            # DEVIATION: §5.5 (Table 3) trains the cascade on 1k–10k unlabeled server images for 100
            # epochs; not implemented yet, so a cell asking for it is rejected instead of silently
            # running without it.
            raise ValueError("server_pretrain_images > 0 (FedMAE §5.5) is not implemented")

    @property
    def lr(self) -> float:
        return self.blr * self.batch_size / 256


def param_groups(net: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """timm ``add_weight_decay``: no decay for 1-D tensors and biases; everything else decays."""
    decay, no_decay = [], []
    for name, p in net.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if p.ndim <= 1 or name.endswith(".bias") else decay).append(p)
    return [
        {"params": no_decay, "weight_decay": 0.0},
        {"params": decay, "weight_decay": weight_decay},
    ]


@METHODS.register("fedmae", aliases=("fed_mae",))
class FedMAE(MethodBase):
    """FedMAE (arXiv 2303.11339; §3.1 one-block MAE, §3.3 asynchronous training, §5.5 cascade, §5.7
    averaging)."""

    name: ClassVar[str] = "fedmae"
    version: ClassVar[str] = "3"  # 3: a client smaller than B trains (issue 46)
    # every step through ctx.precision (benchmark.core.precision)
    precisions: ClassVar[tuple[str, ...]] = PRECISIONS
    Config: ClassVar[type] = FedMAEConfig
    requires: ClassVar[frozenset[Requirement]] = frozenset()
    payload_up: ClassVar[tuple[str, ...]] = ("mae.*",)
    payload_down: ClassVar[tuple[str, ...]] = ("mae.*",)
    # check-method's frozen-kNN check does not apply: the paper evaluates FedMAE only after full
    # fine-tuning (§5.1), and a frozen cascade of blocks each trained alone is not claimed to beat a
    # random ViT under kNN.
    frozen_knn_exempt: ClassVar[str] = "evaluated after fine-tuning in the paper (§5.1), not frozen"
    smoke_settings: ClassVar[dict] = {
        "backbone": {"name": "vit_micro"},
        "method": {"batch_size": 64},
    }
    # read only by encoder() (the server-side cascade, §2.6): cells that differ only in them, e.g.
    # the depth and pre-trained-block ablations of Tables 7-8, share one pre-training
    # (benchmark.contracts.cell.pretrain_key_for)
    export_params: ClassVar[tuple[str, ...]] = (
        "cascade_depth",
        "cascade_pretrained",
        "cascade_source",
        "cascade_shared",
        "cascade_init",
    )
    # benchmark.commands.live_settings (the cascade_* fields are export_params, inert by declaration)
    inert_settings: ClassVar[Mapping[str, str | Inert]] = {
        "weighting": Inert(
            "§6.9: the n_k weights of aggregate mean; aggregate none averages nothing",
            live_with={"aggregate": "mean"},
        ),
        "pool_size": Inert(
            "§2.2: the pool keeps the latest upload of at most pool_size clients; any pool of two "
            "or more holds both clients of the live cell (a pool of one, with a cascade of one "
            "pre-trained block, does not)",
            live_with={"pool_size": 1, "cascade_pretrained": 1},
        ),
        "server_pretrain_images": "§5.5 server training is not implemented: only 0 is accepted",
        "nan_policy": (
            "acts only on a non-finite loss (raise, or skip the step); "
            "tests/benchmark/test_local_train.py holds both"
        ),
        **{
            f"augment.{name}": Inert(
                "MAE's views have no colour jitter (§2.4): read only when jitter_p > 0",
                live_with={"augment": {"jitter_p": 0.8}},
            )
            for name in ("jitter",)
        },
        **{
            f"augment.{name}": Inert(
                "MAE's views have no blur (§2.4): read only when blur_p > 0",
                live_with={"augment": {"blur_p": 0.5}},
            )
            for name in ("blur_sigma", "blur_kernel")
        },
    }

    def __init__(self, cfg: FedMAEConfig, backbone: ComponentSpec, inputs: InputSpec) -> None:
        super().__init__(cfg, backbone, inputs)
        spec_cls = BACKBONES.get(backbone.name)
        if not hasattr(spec_cls, "build_mae"):
            raise ValueError(
                f"FedMAE needs a ViT backbone (vit_micro, vit_tiny_p4, vit_base_p4, vit_base_p16), "
                f"got {backbone.name!r}"
            )
        self.spec = from_mapping(spec_cls, dict(backbone.params))
        self.depth = cfg.cascade_depth or self.spec.depth
        self.pretrained = self.depth if cfg.cascade_pretrained is None else cfg.cascade_pretrained
        if self.pretrained > self.depth:
            raise ValueError(
                f"cascade_pretrained {self.pretrained} exceeds the cascade depth {self.depth}"
            )
        if cfg.cascade_source == "latest_uploads" and self.pretrained > cfg.pool_size:
            raise ValueError(
                f"cascade_pretrained {self.pretrained} exceeds pool_size {cfg.pool_size}"
            )
        self.nets = WorkingNets(self.build)  # the client's one-block MAE

    # ---- model plumbing --------------------------------------------------------------------------
    def build(self, depth: int = 1) -> nn.Module:
        """The masked auto-encoder at the backbone's size (``depth=1``: the client's one-block
        MAE)."""
        return self.spec.build_mae(depth, norm_pix_loss=self.cfg.norm_pix_loss)

    def initial_tensors(self, seed: int) -> dict[str, torch.Tensor]:
        """θ_0: the seeded initialisation, identical on the server and every client (§2.3, `none`
        down-link)."""
        with scoped_torch_seed(seed, Stream.INIT):
            return tensors_of(self.build(), PREFIX)

    # ---- hooks -----------------------------------------------------------------------------------
    def init_server(self, ctx: RoundContext) -> ServerState:
        return ServerState(model=self.initial_tensors(ctx.seed))

    def init_client(self, client_id: int, server: ServerState) -> ClientState:
        # `none`: θ_0 is rebuilt from the shared seed at the first participation (§2.3), so
        # never-sampled clients hold nothing; `mean`: clients keep no tensors at all.
        return ClientState()

    def broadcast(self, server: ServerState, ctx: RoundContext) -> Payload:
        if self.cfg.aggregate == "mean":
            return Payload(dict(server.model))
        return Payload({})

    def declared_traffic(self, tensors: ServerTensors, at: TrafficContext) -> Sent | None:
        """§2.4: a client uploads its one-block MAE; it receives the global one only under
        ``aggregate: mean`` (``none``: nothing comes down, §2.3)."""
        block = tensors.model_bytes(prefix=PREFIX)
        return Sent(up=block, down=block if self.cfg.aggregate == "mean" else 0)

    def start_tensors(
        self, down: Payload, state: ClientState, ctx: RoundContext
    ) -> Mapping[str, torch.Tensor]:
        """§2.4 step 1: `mean` → θ_g; `none` → the client's persisted model, or θ_0 at its first
        participation."""
        if self.cfg.aggregate == "mean":
            return down.tensors
        own = select(state.tensors, PREFIX)
        return own if own else self.initial_tensors(ctx.seed)

    def client_update(
        self, down: Payload, state: ClientState, data: ClientData, ctx: RoundContext
    ) -> tuple[Payload, ClientState]:
        cfg = self.cfg
        net = self.nets.get(ctx.device)
        load_tensors(net, self.start_tensors(down, state, ctx), PREFIX)
        net.train()
        # A new AdamW at every local training call (FedMAR-DecMAR); optimizer state is not persisted
        # (§2.2).
        opt = adamw(param_groups(net, cfg.weight_decay), lr=cfg.lr, betas=cfg.betas)
        aug = cfg.augment
        view = data.train
        num_patches = net.num_patches
        len_keep = keep_count(num_patches, cfg.mask_ratio)

        def step(batch: torch.Tensor) -> torch.Tensor:
            x = augment(
                batch, aug, ctx.generator, size=self.spec.img_size, mean=view.mean, std=view.std
            )
            ids = random_patch_permutation(x.shape[0], num_patches, ctx.generator, x.device)
            pred, mask = net.forward_masked(x, ids, len_keep)
            return mae_loss(pred, net.patchify(x), mask, norm_pix_loss=cfg.norm_pix_loss)

        stats = run_local_epochs(
            view,
            step,
            opt,
            ctx,
            batch_size=cfg.batch_size,
            epochs=ctx.local_epochs,
            drop_last=True,
            nan_policy=cfg.nan_policy,
        )
        theta = tensors_of(net, PREFIX)
        keep = {k: v.clone() for k, v in theta.items()} if cfg.aggregate == "none" else {}
        return (
            Payload(theta, num_examples=data.num_examples, metrics=stats.as_dict()),
            ClientState(tensors=keep, last_round=ctx.round),
        )

    def server_aggregate(
        self,
        server: ServerState,
        ups: Mapping[int, Payload],
        ctx: RoundContext,
        public: UnlabeledView | None,
    ) -> ServerState:
        if not ups:
            return server
        model = dict(server.model)
        if self.cfg.aggregate == "mean":  # §2.5: θ_g ← Σ n_k θ_k / Σ n_k
            payloads = [ups[k] for k in sorted(ups)]
            weights = aggregation_weights([p.num_examples for p in payloads], self.cfg.weighting)
            model = weighted_average([p.tensors for p in payloads], weights)
        pool = pool_insert(
            pool_entries(server.extra),
            {k: ups[k].tensors for k in sorted(ups)},
            ctx.round,
            self.cfg.pool_size,
        )
        extra = {k: v for k, v in server.extra.items() if not k.startswith("pool.")}
        return ServerState(model=model, extra={**extra, **pool_to_extra(pool)})

    # ---- export ----------------------------------------------------------------------------------
    def cascade_sources(self, server: ServerState) -> list[Mapping[str, torch.Tensor]]:
        if self.cfg.cascade_source == "global_copies":
            return [server.model] * self.pretrained
        entries = pool_entries(server.extra)[: self.pretrained]
        if len(entries) < self.pretrained:
            warnings.warn(
                f"FedMAE: the block pool holds {len(entries)} entries, the cascade wants "
                f"{self.pretrained}; the missing blocks are freshly initialised (docs/methods/fedmae.md §2.6)",
                stacklevel=2,
            )
        return [e.tensors for e in entries]

    def cascaded_tensors(self, server: ServerState) -> dict[str, torch.Tensor]:
        """The N-block MAE's tensors (§2.6 steps 1–4), named ``mae.*``."""
        with scoped_torch_seed(self.cfg.cascade_init, Stream.INIT, 1):
            fresh = tensors_of(self.build(self.depth), PREFIX)
        return cascade_tensors(
            self.cascade_sources(server),
            fresh,
            self.depth,
            shared=self.cfg.cascade_shared,
            prefix=PREFIX,
        )

    def encoder(
        self, server: ServerState, clients: Mapping[int, ClientState] | None = None
    ) -> Encoder:
        tensors = self.cascaded_tensors(server)
        with scoped_torch_seed(0, Stream.INIT, 0):  # structure only; every tensor is overwritten
            mae = self.build(self.depth)
            enc = self.spec.build(self.depth)
        load_tensors(mae, tensors, PREFIX)
        load_tensors(enc, tensors, PREFIX)
        return self.export(enc.eval(), extras={"mae": mae.eval()})
