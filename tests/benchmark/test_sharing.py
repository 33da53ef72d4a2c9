"""Cells whose numbers cannot depend on the partition are computed once per run root and shared
(benchmark.engine.sharing, issue 53): the copy's record names the cell it copies, keeps its own
partition and checkpoint, and every number is the computed cell's."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import pytest

from benchmark.engine.runner import run_cell
from benchmark.engine.sharing import Shared, share_key, shared_last
from benchmark.engine.stages import build_partition, load_data
from benchmark.records.integrity import integrity_problems
from benchmark.records.schema import from_json, to_json
from benchmark.runroot.rundir import RunDir
from tests.helpers import smoke_cell

DIR = {"name": "dirichlet", "alpha": 0.5}
TASKS = ["knn", {"name": "linear_probe", "epochs": 1}]


def _key(cell) -> str | None:
    return share_key(cell, build_partition(cell, load_data(cell).train.labels))


def test_the_key_joins_exactly_the_cells_whose_numbers_cannot_depend_on_the_partition() -> None:
    for method in ("no_pretrain", "pixels", "central_ssl"):
        iid, dirichlet = smoke_cell(method), smoke_cell(method, partition=DIR)
        assert iid.cell_id != dirichlet.cell_id
        assert _key(iid) is not None and _key(iid) == _key(dirichlet), method
        # another seed is another pre-training
        assert _key(smoke_cell(method, seed=1)) != _key(iid), method
    # the clients' own data: never shared
    for method in ("fedavg_simclr", "local_ssl", "no_pretrain_bn"):
        assert _key(smoke_cell(method)) is None, method
    # a task that reads the partition (the per-client probe) keeps the cell its partition's own
    assert _key(smoke_cell("no_pretrain", tasks=[{"name": "perclient", "epochs": 1}])) is None


def test_a_pooled_method_is_shared_only_with_the_same_pooled_images() -> None:
    # a public split carved out of the training images changes what the pooled client holds
    plain = smoke_cell("central_ssl")
    carved = smoke_cell("central_ssl", public={"name": "holdout", "fraction": 0.2})
    assert _key(plain) is not None and _key(carved) is not None
    assert _key(plain) != _key(carved)


def _count_knn(monkeypatch) -> list[int]:
    from tasks.probes import knn

    calls: list[int] = []
    real = knn.KNN.score_features

    def counted(self, train_f, test_f, ctx):
        calls.append(1)
        return real(self, train_f, test_f, ctx)

    monkeypatch.setattr(knn.KNN, "score_features", counted)
    return calls


@pytest.mark.parametrize("method", ["no_pretrain", "pixels"])
def test_a_run_computes_a_partition_independent_cell_once(
    method: str, tmp_path: Path, monkeypatch
) -> None:
    from benchmark.engine import stages

    simulated: list[str] = []
    real_simulate = stages.simulate

    def counted_simulate(method_, *a, **kw):
        simulated.append(method_.name)
        return real_simulate(method_, *a, **kw)

    monkeypatch.setattr(stages, "simulate", counted_simulate)
    knn_calls = _count_knn(monkeypatch)
    iid, dirichlet = smoke_cell(method, tasks=TASKS), smoke_cell(method, partition=DIR, tasks=TASKS)
    first = run_cell(iid, tmp_path)
    second = run_cell(dirichlet, tmp_path)
    # one pre-training and one kNN for the two cells
    assert simulated == [method] and knn_calls == [1]
    assert first.compute.reused_from is None
    assert second.compute.reused_from == iid.cell_id
    # every number is the computed cell's; the partition and the identity are the cell's own
    assert second.scores == first.scores
    assert second.final_state_digest == first.final_state_digest
    assert (second.status, second.rounds_completed, second.comm) == (
        first.status,
        first.rounds_completed,
        first.comm,
    )
    assert second.cell_id == dirichlet.cell_id and second.cell == dirichlet.to_dict()
    assert second.partition_digest != first.partition_digest
    assert second.partition_label != first.partition_label
    # its own checkpoint, byte for byte the computed one's (a bundle carries it with the record)
    own, theirs = RunDir.of(dirichlet, tmp_path).pretrain, RunDir.of(iid, tmp_path).pretrain
    assert own.path != theirs.path and own.pretrained
    assert hashlib.sha256(own.final.read_bytes()).digest() == (
        hashlib.sha256(theirs.final.read_bytes()).digest()
    )
    # and its own score files
    assert RunDir.of(dirichlet, tmp_path).score_files()
    # the record is sealed with the field, reads back, and a changed source breaks its digest
    back = from_json(to_json(second))
    assert back.compute.reused_from == iid.cell_id and not integrity_problems(back)
    forged = dataclasses.replace(
        back, compute=dataclasses.replace(back.compute, reused_from="0" * 16)
    )
    assert integrity_problems(forged)


def test_records_written_before_the_field_keep_their_digest() -> None:
    from benchmark.core.paths import REPO

    shipped = sorted((REPO / "results" / "records").rglob("*.json"))
    shipped = [p for p in shipped if p.parent.parent.name == "v1"][:5]
    assert shipped
    for path in shipped:
        rec = from_json(path.read_text(encoding="utf-8"))
        assert rec.compute.reused_from is None
        assert not integrity_problems(rec), path


def test_a_shared_cell_whose_source_is_gone_computes_again(tmp_path: Path, monkeypatch) -> None:
    import shutil

    knn_calls = _count_knn(monkeypatch)
    iid, dirichlet = (
        smoke_cell("pixels", tasks=["knn"]),
        smoke_cell("pixels", partition=DIR, tasks=["knn"]),
    )
    run_cell(iid, tmp_path)
    shutil.rmtree(RunDir.of(iid, tmp_path).cell_dir)
    rec = run_cell(dirichlet, tmp_path)
    assert knn_calls == [1, 1] and rec.compute.reused_from is None
    # it now computes the class for the cells after it
    key = _key(dirichlet)
    assert key is not None and Shared(tmp_path, key).source().cell_id == dirichlet.cell_id


def test_a_forged_pointer_is_not_followed(tmp_path: Path) -> None:
    shared = Shared(tmp_path, "a" * 16)
    shared.folder.mkdir(parents=True)
    shared.pointer.write_text('{"cell_id": "../../etc", "method": "x", "pretrain_key": "y"}')
    assert shared.source() is None


def test_cells_that_copy_another_run_after_it() -> None:
    a = smoke_cell("no_pretrain")
    b = smoke_cell("fedavg_simclr")
    a2 = smoke_cell("no_pretrain", partition=DIR)
    c = smoke_cell("pixels", partition=DIR)
    c2 = smoke_cell("pixels")
    order = [x.cell_id for x in shared_last([a, a2, b, c, c2])]
    assert order == [x.cell_id for x in (a, b, c, a2, c2)]


def test_the_pointer_is_not_read_as_a_record(tmp_path: Path) -> None:
    from benchmark.records.store import load_records

    iid, dirichlet = (
        smoke_cell("pixels", tasks=["knn"]),
        smoke_cell("pixels", partition=DIR, tasks=["knn"]),
    )
    run_cell(iid, tmp_path)
    run_cell(dirichlet, tmp_path)
    key = _key(iid)
    assert key is not None and Shared(tmp_path, key).pointer.exists()
    good, bad = load_records([tmp_path])
    assert sorted(r.cell_id for _, r in good) == sorted([iid.cell_id, dirichlet.cell_id])
    assert bad == []
