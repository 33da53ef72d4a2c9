"""Precision on CUDA set and recorded (issue 45 item 3): the TF32/cuDNN policy is one pure function,
applied by setting torch's flags (read back here, on a machine without CUDA), recorded in
``env.cuda_precision`` only where the cell ran on CUDA; ``tf32`` is a precision of its own."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from benchmark.commands.check_method import smoke_cell
from benchmark.core.precision import (
    PRECISIONS,
    CudaPrecision,
    Precision,
    apply_cuda_precision,
    cuda_precision,
    current_cuda_precision,
    supports,
)
from benchmark.records.integrity import record_digest
from benchmark.records.schema import from_json, to_json


@pytest.fixture
def restore_flags():
    before = current_cuda_precision()
    yield
    apply_cuda_precision(before)


def test_fp32_means_fp32_and_only_tf32_allows_tf32() -> None:
    for name in PRECISIONS:
        s = cuda_precision(name)
        assert s.tf32_matmul is s.tf32_cudnn is (name == "tf32")
        assert not s.cudnn_benchmark and s.cudnn_deterministic
    with pytest.raises(ValueError):
        cuda_precision("fp8")


def test_apply_sets_the_flags_and_reads_them_back(restore_flags) -> None:
    # torch's own default lets cuDNN convolutions run in TF32: fp32 must turn it off
    for name in ("tf32", "fp32", "bf16"):
        got = apply_cuda_precision(cuda_precision(name))
        assert got == cuda_precision(name) == current_cuda_precision()
        assert torch.backends.cuda.matmul.allow_tf32 is (name == "tf32")
        assert torch.backends.cudnn.allow_tf32 is (name == "tf32")
        assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark


def test_tf32_is_fp32_tensors_without_autocast_and_keeps_fp32_cell_ids() -> None:
    p = Precision("tf32")
    assert p.dtype == torch.float32 and not p.scaler(torch.device("cpu")).enabled
    assert isinstance(p.autocast(torch.device("cpu")), type(Precision("fp32").autocast("cpu")))
    assert supports(("fp32",), "tf32") and not supports(("bf16",), "tf32")
    fp32, tf32 = smoke_cell("fedavg_simclr"), smoke_cell("fedavg_simclr", precision="tf32")
    assert tf32.cell_id != fp32.cell_id and tf32.pretrain_key != fp32.pretrain_key
    assert "precision" not in fp32.to_dict() or fp32.to_dict()["precision"] == "fp32"
    assert fp32.label() == smoke_cell("fedavg_simclr").label() and "tf32" in tf32.label()


def _record():
    import json
    from pathlib import Path

    from benchmark.records.schema import record_from_dict

    path = next(Path("results/records/v1").rglob("*.json"))
    return record_from_dict(json.loads(path.read_text(encoding="utf-8"))), path


def test_a_cpu_record_is_byte_for_byte_what_it_was_and_a_cuda_one_says_its_flags() -> None:
    record, path = _record()
    assert not record.env.cuda_precision
    assert to_json(record) == path.read_text(encoding="utf-8")
    assert record_digest(record) == record.digest
    flags = {"pretrain": cuda_precision("bf16").as_dict(), "evaluation": cuda_precision("fp32")}
    flags["evaluation"] = flags["evaluation"].as_dict()
    cuda = dataclasses.replace(record, env=dataclasses.replace(record.env, cuda_precision=flags))
    assert '"cuda_precision"' in to_json(cuda) and record_digest(cuda) != record.digest
    assert from_json(to_json(cuda)).env.cuda_precision == flags
    assert isinstance(CudaPrecision(**flags["pretrain"]), CudaPrecision)
