"""Every method's config defaults are the values its docs/methods page gives, with their sources
(issue 39).

Tests that recompute an expected value from ``cfg`` cannot see a changed default (FedAvg-SimCLR's τ
0.5 → 0.2 passed them all). Here each default is read off the page: ``DOCUMENTED`` names, for every
registered method, the page, the row of its hyperparameter table, the column and the words there
that state the value, and the config fields that words fix. The test checks three things, so that
the code, the page and this table cannot drift apart silently:

1. the page's row holds those words in that column, and a non-empty source (its last column);
2. ``Config()`` has exactly those values;
3. every field of every method's config is either held here or listed in ``NOT_IN_THE_TABLE`` with
   the reason it is not a documented hyperparameter.
"""

from __future__ import annotations

import dataclasses
import re
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from benchmark.contracts.registries import METHODS, load_builtins

DOCS = Path(__file__).resolve().parents[2] / "docs" / "methods"


class Row(NamedTuple):
    """A row of a page's hyperparameter table: its first cell starts with ``label``; ``column`` (a
    header prefix) holds ``words``; ``fields`` are the config defaults those words state. Where the
    project-default column says "same" the value stands in the column it points to."""

    label: str
    column: str
    words: str
    fields: dict[str, Any]


SIMCLR_ROWS = [
    Row("loss", "project default", "`ntxent_2b`, tau 0.5", {"loss_form": "ntxent_2b", "tau": 0.5}),
    Row(
        "optimizer",
        "official code",
        "Adam, lr 1e-3, wd 1e-6",
        {"optimizer": "adam", "lr": 1e-3, "weight_decay": 1e-6},
    ),
    Row("batch size", "project default", "256", {"batch_size": 256}),
    Row(
        "lr schedule",
        "official code",
        "x0.3 at 30/60/90 % of rounds",
        {"lr_milestones": (0.3, 0.6, 0.9), "lr_gamma": 0.3},
    ),
    Row(
        "lr schedule",
        "project default",
        '`lr_schedule: "step_rounds"`',
        {"lr_schedule": "step_rounds"},
    ),
    Row(
        "aggregation",
        "project default",
        '`weighting: "num_examples"`',
        {"weighting": "num_examples"},
    ),
    Row("BatchNorm", "project default", '`bn: "average"`', {"bn": "average"}),
    Row(
        "projector",
        "official code",
        "512-512(BN,ReLU)-512",
        {"projector": "decssl", "proj_hidden": None},
    ),
]

OPTIMIZER_STATE = Row(
    "optimizer state", "project default", '`optimizer_state: "reset"`', {"optimizer_state": "reset"}
)

