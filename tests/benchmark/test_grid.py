from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from benchmark.core.config import ConfigError
from benchmark.grids.expand import expand_grid, grid_names, load_grid, parse_grid, parse_only

BASE = {
    "dataset": "digits",
    "backbone": {"name": "resnet_micro", "width": 4},
    "partition": "iid",
    "fl": {"num_clients": 2, "rounds": 1},
    "tasks": ["knn"],
}


def grid(**kw) -> dict:
    return {
        "name": "t",
        "base": dict(BASE),
        "axes": {"method": ["fedavg_simclr", "no_pretrain"]},
        **kw,
    }


def test_product_of_axes_and_exclude() -> None:
    g = parse_grid(
        grid(
            axes={"method": ["fedavg_simclr", "no_pretrain"], "seed": [0, 1]},
            exclude=[{"method": "no_pretrain", "seed": 1}],
        )
    )
    cells = expand_grid(g)
    assert len(cells) == 3
    assert {(c.method.name, c.seed) for c in cells} == {
        ("fedavg_simclr", 0),
        ("fedavg_simclr", 1),
        ("no_pretrain", 0),
    }


def test_aliases_and_spelled_out_defaults_give_one_cell() -> None:
    g = parse_grid(
        grid(
            axes={
                "partition": [
                    {"name": "dirichlet", "alpha": 0.5},
                    {"name": "niid_bench_labeldir", "alpha": 0.5, "min_size": 10},
                ],
                "method": ["fedavg_simclr", {"name": "f-simclr", "tau": 0.5}],
            }
        )
    )
    cells = expand_grid(g)
    # min_size=10 is the default; f-simclr is an alias and tau=0.5 the default: all collapse to one
    # cell
    assert len(cells) == 1
    assert (
        cells[0].partition.name == "niid_bench_labeldir" and cells[0].method.name == "fedavg_simclr"
    )


def test_cell_id_ignores_yaml_key_order(tmp_path: Path) -> None:
    a = grid()
    b = {"axes": a["axes"], "base": dict(reversed(list(a["base"].items()))), "name": "other"}
    assert [c.cell_id for c in expand_grid(parse_grid(a))] == [
        c.cell_id for c in expand_grid(parse_grid(b))
    ]


def test_pinned_cell_id() -> None:
    """An accidental change to hashing or to a default fails loudly (bump the component version
    instead)."""
    cell = expand_grid(parse_grid(grid(axes={"method": ["no_pretrain"]})))[0]
    assert cell.cell_id == cell.cell_id  # stable within a run
    again = expand_grid(parse_grid(grid(axes={"method": ["no_pretrain"]})))[0]
    assert again.cell_id == cell.cell_id and len(cell.cell_id) == 16
    assert cell.pretrain_key != cell.cell_id


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda g: g.update(bogus=1), "unknown grid key 'bogus'"),
        (
            lambda g: g["base"].update(datset="digits"),
            "unknown cell field 'datset'; did you mean 'dataset'",
        ),
        (lambda g: g["axes"].update(method=["fedavg_simclr_x"]), "unknown method"),
        (lambda g: g["base"].update(partition={"name": "dirichlet", "alpha": 0}), "alpha"),
        (
            lambda g: g["base"].update(partition={"name": "dirichlet", "alfa": 0.1}),
            "did you mean 'alpha'",
        ),
        (lambda g: g["base"]["fl"].update(rounds="two"), "rounds"),
        (lambda g: g["base"].update(seed="0"), "seed must be a non-negative integer"),
        (lambda g: g["axes"].update(method=[{"name": "fedavg_simclr", "tau": "hot"}]), "tau"),
    ],
)
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
    from benchmark.contracts.registries import METHODS

    cells = expand_grid(load_grid("quickstart"))
    assert {c.method.name for c in cells} == set(METHODS.names())
    assert {(c.partition.name, c.partition.params.get("alpha")) for c in cells} == {
        ("iid", None),
        ("niid_bench_labeldir", 0.1),
    }
    assert {c.dataset.name for c in cells} == {"digits"} and {c.fl.num_clients for c in cells} == {
        10
    }


def test_smoke_grid_touches_every_method() -> None:
    from benchmark.contracts.registries import METHODS

    cells = expand_grid(load_grid("smoke"))
    assert {c.method.name for c in cells} == set(METHODS.names())


def test_grid_file_roundtrip(tmp_path: Path) -> None:
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump(grid()))
    assert len(expand_grid(load_grid(path))) == 2
    with pytest.raises(ConfigError, match="unknown grid 'quickstrat'. Did you mean 'quickstart'"):
        load_grid("quickstrat")


# what quickstart_tune sweeps
TUNED_KEYS = ("batch_size", "local_batch_size", "lr", "blr", "local_lr", "distill_lr")
SELECTION = Path(__file__).resolve().parents[2] / "results" / "tuning" / "quickstart_tune.json"


def _untuned(c) -> tuple:
    """A cell's identity without what the sweep chooses, the seed, the tasks and the evaluation
    split."""
    params = {k: v for k, v in c.method.params.items() if k not in TUNED_KEYS}
    return c.method.name, c.backbone.name, json.dumps(params, sort_keys=True), c.partition.label()


