"""``benchmark doctor`` on the CPU: the fp32 / bf16 pair per method, side by side with the ratio
(what CI runs)."""

from __future__ import annotations

import functools
import math

import pytest

from benchmark.cli import main
from benchmark.commands.doctor import DoctorRow, doctor, render, speeds
from benchmark.commands.smoke import smoke_cell


def test_doctor_compares_fp32_and_bf16_per_round_on_the_cpu(capsys, monkeypatch) -> None:
    from benchmark.commands import check_method
    from benchmark.commands import doctor as doctor_module

    # the rows ``main`` printed, kept as ``doctor`` returned them (before, the same fedavg_simclr
    # cells were run a second time through ``doctor`` to read them)
    returned: list[tuple[str, list[DoctorRow]]] = []

    def kept(*args, **kwargs):
        returned.append(doctor(*args, **kwargs))
        return returned[-1]

    monkeypatch.setattr(doctor_module, "doctor", kept)
    # 2 of 10 clients a round (a fifth of the 2-client cell's steps): the per-round comparison and
    # the speed table read the rounds' losses and timings, whatever the round's size
    monkeypatch.setattr(
        check_method, "smoke_cell", functools.partial(smoke_cell, clients=10, participation=0.2)
    )
    assert (
        main(["doctor", "--methods", "fedavg_simclr,orchestra", "--rounds", "2", "--device", "cpu"])
        == 0
    )
    out = capsys.readouterr().out
    assert "loss bf16" in out and "4 of 4 rounds within 10% of fp32" in out
    ((other, both),) = returned
    assert render(other, both) in out
    rows = [r for r in both if r.method == "fedavg_simclr"]
    assert other == "bf16" and [r.round for r in rows] == [1, 2]
    assert all(
        math.isfinite(r.loss_fp32) and r.loss_fp32 != r.loss_other and r.ok(0.1) for r in rows
    )
    # the speed table: steps counted by the engine, time inside the client updates below the rounds'
    # wall time
    assert "steps/s" in out and "outside clients" in out
    for sp in speeds(other, rows):
        assert sp.steps == sum(r.time_fp32[0] for r in rows) > 0  # same steps in both precisions
        assert (
            0 < sp.client_s < sp.round_s
            and math.isfinite(sp.steps_per_s)
            and 0 < sp.outside_share < 1
        )


def test_speed_is_steps_over_client_time_and_the_rest_is_outside() -> None:
    rows = [
        DoctorRow("m", 1, 2.0, 2.0, 0.0, (10, 2.0, 2.5), (10, 1.0, 1.5)),
        DoctorRow("m", 2, 2.0, 2.0, 0.0, (10, 2.0, 2.5), (10, 1.0, 1.5)),
    ]
    fp32, bf16 = speeds("bf16", rows)
    assert (fp32.precision, fp32.steps_per_s, fp32.outside_share) == ("fp32", 5.0, 0.2)
    assert (bf16.precision, bf16.steps_per_s, round(bf16.outside_share, 6)) == (
        "bf16",
        10.0,
        round(1 / 3, 6),
    )
    assert "10.00" in render("bf16", rows) and "33.33%" in render("bf16", rows)


def test_a_diverging_or_skipping_round_is_flagged() -> None:
    rows = [
        DoctorRow("m", 1, 2.0, 2.5, 0.0),
        DoctorRow("m", 2, 2.0, 2.0, 3.0),
        DoctorRow("m", 3, 2.0, math.nan, 0),
    ]
    assert [r.ok(0.1) for r in rows] == [False, False, False]
    text = render("fp16", rows)
    assert "CHECK" in text and "SKIPPED STEPS" in text and "0 of 3 rounds" in text


@pytest.mark.gpu
def test_doctor_on_cuda_every_method_in_the_default_precision() -> None:
    other, rows = doctor(rounds=3, device="cuda")
    assert rows and all(r.ok(0.1) for r in rows), render(other, rows)