DOCUMENTED: dict[str, tuple[str, list[Row]]] = {
    "fedavg_simclr": (
        "fedavg_simclr.md",
        [
            *SIMCLR_ROWS,
            OPTIMIZER_STATE,
        ],
    ),
    "featarc": (
        "featarc.md",
        [
            Row("C (clusters)", "project default", "2", {"num_clusters": 2}),
            Row("lambda", "project default", "1", {"reg_scale": 1.0}),
            Row(
                "alignment pair",
                "project default",
                '`align_local: "projector"`, `align_target: "backbone"`',
                {"align_local": "projector", "align_target": "backbone"},
            ),
            Row(
                "optimizer",
                "official code",
                "Adam 1e-3, wd 1e-6, fresh per round",
                {"optimizer": "adam", "lr": 1e-3, "weight_decay": 1e-6, "optimizer_state": "reset"},
            ),
            Row("lr schedule", "project default", "`step_rounds`", {"lr_schedule": "step_rounds"}),
            Row("BatchNorm", "project default", '`bn: "average"`', {"bn": "average"}),
            Row(
                "aggregation weights",
                "project default",
                '`weighting: "num_examples"`',
                {"weighting": "num_examples"},
            ),
            Row(
                "batch, tau, projector, aug",
                "official code",
                "256, 0.5, 512-512-512",
                {"batch_size": 256, "tau": 0.5, "loss_form": "ntxent_2b", "projector": "decssl"},
            ),
            Row(
                "reported number",
                "project default",
                "largest cluster",
                {"report_model": "largest_cluster"},
            ),
        ],
    ),
    "fedu": (
        "fedu.md",
        [
            Row(
                "projector",
                "official code",
                "512→4096→2048",
                {"proj_hidden": 4096, "proj_out": 2048},
            ),
            Row("predictor", "official code", "2048→4096→2048", {"pred_hidden": 4096}),
            Row("target EMA m", "project default", "0.99", {"target_momentum": 0.99}),
            Row("DAPU threshold", "project default", "0.4", {"dapu_threshold": 0.4}),
            Row(
                "divergence reference", "project default", "`global`", {"divergence_ref": "global"}
            ),
            Row(
                "batch size",
                "official code",
                "128, `drop_last=True`",
                {"batch_size": 128, "drop_last": True},
            ),
            Row(
                "optimizer",
                "official code",
                "SGD, momentum 0.9, wd 5e-4",
                {"momentum": 0.9, "weight_decay": 5e-4},
            ),
            Row("learning rate", "official code", "0.032, cosine over rounds", {"lr": 0.032}),
            Row("aggregation weights", "project default", "n_k", {"weighting": "num_examples"}),
        ],
    ),
    "fedema": (
        "fedema.md",
        [
            Row("autoscaler τ", "project default", "0.7", {"autoscaler_tau": 0.7}),
            Row("autoscaler on", "project default", "`autoscaler=True`", {"autoscaler": True}),
            Row("constant scaler", "project default", "1.0", {"scaler": 1.0}),
            Row("μ clip μ_max", "project default", "1.0", {"mu_max": 1.0}),
            Row(
                "predictor update",
                "project default",
                '`predictor_update="ema"`',
                {"predictor_update": "ema"},
            ),
            Row(
                "divergence reference",
                "project default",
                '`"local_drift"`',
                {"divergence_ref": "local_drift"},
            ),
            Row(
                "stale clients", "project default", '`stale_policy="ema"`', {"stale_policy": "ema"}
            ),
            Row("target EMA m", "project default", "0.99", {"target_momentum": 0.99}),
            Row(
                "projector / predictor",
                "official code",
                "512→4096→2048 / 2048→4096→2048",
                {"proj_hidden": 4096, "proj_out": 2048, "pred_hidden": 4096},
            ),
            Row(
                "batch",
                "official code",
                "128, `drop_last=True`",
                {"batch_size": 128, "drop_last": True},
            ),
            Row(
                "optimizer / lr",
                "official code",
                "SGD m=0.9, wd 5e-4; lr 0.032",
                {"momentum": 0.9, "weight_decay": 5e-4, "lr": 0.032},
            ),
            Row("aggregation weights", "project default", "n_k", {"weighting": "num_examples"}),
        ],
    ),
    "fedmae": (
        "fedmae.md",
        [
            Row("mask ratio ρ", "project default", "0.75", {"mask_ratio": 0.75}),
            Row("loss", "closest code", "`norm_pix_loss=False`", {"norm_pix_loss": False}),
            Row(
                "optimizer",
                "closest code",
                "AdamW β (0.9, 0.95), wd 0.05",
                {"betas": (0.9, 0.95), "weight_decay": 0.05},
            ),
            Row("learning rate", "closest code", "blr 1.5e-4", {"blr": 1.5e-4}),
            Row("batch size", "project default", "128", {"batch_size": 128}),
            Row("aggregation", "project default", '`aggregate="none"`', {"aggregate": "none"}),
            Row("block pool size", "project default", "10", {"pool_size": 10}),
        ],
    ),
    "flesd": (
        "flesd.md",
        [
            Row(
                "local optimiser",
                "project default",
                "Adam 1e-3, wd 1e-6",
                {"local_lr": 1e-3, "local_weight_decay": 1e-6},
            ),
            Row("local batch B", "official code", "1024 CIFAR", {"local_batch_size": 1024}),
            Row("local tau", "official code", "0.4 CIFAR", {"local_tau": 0.4}),
            Row(
                "local loss",
                "official code",
                "one-directional cross-view",
                {"local_loss": "crossview_1dir"},
            ),
            Row(
                "head",
                "official code",
                "Linear(d, d)-ReLU-Linear(d, 128)",
                {"head_dim": 128, "head_hidden": None},
            ),
            Row(
                "tau_T = tau_S",
                "project default",
                "0.1 / 0.1",
                {"tau_teacher": 0.1, "tau_student": 0.1},
            ),
            Row(
                "ESD optimiser",
                "project default",
                "Adam 1e-3, wd 1e-6",
                {"distill_lr": 1e-3, "distill_weight_decay": 1e-6},
            ),
            Row("uploaded tensor", "project default", '`"embeddings"`', {"upload": "embeddings"}),
            Row("B' `distill_batch_size`", "project default", "128", {"distill_batch_size": 128}),
            Row("E_esd `distill_epochs`", "project default", "200", {"distill_epochs": 200}),
            Row("zeta `key_momentum`", "project default", "0.999", {"key_momentum": 0.999}),
            Row("anchor size m", "project default", "2048", {"queue_size": 2048}),
            Row("top-n% kept", "project default", "100", {"topk_percent": 100.0}),
            Row("skip rule", "project default", '`"every_epoch"`', {"skip_fill": "every_epoch"}),
            Row(
                "inference batch / mode",
                "official code",
                "128, eval mode",
                {"infer_batch_size": 128},
            ),
        ],
    ),
    "orchestra": (
        "orchestra.md",
        [
            Row("N_G", "project default", "32 (C10)", {"num_global_clusters": 32}),
            Row("N_l", "project default", "8 / 16", {"num_local_clusters": 8}),
            Row("T `temperature`", "project default", "0.1", {"temperature": 0.1}),
            Row("SK lambda", "project default", "25", {"sk_lambda": 25.0}),
            Row(
                "SK max iters",
                "project default",
                "100 / 10",
                {"sk_iters_server": 100, "sk_iters_local": 10},
            ),
            Row("SK tolerance", "official code", "1e-2", {"sk_tol": 0.01}),
            Row("local k-means iterations", "project default", "5", {"local_kmeans_iters": 5}),
            Row(
                "global clustering",
                "official code",
                "500 steps, SGD lr 0.01, mom 0.9, wd 1e-4",
                {
                    "global_steps": 500,
                    "global_lr": 0.01,
                    "global_momentum": 0.9,
                    "global_weight_decay": 1e-4,
                },
            ),
            Row("loss weights", "project default", "1 : 1", {"deg_weight": 1.0}),
            Row("EMA m", "project default", "0.996 / 0.99", {"ema": 0.996}),
            Row("local lr eta", "project default", "0.003 / 0.01", {"lr": 0.003}),
            Row(
                "optimiser",
                "official code",
                "SGD, mom 0.9, wd 1e-4",
                {"momentum": 0.9, "weight_decay": 1e-4},
            ),
            Row("batch size B", "project default", "16 / 256", {"batch_size": 16}),
            Row(
                "FedAvg weights", "project default", "`num_examples`", {"weighting": "num_examples"}
            ),
        ],
    ),
    "dec_sl": (
        "baselines.md",
        [
            Row(
                "`dec_sl` optimizer",
                "value",
                "Adam 1e-3, weight decay 1e-6",
                {"optimizer": "adam", "lr": 1e-3, "weight_decay": 1e-6},
            ),
            Row(
                "`dec_sl` `lr_schedule`",
                "value",
                "`step_rounds`",
                {"lr_schedule": "step_rounds", "lr_milestones": (0.3, 0.6, 0.9), "lr_gamma": 0.3},
            ),
            Row(
                "`dec_sl` `sl_augment`",
                "value",
                "`simclr` (the code's choice)",
                {"sl_augment": "simclr"},
            ),
            Row(
                "`dec_sl` optimizer",
                "value",
                "Adam",
                {"batch_size": 256, "weighting": "num_examples"},
            ),
        ],
    ),
    # central_ssl and local_ssl: "FedAvg-SimCLR's `SimCLRConfig`" (baselines.md §3), so FedAvg-SimCLR's
    # rows hold them too; central_ssl keeps one optimizer over its E_total epochs
    "central_ssl": (
        "baselines.md",
        [
            Row(
                "`central_ssl` / `local_ssl` config", "value", "FedAvg-SimCLR's `SimCLRConfig`", {}
            ),
            Row(
                "`central_ssl` schedule",
                "value",
                "x0.3 at 30/60/90 % of E_total",
                {"lr_milestones": (0.3, 0.6, 0.9), "lr_gamma": 0.3},
            ),
        ],
    ),
    "local_ssl": (
        "baselines.md",
        [Row("`central_ssl` / `local_ssl` config", "value", "FedAvg-SimCLR's `SimCLRConfig`", {})],
    ),
    "no_pretrain": (
        "baselines.md",
        [Row("`no_pretrain`", "value", "the backbone's own init scheme, seeded", {})],
    ),
    "no_pretrain_bn": (
        "baselines.md",
        [Row("`no_pretrain`", "value", "the backbone's own init scheme, seeded", {})],
    ),
    "pixels": (
        "baselines.md",
        [Row("`pixels`", "value", "none: the normalised image, flattened", {})],
    ),
}
# the pages that say "FedAvg-SimCLR's config" (or "same as fedavg_simclr.md") are held to its rows
INHERITS = {
    "central_ssl": ("fedavg_simclr.md", SIMCLR_ROWS),
    "local_ssl": ("fedavg_simclr.md", [*SIMCLR_ROWS, OPTIMIZER_STATE]),
    # featarc.md §4: "batch, tau, projector, aug ... same ... `fedavg_simclr.md`", the schedule too
    "featarc": ("fedavg_simclr.md", SIMCLR_ROWS),
}

