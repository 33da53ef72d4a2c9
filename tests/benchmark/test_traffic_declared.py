"""Traffic derived from what each method declares it sends (issue 52, item 2; plugin API 2.5):
``MethodBase.declared_traffic`` per client and round, summed by ``benchmark.engine.traffic_sum`` as the
round loop counts, must equal the runner's own count, byte for byte: on every shipped record (the
shapes from the cell's initial server state built on the meta device, as accept builds it), and on
tiny real runs of the configurations the shipped records do not reach (``bn: local``,
partial participation, FLESD's similarity uploads, Orchestra's shared memory on clients of many
sizes, FeatARC's ``num_batches``, FedMAE's ``aggregate: mean``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from benchmark.contracts.cell import Cell
from benchmark.contracts.declared_traffic import Sent, TrafficContext
from benchmark.contracts.registries import METHODS
from benchmark.engine.traffic_sum import (
    declares_traffic,
    derived_traffic,
    initial_server_state,
    server_layout,
    server_tensors,
)
from benchmark.submission.traffic import server_problems
from tests.helpers import smoke_cell

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted((ROOT / "results" / "records").rglob("*.json"))


def _initial(cell: Cell) -> tuple[Any, Any]:
    """The cell's prepared run (partition, method) and its initial server state, built on the meta
    device from the cell's configuration as accept builds it (``initial_server_state``)."""
    from benchmark.engine.stages import build_method, prepare

    prep = prepare(cell)
    method = build_method(cell, prep.inputs)  # a fresh instance: accept's is never trained
    return prep, initial_server_state(method, cell, prep.settings.num_clients)


def _derived(prep: Any, cell: Cell, server: Any, rounds: int) -> Any:
    public = prep.partition.public_indices
    return derived_traffic(
        prep.method,
        cell,
        server_tensors(server),
        prep.partition.sizes(),
        None if public is None else len(public),
        rounds,
    )


def test_every_built_in_method_declares_its_traffic() -> None:
    from benchmark.commands.method_table import in_tree_methods

    names = sorted(name for name, _, _ in in_tree_methods())
    assert len(names) >= 13
    assert [n for n in names if not declares_traffic(object.__new__(METHODS.get(n)))] == []


def test_the_declaration_equals_the_runner_s_count_on_every_shipped_record() -> None:
    from benchmark.records.files import read_record

    records = [r for r in (read_record(p) for p in SHIPPED if p.parent.parent.name == "v1")]
    assert len(records) >= 80 and len({r.method for r in records}) >= 13
    cache: dict[str, Any] = {}
    wrong = []
    for r in records:
        cell = Cell.from_dict(r.cell)
        if r.pretrain_key not in cache:
            cache[r.pretrain_key] = _initial(cell)
        prep, server = cache[r.pretrain_key]
        got = _derived(prep, cell, server, r.rounds_completed)
        if got != (tuple(r.comm.per_round_up), tuple(r.comm.per_round_down)):
            wrong.append(f"{r.method} {r.cell_id}: declared {got}, recorded {r.comm}")
    assert wrong == []


# 2 of 10 clients a round, a tenth of the data each (the default smoke cell: 2 of 2, half each):
# what a client sends is its tensors' bytes, which its data's size does not change except where the
# method says it does (Orchestra's variants below keep their own clients); the sum over a round's
# sampled clients is then the partial-participation one
TENTH = {"clients": 10, "participation": 0.2}

VARIANTS = [
    pytest.param(
        "fedavg_simclr",
        {"bn": "local"},
        {"clients": 4, "participation": 0.5},
        id="simclr-bn-local-half",
    ),
    pytest.param("central_ssl", {}, {"clients": 3}, id="central-pooled"),
    pytest.param("local_ssl", {}, TENTH, id="local-isolated"),
    pytest.param("dec_sl", {}, TENTH, id="dec_sl"),
    pytest.param("fedu", {}, TENTH, id="fedu-partial"),
    pytest.param("fedema", {}, TENTH, id="fedema"),
    pytest.param("fedmae", {"aggregate": "mean"}, TENTH, id="fedmae-mean"),
    pytest.param("fedmae", {"aggregate": "none"}, TENTH, id="fedmae-none"),
    pytest.param(
        "featarc",
        {"weighting": "num_batches", "bn": "local"},
        TENTH,
        id="featarc-batches-bn-local",
    ),
    pytest.param("flesd", {"upload": "similarity"}, TENTH, id="flesd-similarity"),
    pytest.param("flesd", {"upload": "similarity", "topk_percent": 10.0}, TENTH, id="flesd-topk"),
    pytest.param(
        "orchestra",
        {"share_representations": True, "memory_size": 1024, "batch_size": 16},
        {
            "fl": {"num_clients": 5, "participation": 1.0, "rounds": 2, "local_epochs": 2},
            "partition": {"name": "dirichlet", "alpha": 0.3},
        },
        id="orchestra-memory-of-many-sizes",
    ),
    pytest.param(
        "orchestra",
        {"num_local_clusters": 24, "memory_size": 24, "batch_size": 16},
        {"clients": 40},
        id="orchestra-clients-too-small-for-centroids",
    ),
    pytest.param("no_pretrain_bn", {}, {}, id="no_pretrain_bn"),
    pytest.param("no_pretrain", {}, {}, id="no_pretrain"),
    pytest.param("pixels", {}, {}, id="pixels"),
]


