"""The family bases of methods/_shared: FedAvg's server step written once (FedAvgServer) and the
federated-BYOL family where FedU and FedEMA write only ``merge`` and their client step (issue 58: a
method's file shows its own client step and loss call; the family keeps the loop)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from benchmark.api import Payload, ServerState, average_uploads
from methods._shared.aggregate import FedAvgServer
from methods._shared.fedbyol import FederatedBYOL
from methods.fedema import FedEMA
from methods.fedu import FedU

HOOKS = {
    "init_server",
    "init_client",
    "broadcast",
    "client_update",
    "server_aggregate",
    "upload_fold",
    "encoder",
    "merge",
    "build",
    "divergence_names",
    "bn_names",
    "start_tensors",
    "fedavg_weighting",
}


def _uploads() -> dict[int, Payload]:
    g = torch.Generator().manual_seed(0)
    return {
        k: Payload(
            {"w": torch.randn(4, 3, generator=g), "b": torch.randn(3, generator=g)}, num_examples=n
        )
        for k, n in ((5, 7), (2, 30), (9, 1))
    }


class _Avg(FedAvgServer):
    def __init__(self, weighting: str, merge: bool = True, folds: bool = True) -> None:
        self.cfg = SimpleNamespace(weighting=weighting)
        self.fedavg_merge, self._folds = merge, folds

    def fedavg_weighting(self) -> str:
        return self.cfg.weighting

    def fedavg_folds(self) -> bool:
        return self._folds


@pytest.mark.parametrize("weighting", ["num_examples", "uniform"])
@pytest.mark.parametrize("merge", [True, False])
@pytest.mark.parametrize("folds", [True, False])
def test_server_aggregate_is_fedavg_bit_for_bit(weighting: str, merge: bool, folds: bool) -> None:
    """All at once or folded, the server step is average_uploads of the uploads (client-id order,
    n_k or uniform weights), merged over the server tensors they name or alone."""
    ups = _uploads()
    server = ServerState(model={"w": torch.zeros(4, 3), "kept": torch.ones(2)}, extra={"x": 1})
    out = _Avg(weighting, merge, folds).server_aggregate(server, ups, None, None)
    avg = average_uploads(ups, weighting)
    want = {**server.model, **avg} if merge else avg
    assert set(out.model) == set(want) and out.extra == {"x": 1}
    for k in want:
        assert torch.equal(out.model[k], want[k]), k
    assert _Avg(weighting).server_aggregate(server, {}, None, None) is server


def test_the_fold_is_refused_where_the_clients_say_the_weights() -> None:
    assert (
        _Avg("num_examples", folds=False).upload_fold(ServerState(model={}), {1: 3}, None) is None
    )


def test_fedu_and_fedema_write_only_their_merge_and_client_step() -> None:
    """One home: every hook but ``merge`` is the family's; the family is abstract."""
    for cls in (FedU, FedEMA):
        assert cls.__bases__ == (FederatedBYOL,)
        assert HOOKS & set(vars(cls)) == {"merge", "client_update"}, cls.__name__
    assert "name" not in vars(FederatedBYOL)  # not a registered, concrete method
    with pytest.raises(NotImplementedError):
        FederatedBYOL.merge(SimpleNamespace(), None, None, None)


def test_the_simclr_family_is_the_home_of_fedavg_simclrs_hooks() -> None:
    """FedAvg-SimCLR writes only its client step (and whether the server folds), central_ssl no hook
    of its own; local_ssl writes only what isolation changes; the server weighs as upload_weighting
    says."""
    from methods._shared.simclr import SimCLRFamily
    from methods.baselines import CentralSSL, LocalSSL
    from methods.fedavg_simclr import FedAvgSimCLR

    for cls, own in ((FedAvgSimCLR, {"client_update"}), (CentralSSL, set())):
        assert cls.__bases__ == (FedAvgServer, SimCLRFamily)
        assert HOOKS & set(vars(cls)) == own, cls.__name__
    assert HOOKS & set(vars(LocalSSL)) == {
        "init_client",
        "broadcast",
        "start_tensors",
        "client_update",
        "server_aggregate",
        "encoder",
    }
    m = FedAvgSimCLR.__new__(FedAvgSimCLR)
    m.cfg = SimpleNamespace(weighting="num_batches")
    assert m.fedavg_weighting() == "num_examples" and m.upload_fold(None, {}, None) is None


@pytest.mark.parametrize(
    ("module", "loss"),
    [
        ("fedavg_simclr", "contrastive"),
        ("fedu", "byol_forward_loss"),
        ("fedema", "byol_forward_loss"),
    ],
)
def test_a_method_file_shows_its_client_step_and_loss_call(module: str, loss: str) -> None:
    """Issue 58: the researcher who wants to change a method's loss finds the call in the method's
    own file, in its ``client_update``, and that file imports the loss from the module that
    defines it (or names that module beside the call)."""
    import ast
    import importlib
    import inspect

    mod = importlib.import_module(f"methods.{module}")
    tree = ast.parse(inspect.getsource(mod))
    steps = [
        n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "client_update"
    ]
    assert len(steps) == 1, f"methods/{module}.py defines no client_update of its own"
    calls = {
        n.func.id
        for n in ast.walk(steps[0])
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
    }
    assert loss in calls, f"methods/{module}.py: client_update calls no {loss}"
