"""``collect_env()``: provenance for records (git commit and dirty flag, versions, device and its
hardware model). Never identity. The CPU kernel settings (benchmark.portable.mode.state) are handed in
by the caller that knows them (the runner): this torch-free layer imports nothing of portable/."""

from __future__ import annotations

import contextlib
import platform
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from benchmark.core.paths import REPO
from benchmark.records.schema import EnvInfo

PACKAGES = (
    "torch",
    "torchvision",
    "numpy",
    "timm",
    "datasets",
    "pytorch-metric-learning",
    "scikit-learn",
    "wandb",
)


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True, timeout=5, check=True
        )
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


CPUINFO = Path("/proc/cpuinfo")  # Linux; elsewhere platform.processor() answers


def _cpu_model() -> str:
    """The CPU's model name, with its vendor, family and model numbers where /proc/cpuinfo has
    them: x86 names such as "Intel(R) Xeon(R) Processor" do not tell two CPU generations apart."""
    try:
        text = CPUINFO.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return platform.processor()
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip() and fields:
            break  # the first processor's block is enough
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    name = next((fields[k] for k in ("model name", "Model", "cpu model") if fields.get(k)), None)
    if name is None:
        return platform.processor()
    ids = [fields.get(k) for k in ("vendor_id", "cpu family", "model")]
    if all(ids):
        return f"{name} ({ids[0]}, family {ids[1]} model {ids[2]})"
    return name


def machine_model(device: str = "cpu") -> str:
    """The hardware a number came from: the CUDA device's name when the cell ran on a GPU (read only
    if torch is already imported: this package stays torch-free), else the CPU model. Cheap: one
    small file read."""
    torch = sys.modules.get("torch")
    if device.startswith("cuda") and torch is not None:
        with contextlib.suppress(Exception):  # provenance must never fail a finished cell
            return str(torch.cuda.get_device_name(device))
    return _cpu_model()


def nvidia_driver(run: Any = subprocess.run) -> str:
    """The NVIDIA driver's version as ``nvidia-smi`` reports it ("" when it cannot be read: no
    nvidia-smi, a time-out): torch exposes the CUDA runtime's version, not the driver's."""
    try:
        out = run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    lines = [line.strip() for line in str(out.stdout).splitlines() if line.strip()]
    return lines[0] if lines else ""


def gpu_info(device: str, torch: Any, driver: Callable[[], str] = nvidia_driver) -> dict[str, Any]:
    """What a GPU cell ran on: the device's name, compute capability and memory, the driver, the
    CUDA runtime torch was built with, cuDNN, and the devices visible to the process; {} for a CPU
    cell or where ``torch`` (the module, passed in: this package stays torch-free) sees no CUDA."""
    if not device.startswith("cuda") or torch is None or not torch.cuda.is_available():
        return {}
    info: dict[str, Any] = {}
    with contextlib.suppress(Exception):  # provenance must never fail a finished cell
        props = torch.cuda.get_device_properties(device)
        info = {
            "name": str(props.name),
            "capability": f"{props.major}.{props.minor}",
            "memory_bytes": int(props.total_memory),
            "cuda": str(torch.version.cuda or ""),
            "cudnn": str(torch.backends.cudnn.version() or ""),
            "visible": int(torch.cuda.device_count()),
        }
        info["driver"] = driver()
    return info


def collect_env(device: str = "cpu", kernels: Mapping[str, Any] | None = None) -> EnvInfo:
    """The environment of a record (or a report) made on ``device``; ``kernels``: what decided the
    CPU kernels (``benchmark.portable.mode.state(device)``), ``{}`` (not recorded) when the caller
    has none to give (a bundle's or an acceptance's provenance reads only the git fields)."""
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    sha = _git("rev-parse", "HEAD") or "unknown"
    status = _git("status", "--porcelain", "--untracked-files=no")
    cuda = None
    threads = 0
    torch_version = versions.get("torch", "")
    # read only if the caller already imported it: this package stays torch-free
    torch = sys.modules.get("torch")
    if torch is not None:
        threads = int(torch.get_num_threads())
        if torch.cuda.is_available():
            cuda = torch.version.cuda
    return EnvInfo(
        git_sha=sha,
        git_dirty=bool(status),
        python=platform.python_version(),
        torch=torch_version,
        cuda=cuda,
        device=device,
        packages=versions,
        hostname=socket.gethostname(),
        threads=threads,
        machine=machine_model(device),
        kernels=dict(kernels or {}),
        gpu=gpu_info(device, torch),
    )
