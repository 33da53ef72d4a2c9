"""Vision Transformers built from timm's blocks: a plain ViT encoder and the masked auto-encoder of
FedMAE.

Parameter names follow MAE (He et al. 2022, ``models_mae.py``) and FedMAE (docs/methods/fedmae.md
§2.1): ``patch_embed.proj``, ``cls_token``, ``blocks.<i>.{norm1, attn.qkv, attn.proj, norm2,
mlp.fc1, mlp.fc2}``, ``norm``, and for the auto-encoder ``decoder_embed``, ``mask_token``,
``decoder_blocks.<i>``, ``decoder_norm``, ``decoder_pred``. Position embeddings are fixed 2-D
sin-cos tables held as non-persistent buffers: they are rebuilt from (width, grid) on every side,
never trained, never in a state dict, never communicated.

``ViTEncoder`` maps a normalised image batch to pooled features (mean of the patch tokens, or the
class token), so tasks evaluate a ViT exactly as a ResNet. ``MaskedAutoencoderViT`` is a
``ViTEncoder`` plus a decoder; with ``depth=1`` it is FedMAE's one-block client model, with
``depth=N`` the server's cascade.

Registered sizes (docs/methods/fedmae.md §2.7): ``vit_micro`` (tiny-16 widths, 2 blocks; CPU tests
and the embedded default), ``vit_tiny_p4`` (small-32), ``vit_base_p4`` (cifar32-b, alias
``mae_one_block``: the suite's FedMAE backbone on 32-px data), ``vit_base_p16`` (the paper's 224-px
preset). ``depth`` is the downstream depth (FedMAE's cascade depth N).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, ClassVar, Literal

import numpy as np
import torch
from torch import nn

from benchmark.contracts.registries import BACKBONES

if TYPE_CHECKING:
    from timm.models.vision_transformer import Block

# timm is imported where a ViT is built, not with this module: the registry imports every backbone
# module, and a process that never builds a ViT (a ResNet cell, a `run` that hands its cells to
# workers) would otherwise pay about a second of CPU for timm's model zoo at start-up


# ---- fixed position embeddings (MAE util/pos_embed.py) -------------------------------------------
def sincos_1d(embed_dim: int, pos: np.ndarray) -> np.ndarray:
    omega = np.arange(embed_dim // 2, dtype=np.float64) / (embed_dim / 2.0)
    omega = 1.0 / 10000**omega
    out = np.einsum("m,d->md", pos.reshape(-1).astype(np.float64), omega)
    return np.concatenate([np.sin(out), np.cos(out)], axis=1)


def sincos_2d(embed_dim: int, grid_size: int, cls_token: bool = True) -> torch.Tensor:
    """MAE ``get_2d_sincos_pos_embed``: (1, [1 +] g², D); half the channels encode h, half w; the
    cls row is 0."""
    if embed_dim % 4:
        raise ValueError(
            f"sin-cos position embeddings need a width divisible by 4, got {embed_dim}"
        )
    gh = np.arange(grid_size, dtype=np.float32)
    gw = np.arange(grid_size, dtype=np.float32)
    # w goes first (MAE)
    grid = np.stack(np.meshgrid(gw, gh), axis=0).reshape(2, 1, grid_size, grid_size)
    emb = np.concatenate(
        [sincos_1d(embed_dim // 2, grid[0]), sincos_1d(embed_dim // 2, grid[1])], axis=1
    )
    if cls_token:
        emb = np.concatenate([np.zeros((1, embed_dim)), emb], axis=0)
    return torch.from_numpy(emb).float().unsqueeze(0)


def patchify(imgs: torch.Tensor, p: int) -> torch.Tensor:
    """(B, 3, H, W) → (B, L, p²·3), MAE's layout (row-major patches, channel fastest inside a
    patch)."""
    b, c, h, w = imgs.shape
    gh, gw = h // p, w // p
    x = imgs.reshape(b, c, gh, p, gw, p)
    return torch.einsum("nchpwq->nhwpqc", x).reshape(b, gh * gw, p * p * c)


def normalize_patches(target: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """MAE's norm_pix target: per patch (t − mean) / sqrt(var + 1e-6), with torch's default
    (unbiased) variance, as in MAE's ``forward_loss`` (``target.var(dim=-1)``)."""
    mean = target.mean(dim=-1, keepdim=True)
    var = target.var(dim=-1, keepdim=True)
    return (target - mean) / (var + eps) ** 0.5


