"""The environment half of ``doctor --calibrate``: the device and its driver, the precisions it
trains in, the portable kernel mode, the optional parts.

Each check is a :class:`Check` with a status: ``ok``; ``FAILED`` (the command exits 1 and names it);
``unsupported`` (the device lacks the feature: said, not a failure — a grid that needs it stops at
the door); ``incomplete`` (the time budget ended before the phase did: the command exits 3); ``n/a`` (does not apply here); ``missing`` (an optional part not installed, with the one
line that installs it).
"""

from __future__ import annotations

import importlib.util
import math
import os
import platform
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from typing import Any

OK, FAILED, UNSUPPORTED, NA, MISSING = "ok", "FAILED", "unsupported", "n/a", "missing"
# a phase the time budget cut short (a smoke cell not run, a configuration not measured): the command
# exits 3, "incomplete", unless a check failed
INCOMPLETE = "incomplete"


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    detail: str
    seconds: float = 0.0

    @property
    def failed(self) -> bool:
        return self.status == FAILED


def timed_check(name: str, fn: Callable[[], tuple[str, str]]) -> Check:
    """``fn() -> (status, detail)`` as a Check with its duration; an exception is a failure."""
    t0 = time.perf_counter()
    try:
        status, detail = fn()
    except Exception as exc:  # noqa: BLE001 - a check that raises has failed, with the reason
        status, detail = FAILED, f"{type(exc).__name__}: {exc}"
    return Check(name, status, detail, round(time.perf_counter() - t0, 3))


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def _driver() -> str | None:
    """The NVIDIA driver version as nvidia-smi reports it (None without nvidia-smi)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run(
            [exe, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return (
        out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    )


def device_info(device: str) -> dict[str, Any]:
    """What the report says about the machine: device, its model, memory and capability, driver,
    CUDA and cuDNN, torch, Python, the host's CPU and torch's threads."""
    import torch

    from benchmark.records.env_info import machine_model

    info: dict[str, Any] = {
        "device": device,
        "name": machine_model(device),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu": machine_model("cpu"),
        "threads": torch.get_num_threads(),
        "cuda": torch.version.cuda,
    }
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(torch.device(device))
        info.update(
            capability=f"{props.major}.{props.minor}",
            memory_bytes=int(props.total_memory),
            multiprocessors=int(props.multi_processor_count),
            cudnn=torch.backends.cudnn.version(),
            driver=_driver(),
            devices=torch.cuda.device_count(),
        )
    return info


def check_device(device: str) -> tuple[str, str]:
    import torch

    if device.startswith("cuda"):
        info = device_info(device)
        x = torch.randn(64, 64, device=device)
        assert torch.isfinite(x @ x).all().item()
        return OK, (
            f"{info['name']} (capability {info['capability']}, "
            f"{info['memory_bytes'] / 2**30:.1f} GiB), driver {info['driver'] or '?'}, "
            f"CUDA {info['cuda']}, cuDNN {info['cudnn']}, torch {info['torch']}"
        )
    return OK, (
        f"CPU: {device_info('cpu')['cpu']}, {torch.get_num_threads()} torch threads, torch "
        f"{torch.__version__}" + ("" if torch.cuda.is_available() else "; no CUDA device visible")
    )


# ------------------------------------------------------------------------------------------------
# precisions: a small conv net's forward and backward against a float64 reference on the CPU


def _net_and_data(seed: int = 0) -> tuple[Any, Any]:
    import torch

    g = torch.Generator().manual_seed(seed)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(16, 10),
    )
    for p in net.parameters():
        with torch.no_grad():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    return net, torch.randn(32, 3, 16, 16, generator=g)


def _rel_error(net: Any, x: Any, device: str, dtype: Any | None) -> tuple[float, Any]:
    """(relative error of the output against float64, the output's dtype) under autocast to
    ``dtype`` (None: plain fp32)."""
    import copy

    import torch

    with torch.no_grad():
        ref = copy.deepcopy(net).double()(x.double())
        model = copy.deepcopy(net).to(device)
        with torch.autocast(torch.device(device).type, dtype=dtype, enabled=dtype is not None):
            out = model(x.to(device))
    err = (out.double().cpu() - ref).norm() / ref.norm()
    return float(err), out.dtype


def check_fp32(device: str) -> tuple[str, str]:
    import torch

    net, x = _net_and_data()
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        err, dtype = _rel_error(net, x, device, None)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before
    ok = dtype == torch.float32 and err < 1e-5
    return (OK if ok else FAILED), f"strict fp32: relative error {err:.1e} vs float64 (< 1e-5)"


def check_tf32(device: str) -> tuple[str, str]:
    import torch

    if not device.startswith("cuda"):
        return NA, "TF32 is a tensor-core mode of NVIDIA GPUs (Ampere and later)"
    major, _ = torch.cuda.get_device_capability(torch.device(device))
    if major < 8:
        return UNSUPPORTED, f"capability {major}.x: TF32 needs 8.0 (Ampere) or later"
    net, x = _net_and_data()
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    try:
        err, _ = _rel_error(net, x, device, None)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before
    flags = f"convolutions {'on' if before[1] else 'off'}, matmuls {'on' if before[0] else 'off'}"
    return (OK if err < 5e-3 else FAILED), (
        f"relative error {err:.1e} vs float64 (< 5e-3); torch's defaults here: {flags} "
        "(fp32 cells run as torch sets them; `plan` assumes TF32 convolutions)"
    )


def check_bf16(device: str) -> tuple[str, str]:
    import torch

    if device.startswith("cuda") and not torch.cuda.is_bf16_supported():
        return UNSUPPORTED, "no bf16 here: the main grid (bf16) stops at the door; use fp16 or fp32"
    net, x = _net_and_data()
    err, dtype = _rel_error(net, x, device, torch.bfloat16)
    ok = dtype == torch.bfloat16 and err < 5e-2
    return (OK if ok else FAILED), f"autocast output {dtype}, relative error {err:.1e} (< 5e-2)"


def check_fp16_scaler(device: str) -> tuple[str, str]:
    """fp16 autocast with the project's gradient scaler: finite steps are taken, a step on an
    overflowing gradient is skipped and the scale backs off."""
    import torch

    from benchmark.core.precision import Precision

    prec, dev = Precision("fp16"), torch.device(device)
    net, x = _net_and_data()
    net, x = net.to(dev), x.to(dev)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    scaler = prec.scaler(dev)
    for i in range(3):
        with prec.autocast(dev):
            out = net(x)
            loss = out.float().pow(2).mean() * (math.inf if i == 2 else 1.0)
        opt.zero_grad(set_to_none=True)
        scaler.backward(loss)
        stepped = scaler.step(opt)
        assert stepped == (i < 2), f"step {i + 1}: stepped={stepped}"
    assert out.dtype == torch.float16, out.dtype
    return OK, f"autocast output {out.dtype}; 2 finite steps taken, 1 overflowing step skipped"


def check_portable(device: str) -> tuple[str, str]:
    """On a GPU the portable kernel mode must say that it does not apply; on a CPU, whether it
    would."""
    from benchmark.portable import mode as portable

    reason = portable.not_applicable(device)
    if device.startswith("cuda"):
        if reason is None:
            return FAILED, "the portable mode claims to cover GPU kernels"
        return OK, f"does not apply, as it should: {reason}"
    state = portable.state(device)
    return OK, (
        f"this process: {portable.describe(state)}; portable mode "
        + ("would apply on this CPU" if reason is None else f"does not apply: {reason}")
    )


# ------------------------------------------------------------------------------------------------
# optional parts

OPTIONAL = (
    # (import name, distribution, how to get it)
    ("wandb", "wandb", "pip install wandb (a core dependency); offline: WANDB_MODE=offline"),
    ("ray", "ray", "pip install -e '.[ray]' (the ray launcher)"),
    ("submitit", "submitit", "pip install -e '.[slurm]' (the slurm launcher)"),
    (
        "detectron2",
        "detectron2",
        "the official build: pip install --no-build-isolation "
        "'git+https://github.com/facebookresearch/detectron2.git'; without GitHub: "
        "bash scripts/install-detectron2-cpu.sh (docs/detection.md)",
    ),
    ("pycocotools", "pycocotools", "pip install -e '.[detection]'"),
)


def optional_part(module: str, dist: str, how: str) -> tuple[str, str]:
    if importlib.util.find_spec(module) is None:
        return MISSING, f"not installed: {how}"
    try:
        version = metadata.version(dist)
    except metadata.PackageNotFoundError:
        version = "?"
    detail = f"installed ({version})"
    if module == "wandb":
        mode = os.environ.get("WANDB_MODE", "")
        detail += f"; WANDB_MODE={mode or '(unset: online)'}"
        if mode not in ("offline", "disabled", "dryrun"):
            detail += " (set WANDB_MODE=offline where there is no network)"
    return OK, detail


def environment_checks(device: str, log: Callable[[str], None]) -> list[Check]:
    checks = [
        ("device", lambda: check_device(device)),
        ("fp32", lambda: check_fp32(device)),
        ("tf32", lambda: check_tf32(device)),
        ("bf16", lambda: check_bf16(device)),
        ("fp16 + scaler", lambda: check_fp16_scaler(device)),
        ("portable kernels", lambda: check_portable(device)),
    ]
    checks += [(m, lambda m=m, d=d, h=h: optional_part(m, d, h)) for m, d, h in OPTIONAL]
    out = []
    for name, fn in checks:
        c = timed_check(name, fn)
        log(f"check {name}: {c.status} ({c.seconds:.1f} s) {c.detail}")
        out.append(c)
    return out


__all__ = [
    "FAILED",
    "MISSING",
    "NA",
    "OK",
    "OPTIONAL",
    "UNSUPPORTED",
    "Check",
    "check_bf16",
    "check_device",
    "check_fp16_scaler",
    "check_fp32",
    "check_portable",
    "check_tf32",
    "device_info",
    "environment_checks",
    "optional_part",
    "resolve_device",
    "timed_check",
]