@pytest.mark.parametrize(("method", "params", "fl"), VARIANTS)
def test_the_declaration_equals_the_runner_s_count_on_a_real_run(
    tmp_path: Path, method: str, params: dict, fl: dict
) -> None:
    """Two rounds of a tiny real run: the round loop's own counter against the declaration, on the
    run's own checkpoint."""
    from benchmark.commands.smoke import cell_threads
    from benchmark.engine.stages import prepare, pretrain
    from benchmark.runroot.rundir import PretrainDir

    cell = smoke_cell(method, rounds=2, method_params=params, **fl)
    with cell_threads():
        prep = prepare(cell)
        pre = pretrain(prep, PretrainDir(tmp_path / "p"))
    assert pre is not None and pre.status == "ok"
    _, initial = _initial(cell)
    assert {t.device.type for t in [*initial.model.values(), *initial.extra.values()]} <= {"meta"}
    # accept reads the cell's initial shapes and requires the checkpoint's to be them (its extra
    # state may grow: FeatARC's assignment history, FedMAE's block pool)
    assert server_problems(pre.server, initial) == []
    model = {k: v for k, v in server_layout(pre.server).items() if k[0] == "model"}
    assert model == {k: v for k, v in server_layout(initial).items() if k[0] == "model"}
    assert _derived(prep, cell, initial, 2) == (pre.comm_up, pre.comm_down)


def test_orchestra_declares_what_a_client_s_size_allows() -> None:
    """The data-dependent part, without a run: a client too small to fill N_L memory rows uploads
    no centroids; ``share_representations`` uploads the memory, capped at its capacity."""
    from tests.helpers import digits_inputs

    cell = smoke_cell("orchestra", method_params={"batch_size": 16})
    method = METHODS.get("orchestra")(
        METHODS.get("orchestra").Config(batch_size=16, num_local_clusters=8, memory_size=64),
        cell.backbone,
        digits_inputs(),
    )
    d = 7

    class Shapes(dict):
        model = {"rot_head.weight": type("T", (), {"shape": (4, d)})()}

        def model_bytes(self, **_: Any) -> int:
            return 1000

        def __getitem__(self, name: str) -> Any:
            return type("T", (), {"nbytes": 50})()

    def sent(examples: int, round_: int = 2) -> Sent:
        return method.declared_traffic(Shapes(), TrafficContext(round_, 5, 10, 1, examples))

    assert sent(1).up == 1000  # one image: no batch, no memory, no centroids
    assert sent(7).up == 1000  # one batch of 7 rows: fewer than N_L = 8
    assert sent(8).up == 1000 + 8 * d * 4
    assert sent(8, round_=1) == Sent(up=8 * d * 4, down=1000)


def test_a_plugin_that_declares_nothing_is_not_derived_and_one_that_lies_is_caught(
    tmp_path: Path,
) -> None:
    """The MethodBase default (a plugin written before API 2.5) declares nothing: None, the
    record's figure stays the submitter's word. A declaration that is not a ``Sent``, or that
    gives two clients of a round different broadcasts, is refused."""
    from benchmark.contracts.method import MethodBase

    cell = smoke_cell("fedavg_simclr", rounds=1, clients=3)
    prep, server = _initial(cell)
    cls = type(prep.method)
    plain = type("Undeclared", (cls,), {"declared_traffic": MethodBase.declared_traffic})
    silent = object.__new__(plain)
    silent.__dict__.update(prep.method.__dict__)
    prep_silent = dataclasses.replace(prep, method=silent)
    assert not declares_traffic(silent)
    assert _derived(prep_silent, cell, server, 1) is None

    def wrong(self: Any, tensors: Any, at: TrafficContext) -> Any:
        return (1, 2)

    def uneven(self: Any, tensors: Any, at: TrafficContext) -> Any:
        return Sent(up=1, down=at.examples)

    for hook, needle in ((wrong, "not a benchmark.api.Sent"), (uneven, "different sizes")):
        bad = object.__new__(type("Bad", (cls,), {"declared_traffic": hook}))
        bad.__dict__.update(prep.method.__dict__)
        sizes = [10, 11, 12]
        with pytest.raises(ValueError, match=needle):
            derived_traffic(bad, cell, server_tensors(server), sizes, None, 1)


