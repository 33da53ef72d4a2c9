"""The run directory owns its layout: every file name of a cell's folder is spelled in
benchmark/runroot/rundir.py only, and ``RunDir`` answers done / failed / diverged / running /
pending (resumable) for everything that asks."""

from __future__ import annotations

import ast
import json
import os
import re
import socket
from pathlib import Path

import pytest

from benchmark.runroot import rundir
from benchmark.runroot.rundir import PretrainDir, RunDir

ROOT = Path(__file__).resolve().parents[2]
NAMES = set(rundir.FILE_NAMES) | set(rundir.DIR_NAMES)


def _path_literals(path: Path) -> list[tuple[int, str]]:
    """String constants of ``path`` (docstrings excluded) that name a run-directory file or folder:
    the whole string, a path component of it ("a/record.json"), or a literal piece of an f-string
    path."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and n.body
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
    }
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            text = node.value
            parts = set(text.replace("\\", "/").split("/"))
            # a file name with an extension is specific enough to match inside a longer string (a
            # message, an f-string piece) as a whole word; a bare folder name ("ckpt", "_pretrain")
            # only as a path component
            files = {
                n
                for n in rundir.FILE_NAMES
                if "." in n and re.search(rf"(?<![\w.-]){re.escape(n)}(?![\w.])", text)
            }
            if (parts & NAMES) or files:
                out.append((node.lineno, text))
    return out


SOURCES = [
    p
    for pkg in ("benchmark", "methods", "tasks", "leaderboard", "perf")
    for p in sorted((ROOT / pkg).rglob("*.py"))
    # records/files.py names the record file itself: the torch-free records layer finds the records
    # of a run root without the run directory, which comes after it (tests/benchmark/test_layers.py:
    # LAYERS)
    if p
    not in (
        ROOT / "benchmark" / "runroot" / "rundir.py",
        ROOT / "benchmark" / "records" / "files.py",
    )
]


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_but_the_run_directory_spells_its_file_names(path: Path) -> None:
    hits = [(n, t) for n, t in _path_literals(path) if not _allowed(path, t)]
    assert not hits, (
        f"{path.relative_to(ROOT)} spells run-directory names {hits}: ask benchmark.runroot.rundir.RunDir / "
        "PretrainDir for the path instead"
    )


def _allowed(path: Path, text: str) -> bool:
    """Words that coincide with a folder name but are not paths: record fields and registry/grid
    keys."""
    return text in {"scores", "tasks", "states"} and path.suffix == ".py" and "/" not in text


def test_the_checker_finds_a_spelled_name(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text(
        '"""mentions record.json in a docstring, which is fine."""\n'
        'x = root / "record.json"\ny = f"{root}/_pretrain/{key}/final.pt"\nz = "ckpt"\nw = "scores"\n'
        'v = "methods/versions.lock.json"\nu = "error: see error.json for the reason"\n'
    )
    found = [t for _, t in _path_literals(src)]
    assert "record.json" in found and any("final.pt" in t for t in found) and "ckpt" in found
    assert (
        "methods/versions.lock.json" not in found
        and "error: see error.json for the reason" in found
    )
    assert not any("docstring" in t for t in found)


def _record(tmp: Path, status: str = "ok") -> object:
    import dataclasses

    from tests.benchmark.test_records import record

    return dataclasses.replace(
        record(), status=status, reason="loss is nan" if status == "diverged" else None
    )


def test_states_from_pending_to_done(tmp_path: Path) -> None:
    from benchmark.engine.client_store import atomic_torch_save

    rd = RunDir(tmp_path, "m", "c0ffee", "k1")
    assert (
        rd.status(5).state == "pending"
        and rd.status().detail == ""
        and not rd.done
        and not rd.failed
    )
    atomic_torch_save({"round": 3}, rd.pretrain.checkpoint(3))
    assert (
        rd.pretrain.checkpoint_rounds() == [3]
        and rd.status(5).detail == "resumable: round 3/5 checkpointed"
    )
    rd.pretrain.final.write_bytes(b"x")
    assert rd.pretrain.pretrained and rd.status(5).detail == "resumable: pre-training finished"
    rd.write_error("MemoryError: simulated", tb="")
    assert (
        rd.failed
        and rd.status().state == "failed"
        and rd.status().detail == "MemoryError: simulated"
    )
    rd.clear_error()
    rd.write_record(_record(tmp_path))
    assert rd.done and rd.status().state == "done"
    with pytest.raises(rundir.RecordExists):
        rd.write_record(_record(tmp_path))  # results are immutable


def test_a_diverged_record_and_a_live_claim(tmp_path: Path) -> None:
    rd = RunDir(tmp_path, "m", "c0ffee", "k1")
    rd.cell_dir.mkdir(parents=True)
    # a live runner: this test's parent process on this host (our own pid would be a claim left by a
    # crash)
    rd.claim_path.write_text(
        json.dumps(
            {
                "host": socket.gethostname(),
                "pid": os.getppid(),
                "token": "t",
                "owner": None,
                "purpose": "cell",
            }
        )
    )
    assert rd.status().state == "running" and rd.status().detail.startswith("by ")
    rd.write_record(_record(tmp_path, "diverged"))
    assert rd.status() == rundir.CellStatus("diverged", "loss is nan")


def test_a_record_file_leads_back_to_its_run_directory(tmp_path: Path) -> None:
    r = _record(tmp_path)
    rd = RunDir(tmp_path / "runs", r.method, r.cell_id, r.pretrain_key)
    rd.write_record(r)
    back = RunDir.from_record_file(rd.record_path)
    assert back == rd and back.pretrain == PretrainDir(
        tmp_path / "runs" / rundir.PRETRAIN_ROOT / r.pretrain_key
    )
    copy = tmp_path / "results" / f"{r.cell_id}.json"
    copy.parent.mkdir()
    copy.write_text(rd.record_path.read_text())
    assert RunDir.from_record_file(copy) is None  # a copy outside a run root has no run directory


def test_task_scores_and_divergence_markers(tmp_path: Path) -> None:
    r = _record(tmp_path)
    rd = RunDir(tmp_path, r.method, r.cell_id, r.pretrain_key)
    s = r.scores[0]
    assert rd.read_scores(s.task, s.card.card_id) is None
    rd.write_scores(s.task, s)
    assert rd.read_scores(s.task, s.card.card_id) == s and rd.score_files() == [
        rd.score_path(s.task, s.card.card_id)
    ]
    rd.mark_task_diverged("finetune", "abc", "Diverged: lr 30")
    assert (
        rd.task_divergence("finetune", "abc") == "Diverged: lr 30"
        and rd.task_divergence("knn", "abc") is None
    )
    # the marker is not a score file
    assert rd.score_files() == [rd.score_path(s.task, s.card.card_id)]
