#!/usr/bin/env bash
# Sets up the environment (scripts/setup_env.sh) and runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
. .venv/bin/activate
# Tests import the installed package, not the source tree.
python -m pytest -q -p no:cacheprovider tests "$@"
