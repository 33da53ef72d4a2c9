"""check-method: passes for every registered method, fails with a named reason for deliberately
broken ones.

The broken methods are variants of the tiny out-of-tree fixture method
(tests/plugins/fssl_toy_plugin), loaded from its source file and registered only for the duration of
one test (monkeypatch restores the registry), so the registry-generated tests elsewhere never see
them.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import pytest
import torch

from benchmark.api import (
    ClientState,
    FedAvgFold,
    Payload,
    Sent,
    ServerState,
    ServerTensors,
    TrafficContext,
    average_uploads,
)
from benchmark.commands.check_method import check_method, smoke_cell
from benchmark.contracts.registries import METHODS, load_builtins
from benchmark.engine.rounds import sample_clients

load_builtins()
REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "_toy_plugin_method",
    REPO / "tests" / "plugins" / "fssl_toy_plugin" / "src" / "fssl_toy_plugin" / "method.py",
)
toy = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = toy  # dataclasses look their module up while the class is built
_spec.loader.exec_module(toy)  # type: ignore[union-attr]


class GoodToy(toy.ToyPlugin):
    name = "_good_toy"


class NondeterministicToy(toy.ToyPlugin):
    """Draws from the global torch RNG: two runs with one seed differ."""

    name = "_nondeterministic_toy"

    def client_update(self, down, state, data, ctx):
        up, new_state = super().client_update(down, state, data, ctx)
        noisy = {
            k: (v + 1e-3 * torch.randn(v.shape) if v.is_floating_point() else v)
            for k, v in up.tensors.items()
        }
        return Payload(noisy, num_examples=up.num_examples, metrics=up.metrics), new_state


class LeakyToy(toy.ToyPlugin):
    """Uploads a tensor it does not declare in ``payload_up``."""

    name = "_leaky_toy"

    def client_update(self, down, state, data, ctx):
        up, new_state = super().client_update(down, state, data, ctx)
        extra = {"debug.client_mean": data.train.images.float().mean(0)}
        return Payload(
            {**up.tensors, **extra}, num_examples=up.num_examples, metrics=up.metrics
        ), new_state


class HiddenStateToy(toy.ToyPlugin):
    """Keeps a round counter in the method object instead of the states: a resumed run diverges."""

    name = "_hidden_state_toy"

    def __init__(self, cfg, backbone, inputs):
        super().__init__(cfg, backbone, inputs)
        self.calls = 0

    def server_aggregate(self, server, ups, ctx, public):
        self.calls += 1
        out = super().server_aggregate(server, ups, ctx, public)
        return type(out)(
            model={
                k: v * (1.0 + 1e-3 * self.calls) if v.is_floating_point() else v
                for k, v in out.model.items()
            },
            extra=out.extra,
        )


class ForgetfulToy(toy.ToyPlugin):
    """Keeps a per-client tensor whose value depends on memory that is not in the ClientState."""

    name = "_forgetful_toy"
    _memory: dict[int, int] = {}

    def client_update(self, down, state, data, ctx):
        up, _ = super().client_update(down, state, data, ctx)
        seen = ForgetfulToy._memory.get(id(self), 0) + 1
        ForgetfulToy._memory[id(self)] = seen
        return up, ClientState(tensors={"seen": torch.tensor(float(seen))}, last_round=ctx.round)


class BlindToy(toy.ToyPlugin):
    """Exports an encoder whose features carry no information (all weights zero)."""

    name = "_blind_toy"

    def encoder(self, server, clients=None):
        zero = type(server)(
            model={k: torch.zeros_like(v) for k, v in server.model.items()}, extra=server.extra
        )
        return super().encoder(zero, clients)


class FoldToy(toy.ToyPlugin):
    """FedAvg through the engine's upload fold: each upload folded as it comes, as server_aggregate
    would average."""

    name = "_fold_toy"

    def server_aggregate(self, server, ups, ctx, public):
        return ServerState(model=average_uploads(ups, "num_examples"), extra=server.extra)

    def upload_fold(self, server, sizes, ctx):
        return FedAvgFold(server, sizes, "num_examples", merge=False)


class _ForgetsTheLast:
    """A fold that never adds the round's last upload (the slip the fold check exists for)."""

    def __init__(self, server, sizes):
        self._last = max(sizes)
        self._fold = FedAvgFold(
            server, {k: n for k, n in sizes.items() if k != self._last}, "num_examples", merge=False
        )

    def add(self, client_id, up):
        if client_id != self._last:
            self._fold.add(client_id, up)

    def finish(self):
        return self._fold.finish()


