#!/usr/bin/env bash
# Creates .venv (if needed) with the pinned torch and dimtorch built from this checkout.
# Usage: source-free; run as `bash scripts/setup_env.sh`. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
. .venv/bin/activate
python -m pip install -q --upgrade pip
# torch is pinned before anything else so that no dependency can resolve a newer (CUDA) build.
python -m pip install -q "torch==2.13.0"
# The normal build path (build isolation): scikit-build-core + nanobind + CMake.
python -m pip install -q ".[test,bench,demo]"
python -c "import dimtorch, torch; print('dimtorch', dimtorch.__version__, 'torch', torch.__version__)"