# fields that are not hyperparameters of a method's table, with the reason
NOT_IN_THE_TABLE: dict[str, str] = {
    "nan_policy": "the project's rule for a non-finite loss (raise), docs/protocols/evaluation.md",
    "augment": "an AugmentConfig; each method's views are held by its own augmentation tests",
    "augment_target": (
        "an AugmentConfig (Orchestra §2.10), held word for word by "
        "tests/methods/test_orchestra.py::test_views_are_the_documented_augmentations"
    ),
    "augment_online": (
        "an AugmentConfig (Orchestra §2.10), held word for word by "
        "tests/methods/test_orchestra.py::test_views_are_the_documented_augmentations"
    ),
    "momentum": "SGD momentum, read only when optimizer is sgd (the SimCLR family's default is Adam)",
    "bn_filter": "how BN tensors are recognised (by module type), not a training setting",
    "proj_out": "None = the projector's input width (512-512-512), as proj_hidden",
    "first_round_target": "FedU/FedEMA §2.4 step 1 (copy the online network), a protocol step",
}
PER_METHOD_EXEMPT: dict[str, dict[str, str]] = {
    "fedmae": {
        "weighting": "read only under aggregate=mean (§6.9)",
        "augment": "the MAE views of §2.4, held by tests/methods/test_fedmae.py",
        "cascade_depth": "None = the backbone's depth (§5.5: 5 for the ViT presets)",
        "cascade_pretrained": "None = the cascade depth (Table 8)",
        "cascade_source": "§6.3",
        "cascade_shared": "§6.4",
        "cascade_init": "a seed of the un-pretrained blocks (Tables 7-8)",
        "server_pretrain_images": "§5.5 server training: only 0 is implemented (rejected otherwise)",
    },
    "flesd": {
        "infer_normalization": "§6 item 5",
    },
    "orchestra": {
        "memory_size": "0 = 128 if B <= 128 else B (§3 m_mem), resolved at build",
        "proj_dim": "None = the backbone's feature width (§2.2)",
        "use_rotation": "the degeneracy head of §2.2 (on in the paper)",
        "use_target": "the target network of §2.2 (on in the paper)",
        "share_representations": "§6: off, as the paper's cross-device setting",
        "solarize_p": (
            "the solarisation of view A' (online) (§2.10), held by "
            "tests/methods/test_orchestra.py::test_views_are_the_documented_augmentations"
        ),
    },
    "fedema": {"dapu_threshold": "FedU's DAPU (fedu.md §3), read only by predictor_update=dapu"},
    "featarc": {
        "align_views": "§2.3 (two views, the code)",
    },
    "central_ssl": {"optimizer_state": "one optimizer over E_total epochs (baselines.md §3)"},
}


