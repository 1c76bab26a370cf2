#!/usr/bin/env bash
# The main job: sets up the environment, then runs the overhead benchmark (dimtorch vs hand-written
# PyTorch vs RETURNN frontend). Extra arguments go to the benchmark (e.g. --quick).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
. .venv/bin/activate
python bench/ops_bench.py "$@"
