#!/usr/bin/env bash
# Creates .venv (if needed) with the pinned torch and dimtorch built from this checkout.
# Usage: source-free; run as `bash scripts/setup_env.sh`. Idempotent, and fast when nothing changed: pip
# runs only when .venv lacks the stamp of exactly what this would install (the pins, this script, the
# Python, and the contents of every file the build and the installed package come from: src/, python/,
# CMakeLists.txt, pyproject.toml). A fresh clone has no .venv, so it always installs.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
TORCH_PIN="torch==2.13.0"
EXTRAS=".[test,bench,demo]"
STAMP=.venv/.dimtorch-setup-stamp

if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi

stamp() {
  echo "$TORCH_PIN $EXTRAS"
  .venv/bin/python -VV
  find src python CMakeLists.txt pyproject.toml scripts/setup_env.sh -type f \
    ! -name '*.pyc' ! -name '*.so' ! -path '*/__pycache__/*' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
}

# What pip would produce is there: the stamp matches and the two distributions are installed.
installed() {
  .venv/bin/python - "$TORCH_PIN" <<'EOF' 2>/dev/null
import sys
from importlib.metadata import version
assert version("torch").split("+")[0] == sys.argv[1].split("==")[1]  # 2.13.0+cpu
version("dimtorch")
EOF
}

want=$(stamp | sha256sum | cut -d' ' -f1)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && installed; then
  echo "setup_env: .venv is up to date (stamp $STAMP); nothing to install"
  exit 0
fi

rm -f "$STAMP"
. .venv/bin/activate
python -m pip install -q --upgrade pip
# torch is pinned before anything else so that no dependency can resolve a newer (CUDA) build.
python -m pip install -q "$TORCH_PIN"
# The normal build path (build isolation): scikit-build-core + nanobind + CMake.
python -m pip install -q "$EXTRAS"
python -c "import dimtorch, torch; print('dimtorch', dimtorch.__version__, 'torch', torch.__version__)"
echo "$want" > "$STAMP"
