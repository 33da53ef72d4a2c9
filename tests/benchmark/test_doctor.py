"""``benchmark doctor`` on the CPU: the fp32 / bf16 pair per method, side by side with the ratio (what CI runs)."""

from __future__ import annotations

import math

import pytest

from benchmark.cli import main
from benchmark.doctor import DoctorRow, doctor, render


def test_doctor_compares_fp32_and_bf16_per_round_on_the_cpu(capsys) -> None:
    assert main(["doctor", "--methods", "fedavg_simclr,orchestra", "--rounds", "2", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "loss bf16" in out and "4 of 4 rounds within 10% of fp32" in out
    other, rows = doctor(["fedavg_simclr"], rounds=2, device="cpu")
    assert other == "bf16" and [r.round for r in rows] == [1, 2]
    assert all(math.isfinite(r.loss_fp32) and r.loss_fp32 != r.loss_other and r.ok(0.1) for r in rows)


def test_a_diverging_or_skipping_round_is_flagged() -> None:
    rows = [DoctorRow("m", 1, 2.0, 2.5, 0.0), DoctorRow("m", 2, 2.0, 2.0, 3.0), DoctorRow("m", 3, 2.0, math.nan, 0)]
    assert [r.ok(0.1) for r in rows] == [False, False, False]
    text = render("fp16", rows)
    assert "CHECK" in text and "SKIPPED STEPS" in text and "0 of 3 rounds" in text


@pytest.mark.gpu
def test_doctor_on_cuda_every_method_in_the_default_precision() -> None:
    other, rows = doctor(rounds=3, device="cuda")
    assert rows and all(r.ok(0.1) for r in rows), render(other, rows)
