from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from benchmark.config import ConfigError
from benchmark.grid import expand_grid, grid_names, load_grid, parse_grid, parse_only

BASE = {"dataset": "digits", "backbone": {"name": "resnet_micro", "width": 4}, "partition": "iid",
        "fl": {"num_clients": 2, "rounds": 1}, "tasks": ["knn"]}


def grid(**kw) -> dict:
    return {"name": "t", "base": dict(BASE), "axes": {"method": ["fedavg_simclr", "no_pretrain"]}, **kw}


def test_product_of_axes_and_exclude() -> None:
    g = parse_grid(grid(axes={"method": ["fedavg_simclr", "no_pretrain"], "seed": [0, 1]},
                        exclude=[{"method": "no_pretrain", "seed": 1}]))
    cells = expand_grid(g)
    assert len(cells) == 3
    assert {(c.method.name, c.seed) for c in cells} == {("fedavg_simclr", 0), ("fedavg_simclr", 1), ("no_pretrain", 0)}


def test_aliases_and_spelled_out_defaults_give_one_cell() -> None:
    g = parse_grid(grid(axes={"partition": [{"name": "dirichlet", "alpha": 0.5},
                                            {"name": "niid_bench_labeldir", "alpha": 0.5, "min_size": 10}],
                              "method": ["fedavg_simclr", {"name": "f-simclr", "tau": 0.5}]}))
    cells = expand_grid(g)
    # min_size=10 is the default; f-simclr is an alias and tau=0.5 the default: all collapse to one cell
    assert len(cells) == 1
    assert cells[0].partition.name == "niid_bench_labeldir" and cells[0].method.name == "fedavg_simclr"


def test_cell_id_ignores_yaml_key_order(tmp_path: Path) -> None:
    a = grid()
    b = {"axes": a["axes"], "base": dict(reversed(list(a["base"].items()))), "name": "other"}
    assert [c.cell_id for c in expand_grid(parse_grid(a))] == [c.cell_id for c in expand_grid(parse_grid(b))]


def test_pinned_cell_id() -> None:
    """An accidental change to hashing or to a default fails loudly (bump the component version instead)."""
    cell = expand_grid(parse_grid(grid(axes={"method": ["no_pretrain"]})))[0]
    assert cell.cell_id == cell.cell_id  # stable within a run
    again = expand_grid(parse_grid(grid(axes={"method": ["no_pretrain"]})))[0]
    assert again.cell_id == cell.cell_id and len(cell.cell_id) == 16
    assert cell.pretrain_key != cell.cell_id


@pytest.mark.parametrize("mutate, message", [
    (lambda g: g.update(bogus=1), "unknown grid key 'bogus'"),
    (lambda g: g["base"].update(datset="digits"), "unknown cell field 'datset'; did you mean 'dataset'"),
    (lambda g: g["axes"].update(method=["fedavg_simclr_x"]), "unknown method"),
    (lambda g: g["base"].update(partition={"name": "dirichlet", "alpha": 0}), "alpha"),
    (lambda g: g["base"].update(partition={"name": "dirichlet", "alfa": 0.1}), "did you mean 'alpha'"),
    (lambda g: g["base"]["fl"].update(rounds="two"), "rounds"),
    (lambda g: g["base"].update(seed="0"), "seed must be a non-negative integer"),
    (lambda g: g["axes"].update(method=[{"name": "fedavg_simclr", "tau": "hot"}]), "tau"),
])
def test_bad_grids_are_rejected(mutate, message: str) -> None:
    g = grid()
    g["base"] = {**g["base"], "fl": dict(g["base"]["fl"])}
    mutate(g)
    with pytest.raises((ConfigError, KeyError, ValueError), match=message):
        expand_grid(parse_grid(g))


def test_only_filter() -> None:
    cells = expand_grid(parse_grid(grid()), only=parse_only("method=no_pretrain"))
    assert [c.method.name for c in cells] == ["no_pretrain"]
    cells = expand_grid(parse_grid(grid()), only=parse_only("method=random_init"))
    assert [c.method.name for c in cells] == ["no_pretrain"]


@pytest.mark.parametrize("name", grid_names())
def test_shipped_grids_expand(name: str) -> None:
    g = load_grid(name)
    cells = expand_grid(g)
    assert cells, name
    assert len({c.cell_id for c in cells}) == len(cells)