@cache
def table_rows(page: str) -> list[dict[str, str]]:
    """The rows of every markdown table on ``page``, each as {header: cell} (first header wins)."""
    out: list[dict[str, str]] = []
    header: list[str] | None = None
    for line in (DOCS / page).read_text(encoding="utf-8").splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
        elif not all(re.fullmatch(r":?-+:?", c) for c in cells):
            out.append(dict(zip(header, cells)) | {"__last__": cells[-1], "__first__": cells[0]})
    return out


def find_row(page: str, label: str, column: str) -> tuple[dict[str, str], str]:
    """The first row of a table with a ``column`` header whose first cell starts with ``label``."""
    for row in table_rows(page):
        header = next((h for h in row if h.startswith(column)), None)
        if header is not None and row["__first__"].startswith(label):
            return row, header
    raise AssertionError(
        f"docs/methods/{page}: no row {label!r} in a table with a column {column!r}"
    )


def rows_of(method: str) -> list[tuple[str, Row]]:
    page, rows = DOCUMENTED[method]
    out = [(page, r) for r in rows]
    if method in INHERITS:
        page, rows = INHERITS[method]
        out += [(page, r) for r in rows]
    return out


def test_every_registered_method_is_held() -> None:
    load_builtins()
    assert sorted(DOCUMENTED) == METHODS.names()
    # no exemption without its reason written beside it (issue 55)
    reasons = [*NOT_IN_THE_TABLE.values()]
    reasons += [r for table in PER_METHOD_EXEMPT.values() for r in table.values()]
    assert all(isinstance(r, str) and r.strip() for r in reasons)


@pytest.mark.parametrize("method", sorted(DOCUMENTED))
def test_defaults_are_the_documented_values_with_their_sources(method: str) -> None:
    load_builtins()
    cfg = METHODS.get(method).Config()
    held: set[str] = set()
    for page, row in rows_of(method):
        found, column = find_row(page, row.label, row.column)
        assert row.words in found[column], (page, row.label, found[column])
        assert found["__last__"].strip(), f"{page}: the row {row.label!r} names no source"
        for name, want in row.fields.items():
            have = getattr(cfg, name)
            assert have == want and type(have) is type(want), (
                f"{method}.{name} defaults to {have!r}; docs/methods/{page} ({row.label!r}: "
                f"{row.words!r}) gives {want!r}"
            )
            held.add(name)
    exempt = {**NOT_IN_THE_TABLE, **PER_METHOD_EXEMPT.get(method, {})}
    unheld = [
        f.name for f in dataclasses.fields(cfg) if f.name not in held and f.name not in exempt
    ]
    assert not unheld, f"{method}: config fields neither held to its page nor exempt: {unheld}"
