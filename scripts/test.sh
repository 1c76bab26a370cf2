#!/usr/bin/env bash
# Sets up the environment (scripts/setup_env.sh) and runs the whole test suite, in parallel (pytest-xdist:
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
# Tests import the installed package, not the source tree. loadgroup: the tests of one xdist_group run
# in one worker, one after the other (those that share a compile cache); the others go to whichever
# worker is free. tests/conftest.py gives each worker its share of the cores.
python -m pytest -q -p no:cacheprovider -n auto --dist loadgroup ${select[@]+"${select[@]}"} tests ${args[@]+"${args[@]}"}
