"""A cell's run directory: the one module that knows its file names and answers what state the cell
is in.

Layout under a run root (docs/architecture.md)::

    <root>/<method>/<cell_id>/cell.json          the resolved cell, written before any work
                              partition.json     partition digest, spec and statistics
                              scores/<task>-<card_id>.json   one task's scores, written as the task finishes
                              scores/<task>-<card_id>.diverged.txt   the task's evaluation diverged (not retried)
                              tasks/<task>/      the task's own working folder
                              record.json        the result, written atomically, never edited
                              error.json         why the cell failed (kept; the grid goes on)
                              claim.json         held by the runner working on the cell (benchmark.runroot.locks)
                              attempts.jsonl     one line per attempt event (start, round, end): provenance
    <root>/_pretrain/<pretrain_key>/             shared by cells that differ only in their tasks
                              ckpt/              round checkpoints (benchmark.engine.checkpoints.Checkpointer)
                              states/            client states spilled to disk (benchmark.engine.client_store.ClientStateStore)
                              final.pt           the pre-trained state (benchmark.engine.pretrained.Pretrained)
                              lock.json          held while one runner pre-trains
    <root>/_pretrain/_shared/<key>.source.json   the cell that computed numbers other cells copy, because
                                                 they cannot depend on the partition (benchmark.engine.sharing)

Every other module asks :class:`RunDir` / :class:`PretrainDir` for a path or a state
(tests/benchmark/test_rundir.py fails if another module spells one of these names). Torch-free:
``status``, the leaderboard and ``collect`` use it.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
import traceback
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from benchmark.core.canonical import pretty_json
from benchmark.records.files import (
    RECORD_FILE,
    RecordExists,
    atomic_write_text,
    is_run_record,
    read_record,
    write_record,
)
from benchmark.records.schema import ResultRecord, from_json

if TYPE_CHECKING:
    from benchmark.contracts.cell import Cell

CELL_FILE = "cell.json"
PARTITION_FILE = "partition.json"
ERROR_FILE = "error.json"
CLAIM_FILE = "claim.json"
ATTEMPTS_FILE = "attempts.jsonl"
SCORES_DIR = "scores"
TASKS_DIR = "tasks"
PRETRAIN_ROOT = "_pretrain"
CKPT_DIR = "ckpt"
STATES_DIR = "states"
FINAL_FILE = "final.pt"
LOCK_FILE = "lock.json"
# ckpt/round_00003.pt (benchmark.engine.checkpoints.Checkpointer)
CHECKPOINT_PATTERN = re.compile(r"round_(\d{5,})\.pt$")
# every name above: the layout test holds the rest of the project to asking this module for them
FILE_NAMES = (
    CELL_FILE,
    PARTITION_FILE,
    RECORD_FILE,
    ERROR_FILE,
    CLAIM_FILE,
    ATTEMPTS_FILE,
    PRETRAIN_ROOT,
    FINAL_FILE,
    LOCK_FILE,
)
DIR_NAMES = (SCORES_DIR, TASKS_DIR, CKPT_DIR, STATES_DIR)

CellState = Literal["done", "diverged", "failed", "running", "pending"]
CELL_STATES: tuple[str, ...] = ("done", "diverged", "failed", "running", "pending")


@dataclass(frozen=True)
class CellStatus:
    state: CellState
    detail: str = ""  # the failure or divergence reason, who runs it, or how far a pending cell got


@dataclass(frozen=True)
class PretrainDir:
    """``<root>/_pretrain/<pretrain_key>``: the pre-training shared by cells that differ only in
    their tasks. A folder of its own (``simulate`` and ``check-method`` use bare ones) is fine too:
    only the layout inside counts."""

    path: Path

    @property
    def ckpt(self) -> Path:
        return self.path / CKPT_DIR

    @property
    def states(self) -> Path:
        return self.path / STATES_DIR

    def checkpoint(self, round_: int) -> Path:
        return self.ckpt / f"round_{round_:05d}.pt"

    @property
    def final(self) -> Path:
        return self.path / FINAL_FILE

    @property
    def lock(self) -> Path:
        return self.path / LOCK_FILE

    @property
    def pretrained(self) -> bool:
        """The pre-training finished (or diverged) and its state is saved: the tasks can run."""
        return self.final.exists()

    def checkpoint_rounds(self) -> list[int]:
        """Rounds with a checkpoint on disk (a cell with any is resumable from the latest)."""
        if not self.ckpt.exists():
            return []
        return sorted(
            int(m.group(1)) for p in self.ckpt.iterdir() if (m := CHECKPOINT_PATTERN.search(p.name))
        )


@dataclass(frozen=True)
class RunDir:
    """One cell's folder under a run root, and the shared pre-training folder it uses."""

    root: Path
    method: str
    cell_id: str
    pretrain_key: str

    @classmethod
    def of(cls, cell: Cell, root: Path | str) -> RunDir:
        return cls(Path(root), cell.method.name, cell.cell_id, cell.pretrain_key)

    @classmethod
    def from_record_file(cls, path: Path, record: ResultRecord | None = None) -> RunDir | None:
        """The run directory a record file lives in, None if ``path`` is not a run-root record (a
        copy in results/ or elsewhere). ``record``: the file's record, when already read."""
        path = Path(path)
        if path.name != RECORD_FILE or len(path.parents) < 3:
            return None
        if record is None:
            try:
                record = from_json(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                return None
        if path.parent.name != record.cell_id:
            return None
        return cls(path.parents[2], path.parent.parent.name, record.cell_id, record.pretrain_key)

    def relative(self, path: Path) -> Path:
        """``path`` relative to the run root (how files of a cell are named in a bundle)."""
        return Path(path).relative_to(self.root)

    # ---- paths -----------------------------------------------------------------------------------
    @property
    def cell_dir(self) -> Path:
        return self.root / self.method / self.cell_id

    @property
    def pretrain(self) -> PretrainDir:
        return PretrainDir(self.root / PRETRAIN_ROOT / self.pretrain_key)

    @property
    def record_path(self) -> Path:
        return self.cell_dir / RECORD_FILE

    @property
    def error_path(self) -> Path:
        return self.cell_dir / ERROR_FILE

    @property
    def claim_path(self) -> Path:
        return self.cell_dir / CLAIM_FILE

    @property
    def attempts_path(self) -> Path:
        return self.cell_dir / ATTEMPTS_FILE

    @property
    def cell_file(self) -> Path:
        return self.cell_dir / CELL_FILE

    @property
    def partition_file(self) -> Path:
        return self.cell_dir / PARTITION_FILE

    def task_dir(self, task: str) -> Path:
        return self.cell_dir / TASKS_DIR / task

    def score_path(self, task: str, card_id: str) -> Path:
        return self.cell_dir / SCORES_DIR / f"{task}-{card_id}.json"

    def score_files(self) -> list[Path]:
        return sorted((self.cell_dir / SCORES_DIR).glob("*.json"))

    def sidecar_files(self) -> list[Path]:
        """What the runner writes beside the record, and submit bundles with it: cell, partition,
        score files."""
        return [p for p in (self.cell_file, self.partition_file) if p.exists()] + self.score_files()

    # ---- states ----------------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self.record_path.exists()

    @property
    def failed(self) -> bool:
        return self.error_path.exists() and not self.done

    def live_claim(self) -> dict[str, Any] | None:
        from benchmark.runroot import locks

        return locks.live_claim(self.claim_path)

    def status(self, total_rounds: int | None = None) -> CellStatus:
        """done / diverged (with the reason) / failed (with the reason) / running (by whom, how far)
        / pending; ``total_rounds`` (the cell's) completes "round r/R checkpointed"."""
        if self.done:
            record = self.read_record()
            return (
                CellStatus("diverged", record.reason or "")
                if record.status == "diverged"
                else CellStatus("done")
            )
        if self.failed:
            return CellStatus("failed", self.error_reason())
        rounds = self.pretrain.checkpoint_rounds()
        of = f"/{total_rounds}" if total_rounds else ""
        progress = f"round {rounds[-1]}{of} checkpointed" if rounds else ""
        if self.pretrain.pretrained:
            progress = "pre-training finished"
        claim = self.live_claim()
        if claim is not None:
            from benchmark.runroot import locks

            return CellStatus(
                "running", ", ".join(filter(None, [f"by {locks.describe(claim)}", progress]))
            )
        return CellStatus("pending", f"resumable: {progress}" if progress else "")

    # ---- files -----------------------------------------------------------------------------------
    def read_record(self) -> ResultRecord:
        return read_record(self.record_path)

    def write_record(self, record: ResultRecord) -> None:
        """Atomically, never over an existing record (``RecordExists``)."""
        write_record(self.record_path, record)

    def write_cell(self, cell: Cell) -> None:
        """The resolved cell, once, before any work (a resumed attempt finds it in place)."""
        if not self.cell_file.exists():
            atomic_write_text(
                self.cell_file,
                json.dumps(
                    {
                        "cell_id": cell.cell_id,
                        "pretrain_key": cell.pretrain_key,
                        "cell": cell.to_dict(),
                    },
                    indent=2,
                    sort_keys=True,
                )
                + "\n",
            )

    def write_partition(self, digest: str, spec: Any, meta: Any, stats: Mapping[str, Any]) -> None:
        atomic_write_text(
            self.partition_file,
            json.dumps(
                {"digest": digest, "spec": spec, "meta": meta, "stats": stats},
                indent=2,
                sort_keys=True,
                default=str,
            )
            + "\n",
        )

    def read_partition(self) -> dict[str, Any]:
        return json.loads(self.partition_file.read_text(encoding="utf-8"))

    def write_error(self, reason: str, tb: str | None = None) -> None:
        atomic_write_text(
            self.error_path,
            json.dumps(
                {
                    "cell_id": self.cell_id,
                    "reason": reason,
                    "traceback": traceback.format_exc() if tb is None else tb,
                    "at": datetime.now(timezone.utc).isoformat(),
                },
                indent=2,
            )
            + "\n",
        )

    def error_reason(self) -> str:
        try:
            return str(json.loads(self.error_path.read_text())["reason"])
        except (OSError, ValueError, KeyError):
            return f"(unreadable {ERROR_FILE})"

    def clear_error(self) -> None:
        self.error_path.unlink(missing_ok=True)

    def write_scores(self, task: str, scores: Any) -> None:
        atomic_write_text(self.score_path(task, scores.card.card_id), pretty_json(scores))

    def read_scores(self, task: str, card_id: str) -> Any | None:
        """The task's cached scores (``TaskScores``), or None if the task has not finished."""
        path = self.score_path(task, card_id)
        if not path.exists():
            return None
        from benchmark.records.schema import ProtocolCard, TaskScores

        raw = json.loads(path.read_text())
        return TaskScores(**{**raw, "card": ProtocolCard(**raw["card"])})

    def _divergence_path(self, task: str, card_id: str) -> Path:
        path = self.score_path(task, card_id)
        return path.with_name(path.stem + ".diverged.txt")

    def mark_task_diverged(self, task: str, card_id: str, reason: str) -> None:
        atomic_write_text(self._divergence_path(task, card_id), f"{reason}\n")

    def task_divergence(self, task: str, card_id: str) -> str | None:
        """Why the task's evaluation diverged in an earlier attempt (it is not retried), or None."""
        path = self._divergence_path(task, card_id)
        return path.read_text().strip() if path.exists() else None

    def task_label(self, task: str, card_id: str) -> str:
        """How a task's failure is keyed in the record (``task_failures``)."""
        return self.score_path(task, card_id).stem

    def log_attempt(self, event: str, **fields: Any) -> None:
        """Append one JSON line to the attempt log (``O_APPEND`` writes of one short line do not
        interleave)."""
        self.cell_dir.mkdir(parents=True, exist_ok=True)
        line = (
            json.dumps(
                {
                    "event": event,
                    "pid": os.getpid(),
                    "host": socket.gethostname(),
                    "t": time.time(),
                    **fields,
                },
                sort_keys=True,
            )
            + "\n"
        )
        fd = os.open(self.attempts_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode("utf-8"))
        finally:
            os.close(fd)


def run_root_records(root: Path) -> Iterator[Path]:
    """Every cell record file under a run root."""
    yield from sorted(Path(root).rglob(RECORD_FILE))


def find_cell_dirs(root: Path, prefix: str) -> list[Path]:
    """Cell folders under ``root`` whose cell id starts with ``prefix`` (``show``)."""
    return [
        p for p in Path(root).glob(f"*/{prefix}*") if p.is_dir() and p.parent.name != PRETRAIN_ROOT
    ]


def describe_files(cell_dir: Path) -> Iterator[tuple[str, Path]]:
    """The human-readable files of a cell folder, in reading order (``show``)."""
    for name in (CELL_FILE, RECORD_FILE, ERROR_FILE):
        path = Path(cell_dir) / name
        if path.exists():
            yield name, path


__all__ = [
    "CELL_STATES",
    "CellState",
    "CellStatus",
    "PretrainDir",
    "RecordExists",
    "RunDir",
    "describe_files",
    "find_cell_dirs",
    "is_run_record",
    "run_root_records",
]