class BadFoldToy(FoldToy):
    name = "_bad_fold_toy"

    def upload_fold(self, server, sizes, ctx):
        return _ForgetsTheLast(server, sizes)


class MetricsFoldToy(FoldToy):
    """Its server reports a round metric that its fold forgets: the round history would differ."""

    name = "_metrics_fold_toy"

    def server_aggregate(self, server, ups, ctx, public):
        out = super().server_aggregate(server, ups, ctx, public)
        return ServerState(model=out.model, extra=out.extra, metrics={"uploads": float(len(ups))})


class DeclaredToy(toy.ToyPlugin):
    """Declares its traffic (plugin API 2.5): its whole model up and down, as it sends it."""

    name = "_declared_toy"

    def declared_traffic(self, tensors: ServerTensors, at: TrafficContext) -> Sent | None:
        return Sent(up=tensors.model_bytes(), down=tensors.model_bytes())


class OverDeclaredToy(toy.ToyPlugin):
    """Declares 4 bytes more upload than it sends from round 2 on (a counter it forgot)."""

    name = "_over_declared_toy"

    def declared_traffic(self, tensors: ServerTensors, at: TrafficContext) -> Sent | None:
        extra = 4 if at.round >= 2 else 0
        return Sent(up=tensors.model_bytes() + extra, down=tensors.model_bytes())


class SilentToy(toy.ToyPlugin):
    """Overrides the hook and still declares nothing: None, as the MethodBase default."""

    name = "_silent_toy"

    def declared_traffic(self, tensors: ServerTensors, at: TrafficContext) -> Sent | None:
        return None


class GrowingToy(DeclaredToy):
    """Its server model gains a tensor after round 1: the initial state's shapes, which accept
    reads, are not the checkpoint's."""

    name = "_growing_toy"

    def server_aggregate(self, server, ups, ctx, public):
        out = super().server_aggregate(server, ups, ctx, public)
        return ServerState(model={**out.model, "encoder.grown": torch.zeros(3)}, extra=out.extra)

    def broadcast(self, server, ctx):
        return Payload({k: v for k, v in server.model.items() if k != "encoder.grown"})


FAST = {"max_steps": 2}  # two local steps per round are enough to show each failure


@pytest.fixture()
def register(monkeypatch: pytest.MonkeyPatch):
    def add(cls: type) -> str:
        monkeypatch.setitem(METHODS._items, cls.name, cls)
        return cls.name

    return add


def test_smoke_cell_is_shared_with_the_tests() -> None:
    from tests.helpers import smoke_cell as helper

    assert helper is smoke_cell
    cell = smoke_cell("fedavg_simclr")
    assert cell.dataset.name == "digits" and cell.fl.num_clients == 2


def test_a_conforming_method_passes(register) -> None:
    report = check_method(register(GoodToy), knn=False, method_params=FAST)
    assert report.ok, report.format()
    assert {r.name for r in report.results if r.status == "pass"} == {
        "interface",
        "finite_losses",
        "declared_payloads",
        "declared_traffic",
        "determinism",
        "resume",
    }
    # each line's time is its own work: the simulation a check reads first runs in its timer
    times, measured = {r.name: r.seconds for r in report.results}, report.measurements
    assert times["finite_losses"] >= measured["simulate_a_s"] > 0
    assert times["determinism"] >= measured["simulate_r1_s"] > 0
    assert times["resume"] >= measured["simulate_r_s"] > 0
    assert f"({sum(times.values()):.1f}s in all)" in report.format()


