#!/usr/bin/env bash
# Installs the box accept runs a submitted method's training in (docs/integrity.md): Debian's bubblewrap
# (/usr/bin/bwrap). Without it the box tests (tests/benchmark/test_box.py) skip with the reason and accept refuses a
# bundle with plugin code unless --unboxed. Called from .ci/run; does nothing when bwrap is already there.
set -euo pipefail
if [ -x /usr/bin/bwrap ]; then
  /usr/bin/bwrap --version
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends bubblewrap >/dev/null
/usr/bin/bwrap --version
