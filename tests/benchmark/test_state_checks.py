"""Issue 47: client state that is saved but not used passed check-method. FedMoCo (a per-client
queue, its pointer and a momentum key network, tests/plugins/fssl_moco_plugin/) passes the state
checks; each of its three broken copies fails ``state_read`` naming the piece it ignores, and
check-method fails with them even with ``--rounds 1`` (which skips the resume check)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch

from benchmark.commands.state_checks import check_client_state, drive_client, perturb, pieces
from benchmark.contracts.registries import METHODS, load_builtins

PLUGIN_SRC = Path(__file__).resolve().parents[1] / "plugins" / "fssl_moco_plugin" / "src"


@pytest.fixture(scope="module")
def moco() -> Iterator[Any]:
    """The fixture package's module, its four classes registered as an installed plugin's would
    be (without pip: tests/integration/test_plugin.py installs plugins for real)."""
    import importlib
    import sys

    load_builtins()
    sys.path.insert(0, str(PLUGIN_SRC))
    module = importlib.import_module("fssl_moco_plugin.method")
    classes = (module.FedMoCo, module.QueueReinitialised, module.PointerReset)
    classes += (module.KeyFromBroadcast, _not_written_back(module))
    for cls in classes:
        METHODS._items[cls.name] = cls
    try:
        yield module
    finally:
        for cls in classes:
            METHODS._items.pop(cls.name, None)
        sys.path.remove(str(PLUGIN_SRC))


def _results(name: str) -> dict[str, Any]:
    rs = check_client_state(name, METHODS.get(name), method_params=None)
    return {r.name: r for r in rs}


def test_fedmoco_reads_and_carries_every_piece_of_its_state(moco: Any) -> None:
    results = _results("fedmoco")
    assert results["state_read"].status == "pass", results["state_read"].detail
    assert "['key', 'queue', 'queue_ptr']" in results["state_read"].detail
    assert results["state_evolves"].status == "pass", results["state_evolves"].detail


@pytest.mark.parametrize(
    ("name", "piece"),
    [
        ("fedmoco_queue_reset", "['queue']"),
        ("fedmoco_ptr_reset", "['queue_ptr']"),
        ("fedmoco_key_from_broadcast", "['key']"),
    ],
)
def test_each_broken_copy_fails_naming_the_piece_it_ignores(
    moco: Any, name: str, piece: str
) -> None:
    result = _results(name)["state_read"]
    assert result.status == "fail"
    assert f"client state {piece} is saved but not read" in result.detail


def _not_written_back(module: Any) -> type:
    """FedMoCo returning the queue it was given: read, never updated."""

    class Frozen(module.FedMoCo):
        name: ClassVar[str] = "fedmoco_not_written_back"

        def client_update(self, down, state, data, ctx):  # type: ignore[no-untyped-def]
            up, new = super().client_update(down, state, data, ctx)
            kept = {**new.tensors, "queue": state.tensors["queue"]}
            return up, dataclasses.replace(new, tensors=kept)

    return Frozen


def test_a_state_read_but_never_written_back_fails_state_evolves(moco: Any) -> None:
    results = _results("fedmoco_not_written_back")
    assert results["state_read"].status == "pass"  # the queue is read: it shapes the upload
    assert results["state_evolves"].status == "fail"
    assert "client state ['queue'] is the same after the client's rounds 1 and 2" in (
        results["state_evolves"].detail
    )


def test_check_method_fails_a_broken_copy_even_with_one_round(moco: Any) -> None:
    """The call site in check_method: before issue 47 every other check passed this copy."""
    from benchmark.commands.check_method import check_method

    # 2 of 10 clients (check-method's default: 2 of 3): the round's simulations are the other
    # checks'; what is tested is that check-method reports state_read, whose cell is its own
    report = check_method("fedmoco_ptr_reset", rounds=1, knn=False, clients=10, participation=0.2)
    assert report.failed == ["state_read"], report.format()
    assert report.result("resume").status == "skip"


def test_drive_client_gives_a_clients_two_rounds(moco: Any) -> None:
    """The helper a method author's own state tests use: one client alone for two rounds, and round
    2 again from an edited state."""
    trace = drive_client("fedmoco", client_id=1)
    assert len(trace.states) == 3 and len(trace.uploads) == 2 and len(trace.servers) == 3
    assert [s.last_round for s in trace.states] == [None, 1, 2]
    q0, q1, q2 = (s.tensors["queue"] for s in trace.states)
    assert not torch.equal(q0, q1) and not torch.equal(q1, q2)
    up, _ = trace.rerun(2, trace.states[1])
    assert all(torch.equal(up.tensors[k], trace.uploads[1].tensors[k]) for k in up.tensors)


def test_perturbation_moves_every_tensor_and_keeps_an_index_in_range() -> None:
    t = {
        "q": torch.zeros(3, 2),
        "ptr": torch.tensor(0),
        "last": torch.tensor(7),
        "mask": torch.tensor([True, False]),
    }
    out = perturb(t, list(t))
    assert not torch.equal(out["q"], t["q"]) and out["q"].dtype == t["q"].dtype
    assert int(out["ptr"]) == 1 and int(out["last"]) == 6
    assert out["mask"].tolist() == [False, True]
    assert pieces(["key.a.w", "key.b", "queue", "queue_ptr"]) == {
        "key": ["key.a.w", "key.b"],
        "queue": ["queue"],
        "queue_ptr": ["queue_ptr"],
    }
