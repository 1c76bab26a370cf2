#!/usr/bin/env bash
# Sets up the environment (scripts/setup_env.sh; for the whole suite also RETURNN's native ops,
# scripts/build_returnn_native_ops.py) and runs the whole test suite, in parallel (pytest-xdist:
# one worker per core). `--quick` skips the slow group (tests marked `slow`: the long compile and
# data-parallel runs), for the loop of a change; CI runs everything. Other arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
. .venv/bin/activate
select=()
args=()
for arg in "$@"; do
  if [ "$arg" = "--quick" ]; then
    select=(-m "not slow")
  else
    args+=("$arg")
  fi
done
# Set-up for the slow group: RETURNN's native ops, compiled once per environment (the stamp: once built here).
if [ ${#select[@]} -eq 0 ] && [ ! -f .venv/.returnn-native-ops-built ]; then
  python scripts/build_returnn_native_ops.py && touch .venv/.returnn-native-ops-built
fi
# Tests import the installed package, not the source tree. loadgroup: the tests of one xdist_group run
# in one worker, one after the other (those that share a compile cache); the others go to whichever
# worker is free. tests/conftest.py gives each worker its share of the cores.
python -m pytest -q -p no:cacheprovider -n auto --dist loadgroup ${select[@]+"${select[@]}"} tests ${args[@]+"${args[@]}"}
