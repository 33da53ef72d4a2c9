"""Records on disk → the record frame: every record under the results folders, validated and
deduplicated, the acceptances that vouch for them, and one pandas row per (record, task score)
(docs/design.md §1.2). Nothing here raises on a bad file: it comes back as ``Skipped``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from benchmark.core.paths import GRIDS
from benchmark.records.schema import ResultRecord
from benchmark.records.store import Skipped, iter_record_files, read_record, verify_record
from benchmark.records.tracks import eval_split_of
from leaderboard.labels import disambiguate, partition_short

VERIFIED_RUNNER = "fssl-bench"


def load_acceptances(
    results_dirs: Iterable[Path | str], records: Sequence[tuple[Path, ResultRecord]]
) -> tuple[dict[str, dict[str, Any]], list[Skipped]]:
    """cell_id → the acceptance that marks the record re-evaluated (``benchmark accept`` wrote it
    under ``<results>/acceptances/``; ``benchmark.records.acceptance_files.reevaluated`` verifies it
    against the record). An acceptance whose digest does not match, or that does not vouch for the
    record it names (the record was edited, a score is not covered or lies outside the tolerance),
    comes back as ``Skipped``: the record shows as reported."""
    from benchmark.records.acceptance_files import find_acceptances, read_acceptance, reevaluated

    by_digest = {r.digest: r for _, r in records}
    out: dict[str, dict[str, Any]] = {}
    skipped: list[Skipped] = []
    for path in find_acceptances(Path(d) for d in results_dirs):
        try:
            acc = read_acceptance(path)
        except ValueError as exc:
            skipped.append(Skipped(path, f"acceptance ignored: {exc}"))
            continue
        record = by_digest.get(acc.get("record_digest"))
        if record is None:
            same_cell = [r for _, r in records if r.cell_id == acc.get("cell_id")]
            if same_cell:  # the record it accepted was edited since: its mark does not carry over
                skipped.append(
                    Skipped(
                        path,
                        "acceptance ignored: it names a record digest that no record has (the "
                        f"record of cell {acc.get('cell_id')} changed after it was accepted)",
                    )
                )
            continue
        why = reevaluated(record, acc)
        if why:
            skipped.append(Skipped(path, f"acceptance ignored: {why}"))
            continue
        out[record.cell_id] = acc
    return out, skipped


def load_all(
    results_dirs: Iterable[Path | str],
) -> tuple[list[tuple[Path, ResultRecord]], list[Skipped]]:
    """Every record under the given folders (recursively), deduplicated by cell_id. Nothing here
    raises: malformed, truncated or schema-incompatible files, and conflicting duplicates, come back
    as ``Skipped``."""
    good: list[tuple[Path, ResultRecord]] = []
    skipped: list[Skipped] = []
    seen: dict[str, tuple[Path, ResultRecord]] = {}
    for root in results_dirs:
        root = Path(root)
        if not root.exists():
            skipped.append(Skipped(root, "results folder does not exist"))
            continue
        for path in iter_record_files(root):
            try:
                record = read_record(path)
            except Exception as exc:  # noqa: BLE001 - a bad file must never stop the build
                skipped.append(Skipped(path, f"{type(exc).__name__}: {exc}"))
                continue
            problems = verify_record(record)
            # edited, unsealed or inconsistent: the skipped page says why, never a table
            if problems:
                skipped.append(Skipped(path, "; ".join(problems)))
                continue
            shape = row_problem(path, record)
            if shape:  # a sealed record whose cell the tables cannot hold
                skipped.append(Skipped(path, shape))
                continue
            prior = seen.get(record.cell_id)
            if prior is not None:
                if prior[1] != record:
                    skipped.append(
                        Skipped(
                            path,
                            f"duplicate cell_id {record.cell_id} with different content "
                            f"than {prior[0]} (the first one is shown)",
                        )
                    )
                continue
            seen[record.cell_id] = (path, record)
            good.append((path, record))
    return good, skipped


def row_problem(path: Path, record: ResultRecord) -> str | None:
    """Why ``record`` cannot become table rows (its cell's sections of the wrong type), or None. The
    schema checks the record's typed fields; the cell is free-form, so its rows are built once here,
    where a failure is one skipped file and not a failed build."""
    try:
        records_frame([(path, record)])
    except Exception as exc:  # noqa: BLE001 - a bad file must never stop the build
        return f"the record's cell has the wrong shape for the tables ({type(exc).__name__}: {exc})"
    return None


def alpha_of(name: str | None, params: dict[str, Any] | None) -> float | None:
    """Heterogeneity α from a partition spec: ``iid`` → ∞, any partitioner with an ``alpha``
    parameter → α."""
    params = params or {}
    if name == "iid":
        return math.inf
    alpha = params.get("alpha")
    if isinstance(alpha, (int, float)) and not isinstance(alpha, bool):
        return float(alpha)
    return None


@functools.lru_cache(maxsize=1)
def shipped_grids() -> frozenset[str]:
    """The names of the grids this repository ships (benchmark/grids/*.yaml)."""
    return frozenset(p.stem for p in GRIDS.glob("*.yaml"))


def plugin_provenance(record: ResultRecord) -> Mapping[str, Any] | None:
    """Where a plugin method's code came from (distribution, version, source digest), as the runner
    recorded it in ``env.plugins``; None for a built-in method."""
    prov = (record.env.plugins or {}).get(f"method:{record.method}")
    return prov if isinstance(prov, Mapping) else None


def submitted(record: ResultRecord) -> bool:
    """True for a record whose method's settings were not chosen on this benchmark's validation
    split like the shipped methods' were: a method that is not built in (a plugin, per
    ``env.plugins``), or a run of a grid the repository does not ship."""
    grid = record.grid
    return plugin_provenance(record) is not None or bool(grid and grid not in shipped_grids())


def is_verified(record: ResultRecord) -> bool:
    return record.env.runner == VERIFIED_RUNNER


RECORD_COLUMNS = [
    "cell_id",
    "method",
    "method_version",
    "dataset",
    "eval_split",
    "seed",
    "partition_label",
    "partition_name",
    "alpha",
    "partition_digest",
    "partition_params",
    "partition_short",
    "config_key",
    "row_key",
    "row_config",
    "method_params",
    "backbone",
    "backbone_key",
    "fl_num_clients",
    "fl_participation",
    "fl_rounds",
    "fl_local_epochs",
    "status",
    "task",
    "card_name",
    "card_id",
    "card_summary",
    "selects_on_test",
    "metric",
    "higher_is_better",
    "value",
    "reported",
    "bytes",
    "bytes_per_client",
    "wall_time_s",
    "gpu_hours",
    "client_steps",
    "client_samples",
    "clients_without_step",
    "machine",
    "git_sha",
    "uses_public_data",
    "verified",
    "reevaluated",
    "unboxed",
    "retrained",
    "traffic_underived",
    "reference",
    "submitted",
    "path",
    "record",
]


def _config_body(cell: Mapping[str, Any]) -> dict[str, Any]:
    return {
        k: v for k, v in cell.items() if k not in ("seed", "tasks", "partition", "partition_seed")
    }


def _hash(body: Any) -> str:
    return hashlib.sha256(
        json.dumps(body, sort_keys=True, default=str).encode("utf-8")
    ).hexdigest()[:12]


def config_key(cell: Mapping[str, Any]) -> str:
    """What a table row stands for, besides its partition (a key of its own): the resolved cell
    without its seed, tasks and partition. Seeds of one configuration are averaged; two
    configurations of one method (another backbone, other hyperparameters, another federation) are
    two rows, never pooled as if they were seeds."""
    return _hash(_config_body(cell))


def row_config(cell: Mapping[str, Any]) -> dict[str, Any]:
    """A dataset summary row: the configuration without the federation's size and participation
    (which each summary column, a track, fixes); rounds and local epochs stay part of the row."""
    body = _config_body(cell)
    body["fl"] = {
        k: v
        for k, v in dict(body.get("fl") or {}).items()
        if k not in ("num_clients", "participation")
    }
    return body


def machine_of(record: ResultRecord) -> str:
    """The hardware model a record ran on (``env.machine``); older records without it: the device
    alone."""
    return record.env.machine or f"{record.env.device} (model not recorded)"


def records_frame(
    records: Sequence[tuple[Path, ResultRecord]],
    reference_points: Iterable[str] = (),
    reevaluated: Iterable[str] = (),
) -> pd.DataFrame:
    """One row per (record, task score). A diverged record has no scores: it gets one row per task
    of its cell, with a missing value, so that it is counted (not dropped) on every track it belongs
    to. ``reference_points``: methods marked ``reference`` (shown apart, never ranked);
    ``reevaluated``: cell ids whose acceptance verified, or cell id → that acceptance
    (:func:`load_acceptances`): an accepted record's ``value`` is the value the maintainers
    reproduced, ``reported`` the record's own (so the tolerance cannot be spent on a raised
    score)."""
    rows: list[dict[str, Any]] = []
    refs = set(reference_points)
    accepted = set(reevaluated)
    acceptances = reevaluated if isinstance(reevaluated, Mapping) else {}
    for path, r in one_checkpoint_once(records):
        base = _record_base(path, r, reference=r.method in refs, reevaluated=r.cell_id in accepted)
        base.update(retrained_columns(acceptances.get(r.cell_id), base))
        base["traffic_underived"] = traffic_underived(acceptances.get(r.cell_id))
        if r.scores:
            rows.extend(_score_rows(base, r, acceptances.get(r.cell_id)))
        else:
            rows.extend(_diverged_rows(base, r.cell))
    return _short_partitions(pd.DataFrame(rows, columns=RECORD_COLUMNS))


def retrained_columns(
    acceptance: Mapping[str, Any] | None, base: Mapping[str, Any]
) -> dict[str, Any]:
    """What the site shows of a cell's training, from the maintainer's re-run where ``accept``
    re-trained it (the acceptance's ``training.retrained``, docs/integrity.md): traffic, optimizer
    steps, compute time (re-run pre-training + re-evaluation) and machine; and whether the method's
    code ran without a box (``--unboxed``)."""
    training = (acceptance or {}).get("training")
    if not isinstance(training, Mapping):
        return {"unboxed": False, "retrained": False}
    out: dict[str, Any] = {"unboxed": str(training.get("box", "")).startswith("none")}
    again = training.get("retrained")
    out["retrained"] = isinstance(again, Mapping)
    if isinstance(again, Mapping):
        number = (int, float)
        up, down = again.get("bytes_up"), again.get("bytes_down")
        if isinstance(up, number) and isinstance(down, number):
            out["bytes"] = up + down
            out["bytes_per_client"] = per_client(up + down, base.get("fl_num_clients"))
        times = [again.get("pretrain_time_s"), again.get("eval_time_s")]
        if all(isinstance(t, number) for t in times):
            out["wall_time_s"] = float(sum(times))
        if isinstance(again.get("client_steps"), number):
            out["client_steps"] = again["client_steps"]
        if isinstance(again.get("machine"), str) and again["machine"]:
            out["machine"] = again["machine"]
    return out


def traffic_underived(acceptance: Mapping[str, Any] | None) -> bool:
    """Whether ``accept`` could not derive the cell's traffic from its method's declaration (the
    acceptance's ``traffic.derived`` false: a plugin that declares nothing) and did not re-run the
    training either (a re-run's traffic is the maintainers' own): the figure is the submitter's
    word, badged "traffic not derived" and not ranked on communication (docs/integrity.md). A
    plugin's re-run does not count (``traffic.plugin``): its code ran in the box's process beside the
    counter, so the figure can be its own."""
    traffic = (acceptance or {}).get("traffic")
    training = (acceptance or {}).get("training")
    retrained = isinstance(training, Mapping) and isinstance(training.get("retrained"), Mapping)
    if not isinstance(traffic, Mapping) or traffic.get("derived") is not False:
        return False
    return not retrained or traffic.get("plugin") is True


def one_checkpoint_once(
    records: Sequence[tuple[Path, ResultRecord]],
) -> list[tuple[Path, ResultRecord]]:
    """``records`` without the ones that count a training run twice in one row (issue 44): records
    of one configuration and partition whose final states hash alike (``final_state_digest``) are
    one checkpoint, however many seeds they claim; only those of the lowest seed are kept (the
    cells of that seed, one per task, all stay). A checkpoint shared across partitions (a method
    that ignores the partition) is two rows and stays in both."""
    lowest: dict[tuple[str, str, str], int] = {}
    for _, r in records:
        if r.final_state_digest and isinstance(r.seed, int):
            key = (config_key(dict(r.cell)), str(r.partition_label), r.final_state_digest)
            lowest[key] = min(lowest.get(key, r.seed), r.seed)
    return [
        (path, r)
        for path, r in records
        if not r.final_state_digest
        or not isinstance(r.seed, int)
        or lowest[(config_key(dict(r.cell)), str(r.partition_label), r.final_state_digest)]
        == r.seed
    ]


def _record_base(
    path: Path, r: ResultRecord, *, reference: bool, reevaluated: bool
) -> dict[str, Any]:
    """The columns of a record's rows that do not depend on the task score."""
    cell = r.cell if isinstance(r.cell, dict) else dict(r.cell)
    part = cell.get("partition") or {}
    fl = cell.get("fl") or {}
    body = row_config(cell)
    return {
        "cell_id": r.cell_id,
        "method": r.method,
        "method_version": r.method_version,
        "dataset": r.dataset,
        "eval_split": eval_split_of(cell),
        "seed": r.seed,
        "partition_label": r.partition_label,
        "partition_name": part.get("name"),
        "alpha": alpha_of(part.get("name"), part.get("params")),
        "partition_digest": r.partition_digest,
        "partition_params": json.dumps(part.get("params") or {}, sort_keys=True, default=str),
        "partition_short": partition_short(part.get("name"), part.get("params")),
        "config_key": config_key(cell),
        "row_key": _hash(body),
        "row_config": json.dumps(body, sort_keys=True, default=str),
        "method_params": json.dumps(
            (cell.get("method") or {}).get("params") or {}, sort_keys=True, default=str
        ),
        "backbone": (cell.get("backbone") or {}).get("name"),
        "backbone_key": json.dumps(cell.get("backbone") or {}, sort_keys=True, default=str),
        "fl_num_clients": fl.get("num_clients"),
        "fl_participation": fl.get("participation"),
        "fl_rounds": fl.get("rounds"),
        "fl_local_epochs": fl.get("local_epochs"),
        "status": r.status,
        "bytes": r.comm.bytes_up + r.comm.bytes_down,
        "bytes_per_client": per_client(r.comm.bytes_up + r.comm.bytes_down, fl.get("num_clients")),
        "wall_time_s": r.compute.wall_time_s,
        "gpu_hours": r.compute.gpu_hours,
        "client_steps": r.compute.client_steps,
        # 0: not counted (a record written before client_samples existed): unknown, not none
        "client_samples": r.compute.client_samples or math.nan,
        # None: not counted (a record written before clients_without_step existed)
        "clients_without_step": math.nan
        if r.compute.clients_without_step is None
        else r.compute.clients_without_step,
        "machine": machine_of(r),
        "git_sha": r.env.git_sha,
        "uses_public_data": bool(r.uses_public_data),
        "verified": is_verified(r),
        "reevaluated": reevaluated,
        "reference": reference,
        "submitted": submitted(r),
        "path": str(path),
        # for Track.admits, the one membership rule (never exported: CSVs list their columns)
        "record": r,
    }


def _score_rows(
    base: Mapping[str, Any], r: ResultRecord, acceptance: Mapping[str, Any] | None
) -> list[dict[str, Any]]:
    """One row per task score; an accepted record's value is the one the maintainers
    reproduced."""
    rows = []
    for s in r.scores:
        again = reproduced_value(acceptance, s)
        rows.append(
            {
                **base,
                "task": s.task,
                "card_name": s.card.name,
                "card_id": s.card.card_id,
                "card_summary": s.card.summary,
                "selects_on_test": s.card.selects_on_test,
                "metric": s.main_metric,
                "higher_is_better": s.higher_is_better,
                "value": s.main if again is None else again,
                "reported": s.main,
            }
        )
    return rows


def _diverged_rows(base: Mapping[str, Any], cell: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A record without scores (diverged): one row per task of its cell, value missing."""
    return [
        {
            **base,
            "task": (t or {}).get("name"),
            "card_name": None,
            "card_id": None,
            "card_summary": None,
            "selects_on_test": False,
            "metric": None,
            "higher_is_better": True,
            "value": float("nan"),
            "reported": float("nan"),
        }
        for t in cell.get("tasks") or [{}]
    ]


def reproduced_value(acceptance: Mapping[str, Any] | None, score: Any) -> float | None:
    """The main value of ``score`` as the acceptance reproduced it (None: no acceptance, or it has
    no such value)."""
    for entry in (acceptance or {}).get("scores") or []:
        if (
            isinstance(entry, Mapping)
            and entry.get("task") == score.task
            and entry.get("card_id") == score.card.card_id
            and entry.get("key") == score.main_metric
            and isinstance(entry.get("reproduced"), (int, float))
        ):
            return float(entry["reproduced"])
    return None


def bytes_per_client(record: ResultRecord) -> float:
    """A record's bytes up + down divided by its number of clients K (:func:`per_client`)."""
    return per_client(
        record.comm.bytes_up + record.comm.bytes_down,
        (record.cell.get("fl") or {}).get("num_clients"),
    )


def per_client(total: int, num_clients: Any) -> float:
    """Bytes up + down of the whole run divided by the number of clients K: one client's average
    traffic."""
    return total / num_clients if isinstance(num_clients, int) and num_clients > 0 else math.nan


def _short_partitions(frame: pd.DataFrame) -> pd.DataFrame:
    """Short partition labels, unique within each dataset (see
    :func:`leaderboard.labels.disambiguate`)."""
    if frame.empty:
        return frame
    frame = frame.copy()
    for _, g in frame.groupby("dataset", sort=False):
        parts = g.drop_duplicates("partition_label")
        fixed = disambiguate(
            dict(zip(parts["partition_label"], parts["partition_short"])),
            dict(zip(parts["partition_label"], parts["partition_name"].astype(str))),
        )
        frame.loc[g.index, "partition_short"] = g["partition_label"].map(fixed)
    return frame
