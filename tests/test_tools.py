"""scripts/prepare_wheels.py (the wheels a GPU machine without network needs) and scripts/gpu-check.sh
(the check in one go there): what they select, without the network."""

from __future__ import annotations

import importlib.util
import subprocess
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def pw():
    spec = importlib.util.spec_from_file_location(
        "prepare_wheels", REPO / "scripts" / "prepare_wheels.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_project_requirements_are_pyprojects_with_the_extras(pw) -> None:
    tomllib = pytest.importorskip("tomllib")
    raw = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert pw.project_requirements(REPO / "pyproject.toml", []) == raw["dependencies"]
    assert pw.project_requirements(REPO / "pyproject.toml", ["detection", "slurm"]) == (
        raw["dependencies"]
        + raw["optional-dependencies"]["detection"]
        + raw["optional-dependencies"]["slurm"]
    )
    with pytest.raises(SystemExit, match="no extra 'gpu'"):
        pw.project_requirements(REPO / "pyproject.toml", ["gpu"])


def test_the_plain_reader_for_python_3_10_reads_the_same(pw, monkeypatch) -> None:
    import builtins

    want = pw.project_requirements(REPO / "pyproject.toml", ["detection", "slurm"])
    real_import = builtins.__import__

    def no_tomllib(name, *a, **k):
        if name == "tomllib":
            raise ImportError(name)
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_tomllib)
    # comments that hold quoted words (pyproject's own do) must not become requirements
    assert pw.project_requirements(REPO / "pyproject.toml", ["detection", "slurm"]) == want
    assert pw._strip_comment('    "torch>=2.5",  # see "A GPU machine"') == '    "torch>=2.5",  '


def test_what_the_target_has_is_read_from_names_or_pip_freeze(pw, tmp_path) -> None:
    f = tmp_path / "have.txt"
    f.write_text(
        "# the image\nnumpy==2.5.2\nPyYAML>=6\nscikit_learn\ntorch @ file:///x\n\nhuggingface-hub\n"
    )
    assert pw.have_names(f) == {"numpy", "pyyaml", "scikit-learn", "torch", "huggingface-hub"}
    assert {"torch", "torchvision"} <= pw.TORCH_FAMILY
    # a copy of known version is kept only where it satisfies the requirement; else it is carried
    have = pw.have_versions(f)
    assert have["numpy"] == "2.5.2" and have["huggingface-hub"] is None
    Requirement, _ = pw._packaging()
    assert pw.satisfied(Requirement("numpy>=1.24"), have)
    assert not pw.satisfied(Requirement("numpy<2"), have)
    assert pw.satisfied(Requirement("huggingface-hub>=1.31"), have)  # version unknown: kept
    assert not pw.satisfied(Requirement("dill<0.4.2"), have)  # absent: carried


def test_requirements_are_followed_with_the_targets_markers(pw, tmp_path) -> None:
    wheel = tmp_path / "demo-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(
            "demo-1.0.dist-info/METADATA",
            "Name: demo\nRequires-Dist: numpy>=1.24\nRequires-Dist: tomli; python_version < '3.11'\n"
            "Requires-Dist: pywin32; sys_platform == 'win32'\nRequires-Dist: pytest; extra == 'test'\n",
        )
    Requirement, _ = pw._packaging()
    reqs = [Requirement(r) for r in pw.requires_dist(wheel)]
    env312, env310 = pw.target_env("3.12"), pw.target_env("3.10")
    assert [r.name for r in reqs if pw.applies(r, env312)] == ["numpy"]
    assert [r.name for r in reqs if pw.applies(r, env310)] == ["numpy", "tomli"]


def test_gpu_check_is_valid_bash_and_names_what_it_writes() -> None:
    script = REPO / "scripts" / "gpu-check.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    text = script.read_text()
    for needle in (
        "--no-index",
        "doctor --calibrate",
        "WANDB_MODE=offline",
        "HF_HUB_OFFLINE=1",
        "calibration.json",
        "calibrate.log",
    ):
        assert needle in text


def _fake_python(tmp_path: Path, doctor: str) -> Path:
    """A stand-in interpreter: answers the environment step at once and runs ``doctor`` (shell) for
    ``-m benchmark``, its arguments in $OUT/args."""
    fake = tmp_path / "python"
    fake.write_text(
        "#!/usr/bin/env bash\n"
        'if [ "${1:-}" = "-m" ] && [ "${2:-}" = "benchmark" ]; then\n'
        f'  echo "$@" > "$OUT/args"; {doctor}\n'
        "fi\n"
        "echo fake\n"
    )
    fake.chmod(0o755)
    return fake


def test_gpu_check_bounds_every_step_and_fits_twice_in_fifteen_minutes(tmp_path) -> None:
    """The whole check is held to TOTAL_S (default under 5 minutes): doctor gets what is left as
    its budget and is killed at the limit (exit 5); its own exit code passes through otherwise."""
    script = REPO / "scripts" / "gpu-check.sh"
    text = script.read_text()
    assert "TOTAL_S=${TOTAL_S:-290}" in text and 2 * 290 + 2 * 60 <= 15 * 60
    env = {"PATH": "/usr/bin:/bin", "OUT": str(tmp_path / "out"), "TOTAL_S": "6", "MARGIN_S": "2"}
    env["MIN_S"] = "1"
    env["PYTHON"] = str(_fake_python(tmp_path, "exit 3"))
    proc = subprocess.run(
        ["bash", str(script), str(tmp_path / "no-wheels")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 3, proc.stderr  # doctor's "incomplete" passes through
    args = (tmp_path / "out" / "args").read_text().split()
    budget = int(args[args.index("--budget") + 1])
    assert 1 <= budget <= 4 and "--calibrate" in args
    env["PYTHON"] = str(_fake_python(tmp_path, "sleep 30"))
    proc = subprocess.run(
        ["bash", str(script), str(tmp_path / "no-wheels")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    # killed at its limit: the stand-in would have exited 0 after its sleep
    assert proc.returncode == 5 and "did not finish within" in proc.stderr


def test_gpu_check_refuses_in_one_line_when_torch_sees_no_gpu(tmp_path) -> None:
    """A machine whose CUDA is broken must not calibrate its CPU under the GPU check's name: the
    script asks torch first and stops (exit 6, one line) before installing or running anything."""
    script = REPO / "scripts" / "gpu-check.sh"
    fake = tmp_path / "python"
    fake.write_text(
        "#!/usr/bin/env bash\n"
        'if [ "${1:-}" = "-c" ]; then echo "torch 2.9.0 (CUDA build 12.8) sees no GPU"; exit 1; fi\n'
        'if [ "${1:-}" = "-m" ] && [ "${2:-}" = "benchmark" ]; then touch "$OUT/doctor-ran"; fi\n'
        "echo fake\n"
    )
    fake.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "OUT": str(tmp_path / "out"), "PYTHON": str(fake)}
    proc = subprocess.run(
        ["bash", str(script), str(tmp_path / "no-wheels")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 6 and proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert "torch 2.9.0 (CUDA build 12.8) sees no GPU" in line and "refused" in line
    assert not (tmp_path / "out" / "doctor-ran").exists()
    # on purpose on a CPU: the check is skipped and doctor runs
    env["DOCTOR_ARGS"] = "--tiny --device cpu"
    env.update(TOTAL_S="6", MARGIN_S="2", MIN_S="1")
    proc = subprocess.run(
        ["bash", str(script), str(tmp_path / "no-wheels")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0 and (tmp_path / "out" / "doctor-ran").exists(), proc.stderr