def unpatchify(x: torch.Tensor, p: int, channels: int = 3) -> torch.Tensor:
    b, L, _ = x.shape
    g = math.isqrt(L)
    x = x.reshape(b, g, g, p, p, channels)
    return torch.einsum("nhwpqc->nchpwq", x).reshape(b, channels, g * p, g * p)


def masking_from_ids(
    ids_shuffle: torch.Tensor, len_keep: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ids_keep, ids_restore, mask) from a per-sample permutation; mask is 1 on removed patches
    (MAE)."""
    ids_restore = torch.argsort(ids_shuffle, dim=1)
    ids_keep = ids_shuffle[:, :len_keep]
    mask = torch.ones(ids_shuffle.shape, device=ids_shuffle.device)
    mask[:, :len_keep] = 0
    mask = torch.gather(mask, 1, ids_restore)
    return ids_keep, ids_restore, mask


def _block(dim: int, heads: int, mlp_ratio: float, drop_path: float = 0.0) -> Block:
    from timm.models.vision_transformer import Block

    return Block(
        dim,
        heads,
        mlp_ratio=mlp_ratio,
        qkv_bias=True,
        drop_path=drop_path,
        norm_layer=partial(nn.LayerNorm, eps=1e-6),
    )


# encoder blocks a ViT may have (ViT-H has 32; FedMAE's cascade ablations go to 10)
MAX_VIT_DEPTH = 64


def drop_path_rates(rate: float, depth: int) -> list[float]:
    """Stochastic depth per block, rising linearly from 0 to ``rate`` (MAE ``models_vit`` / timm:
    linspace)."""
    # on the CPU whatever the default device: accept sizes an encoder on the meta device first
    return [float(x) for x in torch.linspace(0, rate, depth, device="cpu")]


def _init_mae_weights(module: nn.Module) -> None:
    """MAE ``_init_weights``: xavier-uniform Linear weights, zero biases; LayerNorm 1 / 0."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


class ViTEncoder(nn.Module):
    """patch_embed → + pos_embed → prepend cls → ``depth`` pre-norm blocks → norm → pooled feature
    (B, D)."""

    def __init__(
        self,
        *,
        img_size: int,
        patch_size: int,
        embed_dim: int,
        depth: int,
        num_heads: int,
        mlp_ratio: float = 4.0,
        pool: str = "mean",
        drop_path_rate: float = 0.0,
    ) -> None:
        from timm.layers import PatchEmbed

        super().__init__()
        if pool not in ("mean", "cls"):
            raise ValueError(f"pool must be 'mean' or 'cls', got {pool!r}")
        self.patch_size = patch_size
        self.pool = pool
        self.feat_dim = embed_dim
        self.patch_embed = PatchEmbed(img_size, patch_size, 3, embed_dim)
        self.num_patches = self.patch_embed.num_patches
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        grid = math.isqrt(self.num_patches)
        self.register_buffer("pos_embed", sincos_2d(embed_dim, grid), persistent=False)
        self.blocks = nn.ModuleList(
            [
                _block(embed_dim, num_heads, mlp_ratio, dp)
                for dp in drop_path_rates(drop_path_rate, depth)
            ]
        )
        self.norm = nn.LayerNorm(embed_dim, eps=1e-6)
        w = self.patch_embed.proj.weight.data
        nn.init.xavier_uniform_(w.view(w.shape[0], -1))
        nn.init.normal_(self.cls_token, std=0.02)
        _init_mae_weights(self)

    def set_drop_path(self, rate: float) -> None:
        """Set stochastic depth in place (e.g. on a fine-tuning copy): block i drops its residual
        branches with probability ``drop_path_rates(rate, depth)[i]``; 0 restores the identity (no
        parameters change)."""
        if not 0 <= rate < 1:
            raise ValueError(f"drop path rate must be in [0, 1), got {rate}")
        from timm.layers import DropPath

        for blk, dp in zip(self.blocks, drop_path_rates(rate, len(self.blocks))):
            # new modules follow the block's train/eval mode
            for attr in ("drop_path1", "drop_path2"):
                setattr(blk, attr, (DropPath(dp) if dp > 0 else nn.Identity()).train(blk.training))

    def tokens(self, x: torch.Tensor, ids_keep: torch.Tensor | None = None) -> torch.Tensor:
        """(B, 1 + L_keep, D) after the final norm; ``ids_keep`` = None passes all L patches (no
        masking)."""
        t = self.patch_embed(x) + self.pos_embed[:, 1:, :]
        if ids_keep is not None:
            t = torch.gather(t, 1, ids_keep.unsqueeze(-1).expand(-1, -1, t.shape[-1]))
        cls = (self.cls_token + self.pos_embed[:, :1, :]).expand(t.shape[0], -1, -1)
        t = torch.cat([cls, t], dim=1)
        for blk in self.blocks:
            t = blk(t)
        return self.norm(t)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.tokens(x)
        return t[:, 1:].mean(dim=1) if self.pool == "mean" else t[:, 0]


