"""The stages compose into ``run_cell``: the same cell through prepare → pretrain → export →
evaluate → assemble gives the runner's numbers, and the pre-trained state survives its file (also in
the layout of earlier run roots)."""

from __future__ import annotations

from pathlib import Path

import torch

from benchmark.contracts.types import ServerState
from benchmark.engine.client_store import state_digest
from benchmark.engine.pretrained import Pretrained
from benchmark.engine.runner import run_cell
from benchmark.engine.stages import (
    Timings,
    assemble_record,
    evaluate,
    export_encoder,
    prepare,
    pretrain,
)
from benchmark.runroot.rundir import PretrainDir, RunDir
from tests.helpers import smoke_cell


def test_stages_by_hand_give_the_runners_numbers(tmp_path: Path) -> None:
    from benchmark.engine.rounds import sample_clients

    # exports one encoder per client: client states kept. 2 of 10 clients a round, a tenth of the
    # data each (before: 2 of 2, half each): the stages compose the same way on less training, and
    # the clients a round left out hold no state and export no member
    cell = smoke_cell("local_ssl", rounds=2, clients=10, participation=0.2, tasks=["knn"])
    trained = {k for r in (1, 2) for k in sample_clients(cell.seed, r, 10, 2)}
    assert len(trained) > 2  # round 2 sampled another client than round 1
    record = run_cell(cell, tmp_path / "runner", device="cpu")
    prep = prepare(cell)
    rd = RunDir.of(cell, tmp_path / "stages")
    pre = pretrain(prep, rd.pretrain)
    assert pre is not None and pre.ok and set(pre.client_tensors) == trained
    encoder = export_encoder(prep.method, pre.server, pre.client_states())
    assert len(encoder.members) == len(trained) and encoder.input_size == prep.dataset.image_size
    assert encoder.mean == tuple(prep.dataset.mean)  # the method exported a complete encoder
    ev = evaluate(cell, encoder, prep.dataset, prep.partition, rd, device=torch.device("cpu"))
    by_hand = assemble_record(
        prep,
        pre,
        ev,
        Timings(0.0, 0.0, 0.0),
        fingerprint=encoder.fingerprint,
        device=torch.device("cpu"),
        grid=None,
    )
    assert (
        by_hand.cell_id == record.cell_id
        and by_hand.final_state_digest == record.final_state_digest
    )
    assert [s.values for s in by_hand.scores] == [s.values for s in record.scores]
    assert by_hand.comm == record.comm and by_hand.partition_digest == record.partition_digest


def test_a_saved_pretraining_is_read_back_not_retrained(tmp_path: Path, monkeypatch) -> None:
    from benchmark.engine import stages

    # 2 of 10 clients (a fifth of the 2-client cell's steps): any saved pre-training is read back
    cell = smoke_cell("fedavg_simclr", clients=10, participation=0.2, tasks=["knn"])
    prep = prepare(cell)
    pdir = PretrainDir(tmp_path / "pre")
    first = pretrain(prep, pdir)
    monkeypatch.setattr(
        stages, "simulate", lambda *a, **k: (_ for _ in ()).throw(AssertionError("retrained"))
    )
    again = pretrain(prepare(cell), pdir)
    assert state_digest(again.server.model) == state_digest(first.server.model)
    assert again.comm_up == first.comm_up and again.history == first.history


def test_pretrained_round_trips_and_reads_the_older_payload(tmp_path: Path) -> None:
    pre = Pretrained(
        status="ok",
        reason=None,
        rounds_completed=2,
        server=ServerState(model={"w": torch.arange(3.0)}, extra={"c": torch.ones(1)}),
        comm_up=(4, 5),
        comm_down=(6, 7),
        history=({"loss": 1.0, "clients": 2.0, "client_steps": 9.0},),
        client_steps=9,
        client_tensors={1: {"w": torch.zeros(2)}},
        pretrain_time_s=1.5,
    )
    pre.save(tmp_path / "final")
    back = Pretrained.load(tmp_path / "final")
    assert state_digest(back.server.model) == state_digest(pre.server.model)
    assert (back.comm_up, back.client_steps, back.pretrain_time_s, back.client_epochs_run) == (
        (4, 5),
        9,
        1.5,
        2,
    )
    assert list(back.client_states()) == [1]
    old = {
        "status": "diverged",
        "reason": "nan",
        "rounds_completed": 1,
        "model": {},
        "extra": {},
        "comm_up": [],
        # a diverged run, earlier layout
        "comm_down": [],
        "history": [],
        "client_steps": 0,
        "clients": {},
    }
    torch.save(old, tmp_path / "old")
    assert Pretrained.load(tmp_path / "old").to_payload() == old