class ThreadsToy(toy.ToyPlugin):
    """Notes the intra-op thread count its clients train with."""

    name = "_threads_toy"
    seen: ClassVar[set[int]] = set()

    def client_update(self, down, state, data, ctx):
        ThreadsToy.seen.add(torch.get_num_threads())
        return super().client_update(down, state, data, ctx)


def test_the_check_runs_on_a_cell_s_thread_count_and_restores_torch_s(
    register, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a busy 2-core machine torch's default threads made a tiny step 20x slower (136 s for the
    scaffold's conformance test): the check runs as ``run`` runs a cell, on one thread."""
    monkeypatch.delenv("FSSL_CELL_THREADS", raising=False)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        report = check_method(register(ThreadsToy), rounds=1, knn=False, method_params=FAST)
        assert report.ok, report.format()
        assert ThreadsToy.seen == {1} and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_one_round_skips_resume_instead_of_passing_it_vacuously(register) -> None:
    """Stopping after round 1 of 1 resumes nothing: --rounds 1 says so and saves that simulation."""
    report = check_method(register(GoodToy), rounds=1, knn=False, method_params=FAST)
    assert report.ok, report.format()
    assert report.result("resume").status == "skip" and "2 rounds" in report.result("resume").detail
    assert "simulate_r_s" not in report.measurements


def test_an_upload_fold_is_checked_against_server_aggregate(register) -> None:
    report = check_method(register(FoldToy), knn=False, method_params=FAST)
    assert report.ok, report.format()
    assert (
        report.result("upload_fold").status == "pass"
        and "2 rounds" in report.result("upload_fold").detail
    )
    assert (
        report.result("upload_fold")
        and check_method(register(GoodToy), knn=False, method_params=FAST)
        .result("upload_fold")
        .status
        == "skip"
    )
    bad = check_method(register(BadFoldToy), knn=False, method_params=FAST)
    assert bad.failed == ["upload_fold"], bad.format()
    assert "differs from server_aggregate" in bad.result("upload_fold").detail
    forgetful = check_method(register(MetricsFoldToy), knn=False, method_params=FAST)
    assert forgetful.failed == ["upload_fold"], forgetful.format()


def test_the_declared_traffic_must_be_the_runner_s_count_to_the_byte(register) -> None:
    """Summed over each round's sampled clients (3 clients, 2 sampled a round), the declaration is
    the runner's own count; 4 bytes more in round 2 fail, naming the round and both figures; a
    method declaring nothing passes with the note that its rows will not be derived."""
    from benchmark.engine.traffic_sum import server_tensors

    good = check_method(register(DeclaredToy), knn=False, method_params=FAST)
    assert good.ok, good.format()
    detail = good.result("declared_traffic").detail
    # the model (no num_batches_tracked), up and down, for each of 2 sampled clients in 2 rounds
    cell = smoke_cell("_declared_toy", tasks=["knn"])
    from benchmark.engine.stages import build_method, input_spec, load_data

    method = build_method(cell, input_spec(load_data(cell)))
    from benchmark.engine.rounds import SimSettings, server_context

    settings = SimSettings(
        seed=cell.seed, num_rounds=2, local_epochs=1, per_round=2, device=torch.device("cpu")
    )
    model = server_tensors(method.init_server(server_context(settings, 0, None))).model_bytes()
    assert f"byte for byte in 2 rounds ({4 * model:,} bytes up, {4 * model:,} down)" in detail

    wrong = check_method(register(OverDeclaredToy), knn=False, method_params=FAST)
    assert wrong.failed == ["declared_traffic"], wrong.format()
    assert wrong.result("declared_traffic").detail == (
        f"round 2 upload: the runner counted {2 * model:,} bytes, declared_traffic sums to "
        f"{2 * model + 8:,} bytes over the round's 2 sampled client(s)"
    )

    for cls in (GoodToy, SilentToy):  # the MethodBase default, and an override returning None
        silent = check_method(register(cls), rounds=1, knn=False, method_params=FAST)
        assert silent.ok, silent.format()
        note = silent.result("declared_traffic")
        assert note.status == "pass" and '"traffic not derived"' in note.detail, note.detail

    grown = check_method(register(GrowingToy), knn=False, method_params=FAST)
    assert grown.failed == ["declared_traffic"], grown.format()
    assert grown.result("declared_traffic").detail.startswith(
        "model 'encoder.grown' is in the server state after 2 rounds (3 float32), not in the "
        "initial server state (1 of "
    )


def test_a_built_in_declaration_passes_check_method() -> None:
    """no_pretrain_bn: the random encoder down and each client's calibrated BN statistics up in
    round 1, nothing after (no training: the cheapest built-in that sends something)."""
    report = check_method("no_pretrain_bn", knn=False)
    assert report.ok, report.format()
    detail = report.result("declared_traffic").detail
    assert "byte for byte in 2 rounds" in detail and " 0 bytes up" not in detail, detail


def test_nondeterministic_method_fails_determinism(register) -> None:
    report = check_method(register(NondeterministicToy), knn=False, method_params=FAST)
    assert "determinism" in report.failed, report.format()
    assert "same seed, different payloads" in report.result("determinism").detail
    assert "FAILED" in report.format() and "determinism" in report.format()


def test_undeclared_tensor_fails_declared_payloads(register) -> None:
    report = check_method(register(LeakyToy), knn=False, method_params=FAST)
    assert report.failed == ["declared_payloads"], report.format()
    assert "debug.client_mean" in report.result("declared_payloads").detail


def test_state_hidden_in_the_method_object_fails_resume(register) -> None:
    report = check_method(register(HiddenStateToy), knn=False, method_params=FAST)
    assert "resume" in report.failed, report.format()
    assert "determinism" not in report.failed  # round 1 of two fresh instances still agrees


def test_client_state_outside_the_state_fails_resume(register) -> None:
    report = check_method(register(ForgetfulToy), knn=False, method_params=FAST)
    assert "resume" in report.failed, report.format()
    assert "client" in report.result("resume").detail


def test_uninformative_encoder_fails_knn(register) -> None:
    report = check_method(register(BlindToy), rounds=2)
    assert report.failed == ["knn_above_no_pretrain"], report.format()
    assert report.measurements["knn_top1"] <= report.measurements["knn_no_pretrain"]


def test_cli_exit_codes_and_report(register) -> None:
    from benchmark.cli import main

    assert main(["check-method", "no_pretrain"]) == 0
    assert main(["check-method", "no_such_method"]) == 2


@pytest.mark.slow
@pytest.mark.parametrize("name", METHODS.names())
def test_every_registered_method_conforms(name: str) -> None:
    """Structural conformance of every method (interface, finite losses, declared payloads,
    determinism, resume). The kNN-above-random-init check needs a training budget per method; it is
    exercised for the reference SSL method below and by `python -m benchmark check-method NAME`."""
    # 3 of 8 clients a round (check-method's default: 2 of 3, each with a third of the data): the
    # same 2 rounds, kill and resume, on an eighth of the data each (a method's structure does not
    # need more steps to show), with a client sampled on both sides of the kill (its restored state
    # is trained on again), clients that join in round 2 and clients left out
    clients, participation = 8, 0.375
    per_round = int(participation * clients)
    before, after = (set(sample_clients(0, r, clients, per_round)) for r in (1, 2))
    assert before & after and before ^ after and len(before | after) < clients
    report = check_method(name, knn=False, clients=clients, participation=participation)
    assert report.ok, report.format()


@pytest.mark.slow
def test_reference_method_beats_random_init() -> None:
    report = check_method("fedavg_simclr")
    assert report.ok, report.format()
    assert report.measurements["knn_top1"] > report.measurements["knn_no_pretrain"]


@pytest.mark.slow
def test_cli_subprocess_names_the_failure(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmark", "check-method", "no_pretrain"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "PASS  determinism" in proc.stdout and "SKIP  knn_above_no_pretrain" in proc.stdout