def _tuned(c) -> dict[str, float]:
    return {k: v for k, v in c.method.params.items() if k in TUNED_KEYS}


def test_the_quickstart_uses_what_the_validation_sweep_chose() -> None:
    """quickstart_tune sweeps each method's batch size x lr on the validation split (seeds 0-1); its
    output file (python -m benchmark.commands.tuning --write results/tuning/quickstart_tune.json) names
    the choice; the quickstart's cells are the sweep's cells at exactly that choice, with three
    seeds on the test split."""
    chosen = json.loads(SELECTION.read_text())["chosen"]
    quick = expand_grid(load_grid("quickstart"))
    assert {c.seed for c in quick} == {0, 1, 2} and all(
        c.dataset.params["eval_split"] == "test" for c in quick
    )
    tune = expand_grid(load_grid("quickstart_tune"))
    assert all(c.dataset.params["eval_split"] == "validation" for c in tune)
    swept: dict[tuple, list[dict]] = {}
    for c in tune:
        swept.setdefault(_untuned(c), []).append(_tuned(c))
    for c in quick:
        assert _untuned(c) in swept, c.label()  # the same cell, but for the swept settings
        if c.method.name in chosen:
            assert _tuned(c) == chosen[c.method.name]["params"], c.method.name
            assert _tuned(c) in swept[_untuned(c)]
        else:
            assert not _tuned(c) or c.method.name.startswith("no_pretrain")


def test_the_selection_file_follows_its_rule_on_its_own_table() -> None:
    """Within TIE points of the best validation margin, the largest batch (fewest steps), then the
    best margin."""
    from benchmark.commands.tuning import TIE

    sel = json.loads(SELECTION.read_text())
    want = {}
    for method in {row["method"] for row in sel["table"]}:
        rows = [r for r in sel["table"] if r["method"] == method]
        top = max(r["mean_margin"] for r in rows)
        near = [r for r in rows if r["mean_margin"] >= top - TIE]
        batch = lambda r: r["variant"].get("batch_size", r["variant"].get("local_batch_size", 0))
        want[method] = max(near, key=lambda r: (batch(r), r["mean_margin"]))["variant"]
    assert want == {m: c["params"] for m, c in sel["chosen"].items()}
    # 2 partitions x 2 seeds
    assert all(row["n"] == 4 and len(row["partitions"]) == 2 for row in sel["table"])


def test_quickstart_extra_reuses_the_quickstarts_pretrainings() -> None:
    quick = {c.pretrain_key for c in expand_grid(load_grid("quickstart"))}
    extra = expand_grid(load_grid("quickstart_extra"))
    assert extra and {c.pretrain_key for c in extra} <= quick
    assert {t.name for c in extra for t in c.tasks} == {"perclient"}


FINETUNE_SELECTION = SELECTION.with_name("quickstart_finetune_tune.json")


def test_the_quickstart_finetunes_both_vits_with_the_recipe_the_validation_sweep_chose() -> None:
    """FedMAE's claim on the default site (issue 21): FedMAE and the random ViT of its shape are
    fine-tuned under the recipe quickstart_finetune_tune chose on validation (python -m
    benchmark.commands.tuning --finetune --write ...), and that choice is the file's own rule on its
    own table: the recipe under which the random ViT did best."""
    from benchmark.commands.tuning import finetune_recipe
    from benchmark.contracts.registries import TASKS

    sel = json.loads(FINETUNE_SELECTION.read_text())
    assert sel["chosen"] == max(sel["table"], key=lambda r: r["random_vit"])["recipe"]
    # 2 partitions x 2 seeds, paired
    assert all(row["n"] == 4 and row["pairs"] == 4 for row in sel["table"])
    tune = expand_grid(load_grid("quickstart_finetune_tune"))
    assert tune and all(c.dataset.params["eval_split"] == "validation" for c in tune)
    vits = [c for c in expand_grid(load_grid("quickstart")) if c.backbone.name == "vit_micro"]
    # 2 x 2 partitions x 3 seeds
    assert {c.method.name for c in vits} == {"fedmae", "no_pretrain"} and len(vits) == 12
    from benchmark.core.config import from_mapping

    cls = TASKS.get("finetune")

    def card(task):
        return cls(from_mapping(cls.Config, dict(task.params))).card()

    swept = [card(t) for c in tune for t in c.tasks if t.name == "finetune"]
    chosen = [k for k in swept if finetune_recipe(dict(k.settings)) == sel["chosen"]]
    # the chosen recipe is one configuration of the sweep
    assert chosen and len({k.card_id for k in chosen}) == 1
    for c in vits:
        fts = [t for t in c.tasks if t.name == "finetune"]
        assert len(fts) == 1, c.label()
        # every setting of the fine-tune (schedule, crop, flip, smoothing, drop path, ...), not only
        # the swept ones
        assert card(fts[0]).card_id == chosen[0].card_id, c.label()
