"""The shapes a built-in's traffic declaration reads are the cell's, not the bundle's (issue 52, item 2).

On a track that does not re-train, ``accept`` derived a record's traffic from the shapes of the
bundle's own checkpoint: a checkpoint whose projector was shrunk (or stored in a narrower dtype)
declared less, and a record carrying that smaller figure, in the record and in the checkpoint's
counter, went through the traffic check. Now the declaration reads the cell's initial server state,
built on the meta device from the record's cell configuration, and a checkpoint whose server
tensors are not that state's (names, shapes, dtypes) is refused in one line before anything is
re-run. Each forgery below is consistent in itself: the checkpoint's sha256, its final-state
digest, its traffic counter and the record's figure all agree with what the checkpoint's own
shapes would declare."""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from tests.hostile import TRACK, accept_argv, refused


@pytest.fixture(scope="module")
def honest_folder(run_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from benchmark.submission.submit_records import submit

    out = tmp_path_factory.mktemp("bundles") / "honest"
    assert submit([run_root], track=TRACK, out=out, manifests=None, reevaluate=False).ok
    return out


PROJECTOR_OUT = ("projector.3.weight", "projector.3.bias")  # the projector's last layer


def _smaller(model: dict) -> dict:
    """The projector's output halved (its last layer's rows)."""
    return {k: v[: v.shape[0] // 2].clone() if k in PROJECTOR_OUT else v for k, v in model.items()}


def _bigger(model: dict) -> dict:
    return {k: torch.cat([v, v]) if k in PROJECTOR_OUT else v for k, v in model.items()}


def _narrower(model: dict) -> dict:
    """The projector stored in half precision: half its bytes."""
    return {k: v.to(torch.float16) if k.startswith("projector.") else v for k, v in model.items()}


def _added(model: dict) -> dict:
    """One more tensor in the server model (its encoder export never reads it): more bytes."""
    return {**model, "projector.9.weight": torch.zeros(32, 32)}


def _forged(honest_folder: Path, where: Path, edit: Callable[[dict], dict]) -> tuple[Path, int]:
    """A copy of the genuine bundle whose checkpoint's server model is ``edit``-ed, with a traffic
    figure that is exactly what fedavg_simclr declares on the edited shapes (in the record and in
    the checkpoint's counter), every digest and sha256 recomputed. Returns the bundle and the
    forged bytes per round."""
    from benchmark.engine.pretrained import Pretrained
    from benchmark.engine.traffic_sum import server_tensors
    from benchmark.records.files import read_record
    from benchmark.records.integrity import seal
    from benchmark.records.schema import CommStats, to_json
    from tests.hostile import _sha

    shutil.copytree(honest_folder, where)
    manifest = json.loads((where / "manifest.json").read_text())
    entry = manifest["records"][0]
    ckpt = where / entry["checkpoint"]["path"]
    pre = Pretrained.load(ckpt, untrusted=True)
    server = dataclasses.replace(pre.server, model=edit(dict(pre.server.model)))
    per_client = server_tensors(server).model_bytes()  # up and down: the whole model
    clients = 2  # the smoke cell's, all sampled
    sent = tuple(per_client * clients for _ in pre.comm_up)
    forged = dataclasses.replace(pre, server=server, comm_up=sent, comm_down=sent)
    forged.save(ckpt)
    record = read_record(where / entry["path"])
    record = seal(
        dataclasses.replace(
            record,
            final_state_digest=forged.state_digest(),
            comm=CommStats(
                bytes_up=sum(sent), bytes_down=sum(sent), per_round_up=sent, per_round_down=sent
            ),
        )
    )
    (where / entry["path"]).write_text(to_json(record))
    for rel in (entry["path"], entry["checkpoint"]["path"]):
        manifest["files"][rel] = _sha((where / rel).read_bytes())
    entry["sha256"] = manifest["files"][entry["path"]]
    entry["checkpoint"]["sha256"] = manifest["files"][entry["checkpoint"]["path"]]
    entry["checkpoint"]["bytes"] = ckpt.stat().st_size
    (where / "manifest.json").write_text(json.dumps(manifest))
    return where, sent[0]


CELL = "its server tensors are not those the record's cell builds"


@pytest.mark.parametrize(
    ("edit", "needles"),
    [
        # the encoder export reads these as they are (a copy converts the dtype; an unknown name is
        # not looked up): only the new check sees them
        pytest.param(
            _narrower,
            (
                CELL,
                "'projector.0.bias' is 32 float16 in the checkpoint, 32 float32",
                "(8 of 68 tensors",
            ),
            id="fp16-smaller-figure",
        ),
        pytest.param(
            _added,
            (
                CELL,
                "'projector.9.weight' is in the checkpoint (32×32 float32), not in",
                "(1 of 69 tensors",
            ),
            id="added-bigger-figure",
        ),
        # a projector of another size does not load into the cell's encoder either: refused
        # there first (fedavg_simclr exports its whole network); the traffic verdict's own refusal
        # of it is tested below
        pytest.param(_smaller, ("checkpoint:", "16"), id="smaller"),
        pytest.param(_bigger, ("checkpoint:", "64"), id="bigger"),
    ],
)
def test_a_checkpoint_whose_server_tensors_are_not_the_cell_s_is_refused(
    honest_folder: Path, honest, scratch: Path, capsys, monkeypatch, edit, needles
) -> None:
    import benchmark.submission.accept_bundle as acc

    def never(*a, **k):
        raise AssertionError("re-evaluated a record refused before its tasks are re-run")

    monkeypatch.setattr(acc, "reevaluate", never)
    bundle, sent = _forged(honest_folder, scratch / "b", edit)
    assert sent != honest.comm.per_round_up[0]  # a figure of its own, declared by its own shapes
    refused(scratch, capsys, accept_argv(scratch, bundle), *needles)


def test_the_declaration_reads_the_cell_s_shapes_not_the_checkpoint_s(honest, run_root) -> None:
    """Below accept's refusal: the figure the forged checkpoint declares for itself is not what
    the verdict compares with; the cell's genuine figure is (here 177,376 bytes a round)."""
    from benchmark.engine.pretrained import Pretrained
    from benchmark.submission.oracle import PartitionOracle
    from benchmark.submission.traffic import cell_method, traffic_verdict

    (ckpt,) = run_root.rglob("final.pt")
    pre = Pretrained.load(ckpt, untrusted=True)
    sizes = PartitionOracle().client_sizes(honest.cell)
    assert sizes is not None
    method = cell_method(honest, None)
    assert traffic_verdict(honest, pre, method, *sizes).problems == []
    genuine = honest.comm.per_round_up[0]
    assert genuine == 177376
    # the genuine checkpoint under a record claiming the smaller projector's bytes: the verdict's
    # figure is the cell's, whatever the checkpoint or the record say
    small = dataclasses.replace(pre.server, model=_smaller(dict(pre.server.model)))
    from benchmark.engine.traffic_sum import server_tensors
    from benchmark.records.schema import CommStats

    sent = (server_tensors(small).model_bytes() * 2,)
    claimed = dataclasses.replace(
        honest,
        comm=CommStats(
            bytes_up=sent[0], bytes_down=sent[0], per_round_up=sent, per_round_down=sent
        ),
    )
    forged_pre = dataclasses.replace(pre, comm_up=sent, comm_down=sent)
    up, down = traffic_verdict(claimed, forged_pre, method, *sizes).problems
    assert "round 1 download" in down
    line = up
    assert f"round 1 upload is {sent[0]:,} bytes" in line
    assert f"declares it sends there is {genuine:,} bytes" in line
    # and the smaller checkpoint itself is refused by its shapes, before any figure is compared
    shrunk = dataclasses.replace(forged_pre, server=small)
    (line,) = traffic_verdict(claimed, shrunk, method, *sizes).problems
    assert line.startswith("checkpoint: its server tensors are not those the record's cell builds")