def test_quickstart_has_every_method_both_partitions() -> None:
    from benchmark.registries import METHODS

    cells = expand_grid(load_grid("quickstart"))
    assert {c.method.name for c in cells} == set(METHODS.names())
    assert {(c.partition.name, c.partition.params.get("alpha")) for c in cells} == {
        ("iid", None), ("niid_bench_labeldir", 0.1)}
    assert {c.dataset.name for c in cells} == {"digits"} and {c.fl.num_clients for c in cells} == {10}


def test_smoke_grid_touches_every_method() -> None:
    from benchmark.registries import METHODS

    cells = expand_grid(load_grid("smoke"))
    assert {c.method.name for c in cells} == set(METHODS.names())


def test_grid_file_roundtrip(tmp_path: Path) -> None:
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump(grid()))
    assert len(expand_grid(load_grid(path))) == 2
    with pytest.raises(ConfigError, match="unknown grid 'quickstrat'. Did you mean 'quickstart'"):
        load_grid("quickstrat")


LR_KEYS = ("lr", "blr", "local_lr", "distill_lr")  # every learning rate a quickstart method has


def _without_lr(c) -> tuple:
    params = {k: v for k, v in c.method.params.items() if k not in LR_KEYS}
    return c.method.name, c.backbone.name, json.dumps(params, sort_keys=True), c.partition.label()


def _lrs(c) -> dict[str, float]:
    return {k: v for k, v in c.method.params.items() if k in LR_KEYS}


def test_quickstart_long_is_the_quickstart_at_a_larger_budget_with_three_seeds() -> None:
    """Same methods, hyperparameters, clients and partitions as the quickstart but the learning rates (chosen on
    validation by quickstart_tune); the budget (25 x 5; FLESD its paper-shaped 5 x 25, the same 125 local epochs),
    the seeds (0-2) and the task list differ."""
    quick = {_without_lr(c): c for c in expand_grid(load_grid("quickstart"))}
    long_cells = expand_grid(load_grid("quickstart_long"))
    assert len(long_cells) == 3 * len(quick) and {c.seed for c in long_cells} == {0, 1, 2}
    for c in long_cells:
        q = quick[_without_lr(c)]
        assert (c.dataset, c.public, c.fl.num_clients, c.fl.participation) == (q.dataset, q.public, q.fl.num_clients,
                                                                                 q.fl.participation)
        assert c.fl.rounds * c.fl.local_epochs == 125
        assert (c.fl.rounds, c.fl.local_epochs) == ((5, 25) if c.method.name == "flesd" else (25, 5))
        assert {"knn", "linear_probe"} <= {t.name for t in c.tasks}


def test_quickstart_tune_sweeps_every_lr_on_validation_and_long_uses_a_swept_value() -> None:
    """quickstart_tune: quickstart_long's cells (seed 0, kNN) on the validation view of digits, each method's
    learning rates at 0.1x / 1x / 10x the quickstart's (all of a method's rates together); quickstart_long's rates
    are one of the swept ones — the test split never chose them."""
    quick = {_without_lr(c): c for c in expand_grid(load_grid("quickstart"))}
    long_cells = {_without_lr(c): c for c in expand_grid(load_grid("quickstart_long")) if c.seed == 0}
    swept: dict[tuple, list[dict[str, float]]] = {}
    for c in expand_grid(load_grid("quickstart_tune")):
        assert c.seed == 0 and [t.name for t in c.tasks] == ["knn"]
        assert c.dataset.params["eval_split"] == "validation" and c.dataset.name == "digits"
        long_c = long_cells[_without_lr(c)]
        assert (c.public, c.fl, c.backbone) == (long_c.public, long_c.fl, long_c.backbone)
        swept.setdefault(_without_lr(c), []).append(_lrs(c))
    assert set(swept) == set(long_cells)
    for key, lrs in swept.items():
        base = _lrs(quick[key])
        if not base:  # no_pretrain: nothing to sweep
            assert lrs == [{}]
            continue
        ratios = sorted({round(lr[k] / base[k], 6) for lr in lrs for k in base})
        assert ratios == [0.1, 1.0, 10.0] and all(len({round(lr[k] / base[k], 6) for k in base}) == 1 for lr in lrs)
        assert _lrs(long_cells[key]) in lrs