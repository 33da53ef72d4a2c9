from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmark.records.identity import cell_id_of
from benchmark.records.integrity import seal
from benchmark.records.schema import (
    SCHEMA_VERSION,
    CommStats,
    ComputeStats,
    EnvInfo,
    ProtocolCard,
    RecordError,
    ResultRecord,
    TaskScores,
    from_json,
    to_json,
)
from benchmark.records.store import RecordExists, collect, load_records, write_record

CELL = {
    "dataset": {"name": "digits", "version": "1", "params": {}},
    "backbone": {"name": "resnet_micro", "version": "1", "params": {"width": 4}},
    "method": {"name": "fedavg_simclr", "version": "1", "params": {}},
    "partition": {"name": "iid", "version": "1", "params": {}},
    "partition_seed": 0,
    "public": None,
    "fl": {"num_clients": 2, "participation": 1.0, "rounds": 1, "local_epochs": 1},
    "seed": 0,
    "tasks": [{"name": "knn", "version": "1", "params": {"k": 200}}],
}


def record(**kw) -> ResultRecord:
    card = ProtocolCard(
        task="knn", version="1", settings={"k": 200, "selection": "final"}, name="knn@v1"
    )
    base = dict(
        schema_version=SCHEMA_VERSION,
        cell_id=cell_id_of(CELL),
        pretrain_key="p" * 16,
        cell=CELL,
        method="fedavg_simclr",
        method_version="1",
        dataset="digits",
        dataset_revision="r",
        seed=0,
        partition_label="iid",
        partition_digest="d" * 64,
        partition_stats={"size_min": 3},
        backbone_fingerprint="f",
        status="ok",
        rounds_completed=1,
        scores=(
            TaskScores(
                task="knn",
                card=card,
                main_metric="top1",
                higher_is_better=True,
                values={"top1": 81.5},
            ),
        ),
        comm=CommStats(bytes_up=10, bytes_down=10, per_round_up=(10,), per_round_down=(10,)),
        compute=ComputeStats(wall_time_s=1.0),
        final_state_digest="s",
        env=EnvInfo(),
        created_at="2026-01-01T00:00:00",
    )
    base.update(kw)
    return seal(ResultRecord(**base))


def test_roundtrip_is_byte_identical() -> None:
    r = record()
    text = to_json(r)
    assert from_json(text) == r
    assert to_json(from_json(text)) == text


def test_card_id_changes_with_settings_not_name() -> None:
    a = ProtocolCard(task="knn", version="1", settings={"k": 200}, name="x")
    assert (
        a.card_id
        == ProtocolCard(task="knn", version="1", settings={"k": 200}, name="y", summary="z").card_id
    )
    assert a.card_id != ProtocolCard(task="knn", version="1", settings={"k": 20}).card_id
    assert not a.selects_on_test
    assert ProtocolCard(
        task="knn", version="1", settings={"selection": "best_epoch_test"}
    ).selects_on_test


@pytest.mark.parametrize(
    "text",
    ["", "{", "[1, 2]", json.dumps({"schema_version": 99}), json.dumps({"schema_version": "1"})],
)
def test_malformed_records_raise_record_error(text: str) -> None:
    with pytest.raises(RecordError):
        from_json(text)


def test_unknown_keys_and_bad_scores_are_rejected() -> None:
    raw = json.loads(to_json(record()))
    raw["surprise"] = 1
    with pytest.raises(RecordError, match="unknown keys"):
        from_json(json.dumps(raw))
    with pytest.raises(RecordError):
        TaskScores(
            task="knn",
            card=record().scores[0].card,
            main_metric="top5",
            higher_is_better=True,
            values={"top1": 1.0},
        )


def test_write_is_atomic_and_immutable(tmp_path: Path) -> None:
    path = tmp_path / "r" / "record.json"
    write_record(path, record())
    with pytest.raises(RecordExists):
        write_record(path, record())
    assert not list(path.parent.glob("*.tmp"))


