"""The family bases of methods/_shared: FedAvg's server step written once (FedAvgServer), the SimCLR
family and the federated-BYOL family where FedU and FedEMA write only ``merge`` and their client
step; and, for every registered in-tree method, issue 58's rule: the method's own file shows its
client step and the loss it calls (the families keep the loop, never the step)."""

from __future__ import annotations

import ast
import inspect
from types import SimpleNamespace

import pytest
import torch

from benchmark.api import METHODS, Payload, ServerState, average_uploads
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
    """FedAvg-SimCLR and central_ssl write only their client step (and whether the server folds);
    local_ssl writes its client step and what isolation changes; the server weighs as
    upload_weighting says."""
    from methods._shared.simclr import SimCLRFamily
    from methods.baselines import CentralSSL, LocalSSL
    from methods.fedavg_simclr import FedAvgSimCLR

    for cls, own in ((FedAvgSimCLR, {"client_update"}), (CentralSSL, {"client_update"})):
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


# Issue 58: every registered in-tree method -> the losses its client step calls, found from the
# method's own file: called in its ``client_update``, in a function or method of the same file that
# it calls, or through a local name bound there (``contrastive = CONTRASTIVE_LOSSES[...]``). A new
# method adds its row (the test below fails until it does).
CLIENT_LOSSES: dict[str, set[str]] = {
    "fedavg_simclr": {"CONTRASTIVE_LOSSES"},  # NT-Xent (or crossview_1dir), two views
    "central_ssl": {"CONTRASTIVE_LOSSES"},
    "local_ssl": {"CONTRASTIVE_LOSSES"},
    "flesd": {"CONTRASTIVE_LOSSES"},  # its local SimCLR step (the distillation is the server's)
    "featarc": {"CONTRASTIVE_LOSSES", "alignment_loss"},  # SimCLR + λ · L_align
    "fedu": {"byol_forward_loss"},
    "fedema": {"byol_forward_loss"},
    "fedmae": {"mae_loss"},
    "orchestra": {"cluster_assignment_loss", "cross_entropy"},  # + the rotation loss
    "dec_sl": {"cross_entropy"},  # supervised FedAvg
}
# Reference points that train nothing: they have a client step of their own, and it calls no loss
# and runs no local epochs.
NO_TRAINING: dict[str, str] = {
    "no_pretrain": "the seeded random initialisation: its client step uploads nothing",
    "no_pretrain_bn": "no_pretrain's weights with BN statistics re-estimated by forward passes on "
    "each client's images (calibrate_bn): no loss, no gradient",
    "pixels": "the features are the pixels: its client step uploads nothing",
}
ALL_LOSSES = set().union(*CLIENT_LOSSES.values())


def in_tree_methods() -> list[str]:
    import methods  # noqa: F401  (registers every in-tree method)

    return sorted(n for n in METHODS.names() if METHODS.get(n).__module__.startswith("methods."))


def client_step_calls(cls: type) -> tuple[dict[str, str], dict[str, str]]:
    """What the client step of ``cls`` calls, read from its own file: every call in its
    ``client_update`` and in the functions and methods of that file it reaches (name -> the name
    it is reached through: itself, or ``F`` for ``F.cross_entropy``), a local name bound to a name
    or a subscript of one read as that name; and the file's imported and defined names (name ->
    where from)."""
    tree = ast.parse(inspect.getsource(inspect.getmodule(cls)))
    funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    (body,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls.__name__]
    meths = {n.name: n for n in body.body if isinstance(n, ast.FunctionDef)}
    homes = {name: "this file" for name in funcs}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            homes.update({a.asname or a.name: node.module or "" for a in node.names})
        elif isinstance(node, ast.Import):
            homes.update({a.asname or a.name: a.name for a in node.names})
    todo, seen = [meths["client_update"]], set()
    alias: dict[str, str] = {}
    calls: dict[str, str] = {}
    while todo:
        fn = todo.pop()
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        for n in ast.walk(fn):
            if isinstance(n, ast.Assign) and len(n.targets) == 1:
                target, value = n.targets[0], n.value
                value = value.value if isinstance(value, ast.Subscript) else value
                if isinstance(target, ast.Name) and isinstance(value, ast.Name):
                    alias[target.id] = value.id
            if not isinstance(n, ast.Call):
                continue
            f = n.func
            if isinstance(f, ast.Name):
                calls[f.id] = f.id
                todo += [funcs[f.id]] if f.id in funcs else []
            elif isinstance(f, ast.Attribute):
                calls[f.attr] = f.value.id if isinstance(f.value, ast.Name) else f.attr
                if isinstance(f.value, ast.Name) and f.value.id == "self" and f.attr in meths:
                    todo.append(meths[f.attr])
    return {alias.get(c, c): alias.get(via, via) for c, via in calls.items()}, homes


def test_every_in_tree_method_is_listed_once() -> None:
    assert not set(CLIENT_LOSSES) & set(NO_TRAINING)
    assert in_tree_methods() == sorted({*CLIENT_LOSSES, *NO_TRAINING})


@pytest.mark.parametrize("name", in_tree_methods())
def test_a_method_file_shows_its_client_step_and_loss_call(name: str) -> None:
    """Issue 58: the researcher who wants to change a method's loss finds the call from the method's
    own file: its class writes ``client_update`` (no shared family of methods/ holds one), and that
    step calls the method's loss, imported from the module that defines it or defined in the file.
    A reference point that trains nothing says so (it declares no pre-training) and calls none."""
    cls = METHODS.get(name)
    assert "client_update" in vars(cls), f"{cls.__module__}.{cls.__name__} writes no client_update"
    for base in cls.__mro__[1:]:
        if base.__module__.startswith("methods."):
            assert "client_update" not in vars(base), f"{base.__name__} holds the client step"
    calls, homes = client_step_calls(cls)
    if name in NO_TRAINING:
        assert cls.pretrains is False, f"{name} trains: list its loss in CLIENT_LOSSES"
        assert not set(calls) & (ALL_LOSSES | {"run_local_epochs", "local_update", "backward"}), (
            name
        )
        return
    assert cls.pretrains is True
    for loss in sorted(CLIENT_LOSSES[name]):
        assert loss in calls, f"{cls.__module__}: client_update reaches no call of {loss}"
        # one hop: the file defines the loss or imports it (or its module) by name
        assert calls[loss] in homes, f"{cls.__module__}: {loss} neither imported nor defined"


def test_the_client_step_reader_follows_the_file_and_nothing_else() -> None:
    """The reader itself: it follows a function of the method's file and a local alias, and never
    into another file (what only a family calls is not seen)."""
    from methods.baselines import CentralSSL, DecSL
    from methods.fedavg_simclr import FedAvgSimCLR

    calls, homes = client_step_calls(CentralSSL)
    assert {"simclr_batch_loss", "CONTRASTIVE_LOSSES", "two_views", "local_update"} <= set(calls)
    assert homes["CONTRASTIVE_LOSSES"] == "methods._shared.losses"
    assert homes["simclr_batch_loss"] == "this file"
    calls, _ = client_step_calls(FedAvgSimCLR)
    assert "local_update" in calls and "run_local_epochs" not in calls  # the family's loop
    calls, homes = client_step_calls(DecSL)
    assert calls["cross_entropy"] == "F" and homes["F"] == "torch.nn.functional"
