"""FedEMA (Zhuang et al., "Divergence-aware Federated Self-Supervised Learning", ICLR 2022, arXiv
2204.04385; official code EasyFL ``applications/fedssl``). Spec: docs/methods/fedema.md.

Same BYOL networks, local training, payloads and aggregation as FedU (both compose
methods/_shared/fedbyol.py); only the merge of the received global model differs: the client's
online encoder and predictor become an EMA of its previous local networks and the new global ones,
θ_k ← μ θ_k + (1 − μ) θ_g with μ = min(λ_k · d, μ_max), d = D(θ_g, θ_k) over the backbone's
non-shortcut convs and λ_k = τ / d fixed at the client's first merge (§2.4).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch

from benchmark.api import (
    METHODS,
    ClientData,
    ClientState,
    Inert,
    Payload,
    RoundContext,
    select,
    two_views,
)
from methods._shared.byol import byol_forward_loss
from methods._shared.ema import autoscaler, divergence_weight, ema_update
from methods._shared.fedbyol import (
    BYOL_INERT,
    ONLINE,
    PREDICTOR,
    TARGET,
    BYOLConfig,
    FederatedBYOL,
    MergeResult,
    first_merge,
    local_divergence,
    local_update,
    param_names,
    target_is_online,
)


@dataclass(frozen=True, kw_only=True)
class FedEMAConfig(BYOLConfig):
    """docs/methods/fedema.md §3; BYOL and optimisation fields are FedU's (docs/methods/fedu.md
    §3)."""

    # docs/methods/fedema.md §6 item 2 (amended): the authors' EasyFL code's drift of the client's
    # own last local training
    divergence_ref: Literal["global", "local_drift"] = "local_drift"
    autoscaler: bool = True  # --auto_scaler y
    # τ, the expected μ at the first merge (README --auto_scaler_target 0.7)
    autoscaler_tau: float = 0.7
    scaler: float = 1.0  # constant λ when autoscaler=False (README --weight_scaler 1)
    # clip of μ: None = 1.0 under local_drift (client.py: min(1, weight_scaler * distance)) and 0.7
    # under global (FedU2's clip: with the printed formula a client at μ = 1 never takes the global
    # model again; §6 items 2, 7)
    mu_max: float | None = None
    # §6.5; "dapu" uses FedU's dapu_threshold
    predictor_update: Literal["ema", "global", "dapu"] = "ema"
    stale_policy: Literal["ema", "reset"] = "ema"  # §6.7 (dynamic_ema_online vs selective_ema)

    def __post_init__(self) -> None:
        super().__post_init__()
        # resolved here, so the cell id and the record hold the clip that ran
        if self.mu_max is None:
            object.__setattr__(self, "mu_max", 1.0 if self.divergence_ref == "local_drift" else 0.7)
        if self.autoscaler_tau <= 0 or self.scaler <= 0 or not 0.0 <= self.mu_max <= 1.0:
            raise ValueError("autoscaler_tau and scaler must be > 0 and mu_max in [0, 1]")


def decay_rate(d: float, scaler: float, cfg: FedEMAConfig) -> tuple[float, float]:
    """(λ_k, μ) for divergence d and the stored scaler (NaN = unset), docs/methods/fedema.md §2.4
    steps 4–5 and §6.11."""
    # DEVIATION: at d = 0 with no scaler yet, μ = 0 (the global model, the spec's resolution);
    # EasyFL's min(1, weight_scaler * d) with an infinite scaler is min(1, not-a-number) = 1
    # there (the local model kept)
    if math.isnan(scaler):
        scaler = autoscaler(cfg.autoscaler_tau, d) if cfg.autoscaler else cfg.scaler
    return scaler, divergence_weight(d, scaler, cfg.mu_max)


@METHODS.register("fedema")
class FedEMA(FederatedBYOL):
    """FedEMA (Zhuang et al., ICLR 2022): FedU's BYOL clients with a divergence-aware EMA merge
    (docs/methods/fedema.md §2.4) and its client step with the BYOL loss (:meth:`client_update`);
    every other hook is the family's (docs/methods/fedema.md §2.2, §2.5, §2.6)."""

    name: ClassVar[str] = "fedema"
    version: ClassVar[str] = "3"  # 3: a client smaller than B trains (issue 46)
    Config: ClassVar[type] = FedEMAConfig
    # benchmark.commands.live_settings: the merge of §2.4 runs at a client's next participation
    inert_settings: ClassVar[Mapping[str, str | Inert]] = {
        **BYOL_INERT,
        "dapu_threshold": Inert(
            "FedU's DAPU, read only under predictor_update dapu, at a client's next participation",
            live_with={"predictor_update": "dapu"},
            from_round=2,
        ),
        **{
            name: Inert(f"§2.4 merge ({name}): at a client's next participation", from_round=2)
            for name in ("autoscaler", "autoscaler_tau", "mu_max", "predictor_update")
        },
        "scaler": Inert(
            "the constant λ, read only without the autoscaler, at a client's next participation",
            live_with={"autoscaler": False},
            from_round=2,
        ),
        "stale_policy": (
            "§6.7: acts only on a client that missed a round (the live cell's clients take part "
            "every round); tests/methods/test_fedema.py::test_stale_policy holds both"
        ),
    }
    cfg: FedEMAConfig

    def merge(self, down: Payload, state: ClientState, ctx: RoundContext) -> MergeResult:
        """docs/methods/fedema.md §2.4 steps 1–6: first participation (or a stale client under
        ``reset``) copies the global model; later ones take θ_k ← μ θ_k + (1 − μ) θ_g with μ =
        min(λ_k d, μ_max)."""
        cfg = self.cfg
        glob = {k: v.clone() for k, v in down.tensors.items()}
        scaler_t = state.tensors.get("scaler")
        stored = math.nan if scaler_t is None else float(scaler_t)
        stale = state.last_round is not None and state.last_round < ctx.round - 1
        if state.last_round is None or (cfg.stale_policy == "reset" and stale):  # steps 1–2
            extra = {} if scaler_t is None else {"scaler": scaler_t.clone()}
            return first_merge(glob, extra)
        d = local_divergence(cfg, down, state, self.divergence_names())  # step 3
        scaler, mu = decay_rate(d, stored, cfg)  # steps 4–5
        local = state.tensors
        # step 6: EMA of parameters; online BN buffers from the global model
        net = self.nets.structure()
        online_params = param_names(net, ONLINE)
        online = {k: v.clone() for k, v in select(glob, ONLINE).items()}
        online.update(ema_update(local, glob, mu, keys=sorted(online_params)))
        if cfg.predictor_update == "ema":
            pred_params = param_names(net, PREDICTOR)
            buffers_from = local if mu > 0.5 else glob
            pred = {k: v.clone() for k, v in select(buffers_from, PREDICTOR).items()}
            pred.update(ema_update(local, glob, mu, keys=sorted(pred_params)))
        elif cfg.predictor_update == "global":
            pred = select(glob, PREDICTOR)
        else:  # "dapu": FedU's rule (docs/methods/fedu.md §2.4 step 2)
            pred = {
                k: v.clone()
                for k, v in select(glob if d < cfg.dapu_threshold else local, PREDICTOR).items()
            }
        start = {**online, **pred, **select(local, TARGET)}  # target: unchanged by the server
        extra = {"scaler": torch.tensor(scaler, dtype=torch.float64)}
        metrics = {"divergence": d, "mu": mu}
        if not math.isnan(scaler):
            metrics["scaler"] = scaler
        return MergeResult(start, extra, metrics, False)

    def client_update(
        self, down: Payload, state: ClientState, data: ClientData, ctx: RoundContext
    ) -> tuple[Payload, ClientState]:
        """docs/methods/fedema.md §2.4: the EMA merge (:meth:`merge`), then E local epochs of BYOL
        from the merged tensors; the loss of one batch is ``batch_loss``. The loop around it (SGD,
        the target's EMA, what is uploaded and kept) is methods/_shared/fedbyol.py: local_update."""
        merged = self.merge(down, state, ctx)
        net = self.nets.get(ctx.device)
        cfg, view = self.cfg, data.train
        alias = target_is_online(cfg, merged)

        def batch_loss(batch: torch.Tensor) -> torch.Tensor:
            v1, v2 = two_views(batch, cfg.augment, ctx.generator, mean=view.mean, std=view.std)
            # ℓ(p(v¹), sg z_ξ(v²)) + ℓ(p(v²), sg z_ξ(v¹)): methods/_shared/byol.py: byol_loss
            return byol_forward_loss(net, v1, v2, target_alias=alias)

        return local_update(net, cfg, merged, data, ctx, batch_loss)
