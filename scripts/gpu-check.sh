#!/usr/bin/env bash
# The GPU check in one go, for a GPU machine that has PyTorch and no network (issues 41, 45;
# docs/performance.md, "On a GPU"): install the carried wheels, then
# `python -m benchmark doctor --calibrate`, with everything it writes under $OUT.
#
#   bash scripts/gpu-check.sh [WHEELS]        (WHEELS: the folder scripts/prepare_wheels.py wrote; default .whl)
#
# Before, on a machine with the package index (once; the wheels must match the GPU machine's Python):
#   python scripts/prepare_wheels.py --python 3.12 --have TARGET_PACKAGES.txt --skip wandb --out .whl [--detectron2]
# where TARGET_PACKAGES.txt is `python3 -m pip list --format=freeze` from the GPU machine (or its
# image's documented package list): only what is missing there is carried.
#
# It finishes within TOTAL_S seconds (default 290, under 5 minutes, so two runs fit in 15 minutes of
# GPU time), every step bounded by `timeout`:
#   1. WHEELS/*.whl installed with pip --no-index --no-deps into a folder of its own (/tmp/fssl-site,
#      first on PYTHONPATH), so the machine's own packages, PyTorch above all, are left as they are
#      (at most PIP_S, default 45 s);
#   2. the environment the check needs: the repository on PYTHONPATH (no install of the project),
#      W&B offline, the hub offline, Python unbuffered;
#   3. $OUT/env.txt (nvidia-smi, python, pip list; at most ENV_S, default 20 s), then doctor
#      --calibrate with the time left: its --budget is what remains of TOTAL_S less MARGIN_S (default
#      45 s: Python's start, the projection and the report), and `timeout` kills it at TOTAL_S. Its
#      report goes to $OUT/calibration.json, its table and progress to $OUT/calibrate.log.
# On one H200 in the default 290 s, doctor has about 220 s: the smoke grid in fp32 and bf16 within
# 40 % of it, then as many of the GPU grids' configurations as fit, heaviest first; the rest are
# "not measured" and the exit code says "incomplete" (3). Pass --budget in DOCTOR_ARGS, or raise
# TOTAL_S, for a complete calibration (about 8 minutes).
# $OUT defaults to ./gpu-check-out. Exit code: doctor's (0 every check passed and everything planned
# ran; 1 a check failed, named in the log; 2 a usage error; 3 incomplete: the budget left part of the
# plan unrun, each part named); 4 the wheels did not install (see $OUT/pip.log); 5 a step ran out of
# its time (named on stderr); 6 torch sees no GPU (one line; nothing installed or run).
# Copy $OUT/calibration.json to ~/.cache/fssl-bench/calibration/<device>.json (the name the log's
# last line gives) on the machine that plans the grids, or pass it to `run --dry-run --calibration`.
set -uo pipefail
start=$SECONDS
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
OUT=${OUT:-$repo/gpu-check-out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
wheels=${1:-.whl}
TOTAL_S=${TOTAL_S:-290}
PIP_S=${PIP_S:-45}
ENV_S=${ENV_S:-20}
MARGIN_S=${MARGIN_S:-45}
MIN_S=${MIN_S:-60}  # the least budget doctor is started with
export WANDB_MODE=offline HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1 \
  RAY_USAGE_STATS_ENABLED=0 PIP_DISABLE_PIP_VERSION_CHECK=1
# a GPU the check can use, or one line and exit 6 before anything is installed or run (a machine whose
# CUDA is broken would otherwise calibrate its CPU: `auto` falls back to it). DOCTOR_ARGS with
# "--device cpu" tries the script on a CPU machine on purpose and skips this.
case " ${DOCTOR_ARGS:-} " in
  *" --device cpu "*) ;;
  *)
    if ! why=$(timeout -k 2 "${ENV_S:-20}" "$PY" -c "import sys, torch
if torch.cuda.is_available() and torch.cuda.device_count() > 0: sys.exit(0)
print(f'torch {torch.__version__} (CUDA build {torch.version.cuda}) sees no GPU'); sys.exit(1)" 2>&1); then
      echo "gpu-check: refused, ${why##*$'\n'}: nothing calibrated (DOCTOR_ARGS=\"--tiny --device cpu\" tries it on a CPU)" >&2
      exit 6
    fi
    ;;
esac
site=/tmp/fssl-site
if compgen -G "$wheels/*.whl" >/dev/null; then
  echo "installing $(ls "$wheels"/*.whl | wc -l) carried wheels from $wheels into $site (at most ${PIP_S} s)"
  timeout -k 5 "$PIP_S" "$PY" -m pip install --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target "$site" "$wheels"/*.whl >"$OUT/pip.log" 2>&1
  rc=$?
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    echo "installing the wheels took more than ${PIP_S} s: $OUT/pip.log" >&2
    exit 5
  elif [ "$rc" -ne 0 ]; then
    echo "the carried wheels did not install: $OUT/pip.log" >&2
    exit 4
  fi
  export PYTHONPATH="$repo:$site${PYTHONPATH:+:$PYTHONPATH}"
else
  echo "no wheels in $wheels: using what this machine has"
  export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
fi
{
  timeout -k 2 "$ENV_S" nvidia-smi || true
  "$PY" -VV
  timeout -k 2 "$ENV_S" "$PY" -m pip list --format=freeze 2>/dev/null
  "$PY" -c "import sys; print('sys.path:', sys.path)"
} >"$OUT/env.txt" 2>&1
left=$((TOTAL_S - (SECONDS - start)))
budget=$((left - MARGIN_S))
if [ "$budget" -lt "$MIN_S" ]; then
  echo "only ${left} s of TOTAL_S=${TOTAL_S} left for doctor --calibrate (needs ${MIN_S} s + ${MARGIN_S} s)" >&2
  exit 5
fi
echo "doctor --calibrate: --budget ${budget} s, stopped at ${left} s"
# DOCTOR_ARGS: extra options, e.g. "--tiny --device cpu" to try this script on a CPU machine; a
# --budget there replaces the one computed here
# shellcheck disable=SC2086
timeout -k 10 "$left" "$PY" -m benchmark doctor --calibrate --budget "$budget" ${DOCTOR_ARGS:-} \
  --out "$OUT/calibration.json" 2>&1 | tee "$OUT/calibrate.log"
rc=${PIPESTATUS[0]}
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  echo "doctor --calibrate did not finish within ${left} s (see $OUT/calibrate.log)" >&2
  exit 5
fi
echo "doctor --calibrate exit code $rc after $((SECONDS - start)) s; report and log under $OUT"
exit "$rc"