def test_sent_refuses_what_is_not_a_byte_count() -> None:
    for value in (-1, 1.5, True, "3"):
        with pytest.raises(ValueError, match="whole number of bytes"):
            Sent(up=value, down=0)  # type: ignore[arg-type]


def test_accept_s_verdict_derives_a_declared_traffic_and_badges_an_undeclared_one(
    tmp_path: Path,
) -> None:
    """What accept writes into the acceptance (``traffic``): derived for a method that declares,
    not derived (and not refused) for one that does not; a forged figure is a refusal line."""
    from benchmark.commands.smoke import cell_threads
    from benchmark.contracts.method import MethodBase
    from benchmark.engine.stages import prepare, pretrain
    from benchmark.runroot.rundir import PretrainDir
    from benchmark.submission.traffic import NOT_DECLARED, traffic_verdict
    from tests.hostile import reseal

    cell = smoke_cell("fedavg_simclr", rounds=1, clients=3)
    with cell_threads():
        prep = prepare(cell)
        pre = pretrain(prep, PretrainDir(tmp_path / "p"))
    assert pre is not None
    comm = {"per_round_up": pre.comm_up, "per_round_down": pre.comm_down}
    record = _record_with(cell, pre, comm)
    sizes = [int(s) for s in prep.partition.sizes()]
    ok = traffic_verdict(record, pre, prep.method, sizes, None)
    assert ok.problems == [] and ok.acceptance() == {"derived": True}
    silent = object.__new__(
        type("Undeclared", (type(prep.method),), {"declared_traffic": MethodBase.declared_traffic})
    )
    silent.__dict__.update(prep.method.__dict__)
    quiet = traffic_verdict(record, pre, silent, sizes, None)
    assert quiet.problems == [] and quiet.acceptance() == {"derived": False, "why": NOT_DECLARED}
    forged_pre = dataclasses.replace(pre, comm_up=(pre.comm_up[0] + 1,))
    forged = reseal(record, comm=dataclasses.replace(record.comm, per_round_up=forged_pre.comm_up))
    (line,) = traffic_verdict(forged, forged_pre, prep.method, sizes, None).problems
    assert line.startswith("traffic: round 1 upload is") and f"{pre.comm_up[0]:,} bytes" in line


def _record_with(cell: Cell, pre: Any, comm: dict) -> Any:
    """A sealed record of ``cell`` with the run's traffic (the fields the verdict reads)."""
    from benchmark.records.schema import CommStats
    from tests.leaderboard.lb_factory import make_record

    base = make_record("fedavg_simclr")
    stats = CommStats(
        bytes_up=sum(comm["per_round_up"]),
        bytes_down=sum(comm["per_round_down"]),
        per_round_up=tuple(comm["per_round_up"]),
        per_round_down=tuple(comm["per_round_down"]),
    )
    return dataclasses.replace(
        base, cell=cell.to_dict(), comm=stats, rounds_completed=pre.rounds_completed
    )


def test_the_frozen_plugins_of_earlier_api_versions_declare_nothing_and_keep_working() -> None:
    """FedMoCo as written against plugin API 2.2 and 2.3 (tests/plugins): no declaration, so its
    traffic is not derived (accepted with the badge), never a refusal or an error."""
    import importlib
    import sys

    plugins = ROOT / "tests" / "plugins"
    for src, module in (
        (plugins / "api_2_2" / "src", "fssl_moco_api22.method"),
        (plugins / "fssl_moco_plugin" / "src", "fssl_moco_plugin.method"),
    ):
        sys.path.insert(0, str(src))
        try:
            cls = importlib.import_module(module).FedMoCo
        finally:
            sys.path.remove(str(src))
        assert "declared_traffic" not in vars(cls)
        assert not declares_traffic(object.__new__(cls))
