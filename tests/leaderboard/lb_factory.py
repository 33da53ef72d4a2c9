"""A small factory of realistic ``ResultRecord`` fixtures (methods × seeds × Dirichlet α) for
leaderboard tests.

Cells are built as resolved-cell dicts shaped like ``Cell.to_dict()``, and their ids come from
``benchmark.records.identity.cell_id_of``, so they pass ``verify_record``. No torch, no runs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from benchmark.records.identity import cell_id_of, pretrain_key_of
from benchmark.records.integrity import seal
from benchmark.records.schema import (
    SCHEMA_VERSION,
    CommStats,
    ComputeStats,
    EnvInfo,
    ProtocolCard,
    ResultRecord,
    TaskScores,
    TrackingRef,
    to_json,
)
from benchmark.records.store import results_path, write_record

KNN_CARD = ProtocolCard(
    task="knn",
    version="1",
    name="knn@v1",
    summary="kNN k=200 t=0.1, final",
    settings={"k": 200, "temperature": 0.1, "selection": "final", "metric": "top-1 over samples"},
)
LINEAR_CARD = ProtocolCard(
    task="linear",
    version="1",
    name="linear@v1",
    summary="linear probe, 100 ep, final",
    settings={"epochs": 100, "lr": 0.001, "selection": "final"},
)
LINEAR_CARD_1EP = ProtocolCard(
    task="linear",
    version="1",
    name="linear@v1",
    summary="linear probe, 1 ep, final",
    settings={"epochs": 1, "lr": 0.001, "selection": "final"},
)
DECSSL_PROBE_CARD = ProtocolCard(
    task="linear",
    version="1",
    name="linear/decssl",
    summary="Dec-SSL probe, best epoch",
    settings={"epochs": 50, "selection": "best_epoch_test"},
)

# Golden numbers: knn top-1 per (method, alpha) for seeds 0, 1, 2 (alpha None = IID).
KNN_VALUES: dict[tuple[str, float | None], list[float]] = {
    ("fedavg_simclr", None): [70.0, 71.0, 72.0],
    ("fedavg_simclr", 1.0): [68.0, 69.0, 70.0],
    ("fedavg_simclr", 0.1): [60.0, 62.0, 64.0],
    ("orchestra", None): [75.0, 75.5, 76.0],
    ("orchestra", 1.0): [74.0, 74.5, 75.0],
    ("orchestra", 0.1): [72.0, 73.0, 74.0],
    ("fedu", None): [70.5, 71.5, 72.5],
    ("fedu", 1.0): [66.0, 67.0, 68.0],
    ("fedu", 0.1): [61.0, 62.0],  # only two seeds: incomplete on a 3-seed track
}


def make_cell(
    method: str = "fedavg_simclr",
    *,
    alpha: float | None = None,
    seed: int = 0,
    dataset: str = "cifar10",
    num_clients: int = 100,
    participation: float = 0.1,
    rounds: int = 100,
    method_params: Mapping[str, Any] | None = None,
    backbone: str = "resnet18_cifar",
) -> dict[str, Any]:
    partition = (
        {"name": "iid", "params": {}, "version": "1"}
        if alpha is None
        else {
            "name": "niid_bench_labeldir",
            "params": {"alpha": alpha, "min_size": 10},
            "version": "1",
        }
    )
    return {
        "backbone": {"name": backbone, "params": {}, "version": "1"},
        "dataset": {"name": dataset, "params": {}, "version": "1"},
        "fl": {
            "local_epochs": 5,
            "num_clients": num_clients,
            "participation": participation,
            "rounds": rounds,
        },
        "method": {
            "name": method,
            "params": dict(method_params or {"lr": 0.001, "tau": 0.5}),
            "version": "1",
        },
        "partition": partition,
        "partition_seed": 0,
        "public": None,
        "seed": seed,
        "tasks": [{"name": "knn", "params": {"k": 200, "temperature": 0.1}, "version": "1"}],
    }


def _digest(*parts: Any) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def make_record(
    method: str = "fedavg_simclr",
    *,
    alpha: float | None = None,
    seed: int = 0,
    value: float = 70.0,
    dataset: str = "cifar10",
    card: ProtocolCard = KNN_CARD,
    task: str = "knn",
    status: str = "ok",
    runner: str = "fssl-bench",
    bytes_up: int = 4_000_000,
    tracking: TrackingRef | None = None,
    extra_scores: Iterable[TaskScores] = (),
    machine: str = "",
    client_steps: int = 0,
    client_samples: int = 0,
    clients_without_step: int | None = None,
    **cell_kw: Any,
) -> ResultRecord:
    cell = make_cell(method, alpha=alpha, seed=seed, dataset=dataset, **cell_kw)
    label = "iid" if alpha is None else f"niid_bench_labeldir(alpha={alpha},min_size=10)"
    scores = (
        ()
        if status != "ok"
        else (
            TaskScores(
                task=task,
                card=card,
                main_metric="top1",
                higher_is_better=True,
                values={"top1": value},
                wall_time_s=3.0,
            ),
            *extra_scores,
        )
    )
    return ResultRecord(
        schema_version=SCHEMA_VERSION,
        cell_id=cell_id_of(cell),
        pretrain_key=pretrain_key_of(cell),
        cell=cell,
        method=method,
        method_version="1",
        dataset=dataset,
        dataset_revision="rev0",
        seed=seed,
        partition_label=label,
        partition_digest=_digest(dataset, label)[:64],
        partition_stats={
            "num_clients": cell["fl"]["num_clients"],
            "emd_mean": 0.0 if alpha is None else 1 / alpha,
            "label_entropy_mean": 3.3,
        },
        backbone_fingerprint="fp0",
        status=status,
        rounds_completed=cell["fl"]["rounds"],
        scores=scores,
        comm=CommStats(bytes_up=bytes_up, bytes_down=bytes_up),
        compute=ComputeStats(
            wall_time_s=3600.0,
            gpu_hours=1.0,
            peak_mem_bytes=1 << 30,
            client_steps=client_steps,
            client_samples=client_samples,
            clients_without_step=clients_without_step,
        ),
        final_state_digest=_digest(cell_id_of(cell)),
        env=EnvInfo(git_sha="abc123", python="3.11", runner=runner, machine=machine),
        tracking=tracking,
        reason=None if status == "ok" else "loss is NaN at round 7",
        created_at="2025-01-01T00:00:00+00:00",
    )


def standard_records() -> list[ResultRecord]:
    """Three methods × three partitions × three seeds (one cell with two), on the cifar10-knn
    track."""
    out = []
    for (method, alpha), values in KNN_VALUES.items():
        for seed, value in enumerate(values):
            out.append(make_record(method, alpha=alpha, seed=seed, value=value))
    return out


# Reference points (random init on two backbones, central and local training): golden kNN values per
# alpha.
REFERENCE_VALUES: dict[tuple[str, str, float | None], list[float]] = {
    # above every method: must still not be ranked
    ("no_pretrain", "resnet18_cifar", None): [80.0, 80.0, 80.0],
    ("no_pretrain", "resnet18_cifar", 0.1): [80.0, 80.0, 80.0],
    ("no_pretrain", "vit_tiny", None): [30.0, 31.0, 32.0],
    ("central_ssl", "resnet18_cifar", None): [85.0, 85.5, 86.0],
    ("local_ssl", "resnet18_cifar", 0.1): [40.0, 41.0, 42.0],
}
# linear-probe golden values (a second task, so the summary table has two column groups)
LINEAR_VALUES: dict[tuple[str, float | None], list[float]] = {
    ("fedavg_simclr", None): [60.0, 61.0, 62.0],
    ("orchestra", None): [66.0, 66.5, 67.0],
    ("fedavg_simclr", 0.1): [55.0, 56.0, 57.0],
}
MACHINE = "Test CPU @ 2.00GHz"


def showcase_records() -> list[ResultRecord]:
    """A realistic record set for the site as a whole: the standard kNN records plus a linear probe
    score on some of them, reference points (one of them on two backbones, one that communicates
    nothing) and the hardware model."""
    out = []
    for (method, alpha), values in KNN_VALUES.items():
        for seed, value in enumerate(values):
            lin = LINEAR_VALUES.get((method, alpha))
            extra = (
                ()
                if lin is None
                else (
                    TaskScores(
                        task="linear_probe",
                        card=LINEAR_CARD,
                        main_metric="top1",
                        higher_is_better=True,
                        values={"top1": lin[seed]},
                    ),
                )
            )
            out.append(
                make_record(
                    method,
                    alpha=alpha,
                    seed=seed,
                    value=value,
                    extra_scores=extra,
                    machine=MACHINE,
                    client_steps=5000,
                )
            )
    for (method, backbone, alpha), values in REFERENCE_VALUES.items():
        comm = 0 if method in ("no_pretrain", "local_ssl") else 4_000_000
        for seed, value in enumerate(values):
            out.append(
                make_record(
                    method,
                    alpha=alpha,
                    seed=seed,
                    value=value,
                    backbone=backbone,
                    bytes_up=comm,
                    machine=MACHINE,
                    method_params={},
                )
            )
    return out


def write_records(root: Path, records: Iterable[ResultRecord]) -> list[Path]:
    paths = []
    for r in records:
        path = results_path(root, r)
        write_record(path, seal(r))  # as the runner does: the build verifies every record's digest
        paths.append(path)
    return paths


def write_raw(root: Path, name: str, text: str) -> Path:
    """A hand-written (possibly broken) record file placed where records live."""
    path = Path(root) / "records" / "v1" / "broken" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


__all__ = [
    "KNN_CARD",
    "KNN_VALUES",
    "LINEAR_CARD",
    "LINEAR_VALUES",
    "MACHINE",
    "REFERENCE_VALUES",
    "make_cell",
    "make_record",
    "showcase_records",
    "standard_records",
    "to_json",
    "write_raw",
    "write_records",
]