class MaskedAutoencoderViT(ViTEncoder):
    """MAE (He et al. 2022) with MAE's names; FedMAE's one-block client at ``depth=1``
    (docs/methods/fedmae.md §2.1)."""

    def __init__(
        self,
        *,
        img_size: int,
        patch_size: int,
        embed_dim: int,
        depth: int,
        num_heads: int,
        decoder_embed_dim: int,
        decoder_num_heads: int,
        decoder_depth: int = 1,
        mlp_ratio: float = 4.0,
        pool: str = "mean",
        norm_pix_loss: bool = False,
    ) -> None:
        super().__init__(
            img_size=img_size,
            patch_size=patch_size,
            embed_dim=embed_dim,
            depth=depth,
            num_heads=num_heads,
            mlp_ratio=mlp_ratio,
            pool=pool,
        )
        self.norm_pix_loss = norm_pix_loss
        self.decoder_embed = nn.Linear(embed_dim, decoder_embed_dim, bias=True)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, decoder_embed_dim))
        grid = math.isqrt(self.num_patches)
        self.register_buffer(
            "decoder_pos_embed", sincos_2d(decoder_embed_dim, grid), persistent=False
        )
        self.decoder_blocks = nn.ModuleList(
            [_block(decoder_embed_dim, decoder_num_heads, mlp_ratio) for _ in range(decoder_depth)]
        )
        self.decoder_norm = nn.LayerNorm(decoder_embed_dim, eps=1e-6)
        self.decoder_pred = nn.Linear(decoder_embed_dim, patch_size**2 * 3, bias=True)
        nn.init.normal_(self.mask_token, std=0.02)
        # re-applying to the encoder is idempotent in law; the seed fixes the result
        _init_mae_weights(self)

    def patchify(self, imgs: torch.Tensor) -> torch.Tensor:
        return patchify(imgs, self.patch_size)

    def decode(self, latent: torch.Tensor, ids_restore: torch.Tensor) -> torch.Tensor:
        """Decoder of docs/methods/fedmae.md §2.1 step 4: (B, 1 + L_keep, D) → x̂ (B, L, p²·3), cls
        position dropped."""
        x = self.decoder_embed(latent)
        b, n, d = x.shape
        L = ids_restore.shape[1]
        mask_tokens = self.mask_token.expand(b, L + 1 - n, -1)
        x_ = torch.cat([x[:, 1:, :], mask_tokens], dim=1)
        x_ = torch.gather(x_, 1, ids_restore.unsqueeze(-1).expand(-1, -1, d))
        x = torch.cat([x[:, :1, :], x_], dim=1) + self.decoder_pos_embed
        for blk in self.decoder_blocks:
            x = blk(x)
        return self.decoder_pred(self.decoder_norm(x))[:, 1:, :]

    def forward_masked(
        self, x: torch.Tensor, ids_shuffle: torch.Tensor, len_keep: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(prediction (B, L, p²·3), mask (B, L), 1 = removed) for the given per-sample patch
        permutation."""
        ids_keep, ids_restore, mask = masking_from_ids(ids_shuffle, len_keep)
        latent = self.tokens(x, ids_keep)
        return self.decode(latent, ids_restore), mask


@dataclass(frozen=True, kw_only=True)
class ViTSpec:
    """A ViT size. Defaults: tiny-16 widths (docs/methods/fedmae.md §2.7) with two blocks."""

    version: ClassVar[str] = "1"
    family: ClassVar[str] = "vit"
    img_size: int = 16  # H = W; must equal the dataset's image size
    patch_size: int = 4  # p
    embed_dim: int = 32  # D
    depth: int = 2  # encoder blocks of the exported backbone (FedMAE: the cascade depth N)
    num_heads: int = 2
    mlp_ratio: float = 4.0
    decoder_embed_dim: int = 16  # D_d (only used by masked auto-encoders)
    decoder_num_heads: int = 2
    pool: Literal["mean", "cls"] = "mean"  # docs/methods/fedmae.md §2.6 step 5 / §6.12

    def __post_init__(self) -> None:
        if self.img_size % self.patch_size:
            raise ValueError(
                f"img_size {self.img_size} is not a multiple of patch_size {self.patch_size}"
            )
        if self.embed_dim % self.num_heads or self.decoder_embed_dim % self.decoder_num_heads:
            raise ValueError("widths must be divisible by their head counts")
        if self.embed_dim % 4 or self.decoder_embed_dim % 4:
            raise ValueError("widths must be divisible by 4 (2-D sin-cos position embeddings)")
        if not 1 <= self.depth <= MAX_VIT_DEPTH:
            # a bound, so that no cell (or submitted record) asks for a model of thousands of blocks
            raise ValueError(f"depth must be in [1, {MAX_VIT_DEPTH}], got {self.depth}")

    @property
    def feat_dim(self) -> int:
        return self.embed_dim

    def build(self, depth: int | None = None) -> ViTEncoder:
        return ViTEncoder(
            img_size=self.img_size,
            patch_size=self.patch_size,
            embed_dim=self.embed_dim,
            depth=depth or self.depth,
            num_heads=self.num_heads,
            mlp_ratio=self.mlp_ratio,
            pool=self.pool,
        )

    def build_mae(self, depth: int = 1, *, norm_pix_loss: bool = False) -> MaskedAutoencoderViT:
        """The masked auto-encoder at this size: ``depth`` encoder blocks (1 = FedMAE's client), one
        decoder block."""
        return MaskedAutoencoderViT(
            img_size=self.img_size,
            patch_size=self.patch_size,
            embed_dim=self.embed_dim,
            depth=depth,
            num_heads=self.num_heads,
            decoder_embed_dim=self.decoder_embed_dim,
            decoder_num_heads=self.decoder_num_heads,
            mlp_ratio=self.mlp_ratio,
            pool=self.pool,
            norm_pix_loss=norm_pix_loss,
        )


@BACKBONES.register("vit_micro")
@dataclass(frozen=True, kw_only=True)
class ViTMicro(ViTSpec):
    """CPU-sized: 16×16 input, patch 4 (16 patches), width 32 (2 heads), 2 blocks; decoder 16 (2
    heads)."""


@BACKBONES.register("vit_tiny_p4")
@dataclass(frozen=True, kw_only=True)
class ViTTinyP4(ViTSpec):
    """docs/methods/fedmae.md ``small-32``: 32×32, patch 4, width 192 (3 heads), 5 blocks; decoder
    96 (3 heads)."""

    img_size: int = 32
    embed_dim: int = 192
    depth: int = 5
    num_heads: int = 3
    decoder_embed_dim: int = 96
    decoder_num_heads: int = 3


@BACKBONES.register("vit_base_p4", aliases=("mae_one_block",))
@dataclass(frozen=True, kw_only=True)
class ViTBaseP4(ViTSpec):
    """docs/methods/fedmae.md ``cifar32-b`` (GPU runs on 32-px data): ViT-B widths at patch 4, 5
    blocks; decoder 512 (16 heads)."""

    img_size: int = 32
    embed_dim: int = 768
    depth: int = 5
    num_heads: int = 12
    decoder_embed_dim: int = 512
    decoder_num_heads: int = 16


@BACKBONES.register("vit_base_p16")
@dataclass(frozen=True, kw_only=True)
class ViTBaseP16(ViTBaseP4):
    """docs/methods/fedmae.md ``paper`` preset: 224×224, patch 16, ViT-B widths, 5 blocks (Table 2:
    11.62 M / 39.97 M)."""

    img_size: int = 224
    patch_size: int = 16