def test_collect_validates_and_skips_bad_files(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    write_record(runs / "fedavg_simclr" / "x" / "record.json", record())
    (runs / "broken").mkdir(parents=True)
    (runs / "broken" / "record.json").write_text("{not json")
    forged = record(cell_id="0" * 16)
    write_record(runs / "fedavg_simclr" / "y" / "record.json", forged)
    copied, skipped = collect(runs, tmp_path / "results")
    assert [p.name for p in copied] == [f"{cell_id_of(CELL)}.json"]
    assert len(skipped) == 2 and any("does not match" in s.reason for s in skipped)
    good, bad = load_records([tmp_path / "results"])
    assert len(good) == 1 and not bad
    again, _ = collect(runs, tmp_path / "results")  # idempotent
    assert again == []


def test_env_records_the_cpu_thread_count_and_old_records_still_load() -> None:
    """The intra-op thread count changes CPU reductions, hence numbers: it is provenance; records
    written before the field existed load with 0 (not recorded)."""
    import torch

    from benchmark.records.env_info import collect_env

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert collect_env().threads == 1
    finally:
        torch.set_num_threads(before)
    raw = json.loads(to_json(record(env=EnvInfo(threads=2))))
    assert from_json(json.dumps(raw)).env.threads == 2
    del raw["env"]["threads"]
    assert from_json(json.dumps(raw)).env.threads == 0


def test_task_failures_default_empty_and_round_trip() -> None:
    rec = record(task_failures={"semisup_native-abc": "Diverged: loss is nan"})
    again = from_json(to_json(rec))
    assert again.task_failures == {"semisup_native-abc": "Diverged: loss is nan"}
    raw = json.loads(to_json(record()))
    del raw["task_failures"]
    assert from_json(json.dumps(raw)).task_failures == {}


def test_env_records_the_machine_model_and_old_records_still_load(monkeypatch) -> None:
    """The hardware model behind a number (CPU model, or the CUDA device's name) is provenance the
    leaderboard shows beside compute; records written before the field existed load with "" (not
    recorded)."""
    import sys
    import types

    from benchmark.records import env_info as env_mod

    monkeypatch.setattr(env_mod, "_cpu_model", lambda: "Test CPU 3000")
    assert env_mod.collect_env().machine == "Test CPU 3000"
    fake = types.SimpleNamespace(
        cuda=types.SimpleNamespace(get_device_name=lambda dev: f"Fake GPU on {dev}")
    )
    monkeypatch.setitem(sys.modules, "torch", fake)
    assert env_mod.machine_model("cuda:0") == "Fake GPU on cuda:0"
    assert env_mod.machine_model("cpu") == "Test CPU 3000"
    raw = json.loads(to_json(record(env=EnvInfo(machine="Test CPU 3000"))))
    assert from_json(json.dumps(raw)).env.machine == "Test CPU 3000"
    del raw["env"]["machine"]
    assert from_json(json.dumps(raw)).env.machine == ""


def test_cpu_model_is_read_from_proc_cpuinfo(tmp_path, monkeypatch) -> None:
    import platform

    from benchmark.records import env_info as env_mod

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: X\nmodel name\t: Test CPU 3000 @ 2.0GHz\n")
    monkeypatch.setattr(env_mod, "CPUINFO", cpuinfo)
    assert env_mod._cpu_model() == "Test CPU 3000 @ 2.0GHz"
    # not Linux: the platform's own answer
    monkeypatch.setattr(env_mod, "CPUINFO", tmp_path / "absent")
    assert env_mod._cpu_model() == platform.processor()


def _seeded(seed: int, env: EnvInfo) -> ResultRecord:
    cell = {**CELL, "seed": seed}
    return record(cell=cell, cell_id=cell_id_of(cell), seed=seed, env=env)


def test_the_release_check_refuses_records_of_a_dirty_tree(tmp_path: Path) -> None:
    """``collect --release``: a record made from a tree with uncommitted changes, or without a
    commit, is not released; a clean one is. Without ``--release`` (a private results folder) all
    three are collected."""
    from benchmark.cli import main

    runs = tmp_path / "runs"
    sha = "a" * 40
    made = {
        "clean": _seeded(0, EnvInfo(git_sha=sha)),
        "dirty": _seeded(1, EnvInfo(git_sha=sha, git_dirty=True)),
        "nosha": _seeded(2, EnvInfo()),
    }
    for name, r in made.items():
        write_record(runs / name / "record.json", r)
    copied, skipped = collect(runs, tmp_path / "released", release=True)
    released = load_records([tmp_path / "released"])[0]
    assert len(copied) == 1 and [r.seed for _, r in released] == [0]
    reasons = [s.reason for s in skipped]
    assert len(reasons) == 2
    assert any("uncommitted changes" in r for r in reasons)
    assert any("no commit recorded" in r for r in reasons)
    cli = ["collect", "--from", str(runs), "--results", str(tmp_path / "cli"), "--release"]
    assert main(cli) == 0
    assert [r.seed for _, r in load_records([tmp_path / "cli"])[0]] == [0]
    everything, _ = collect(runs, tmp_path / "private")
    assert len(everything) == 3
