#!/usr/bin/env bash
# Fast rebuild for development: editable install into .venv without build isolation. Serialized by
# a lock so that parallel workers never run two CMake builds in one build folder.
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
# Without build isolation the build backend must be in the venv itself.
python -c "import scikit_build_core, nanobind" 2>/dev/null ||
  python -m pip install -q "scikit-build-core>=0.10" "nanobind>=2.4"
# The editable install replaces what scripts/setup_env.sh installed: drop its stamp, so that it reinstalls.
rm -f .venv/.dimtorch-setup-stamp
flock /tmp/dimtorch-build.lock python -m pip install -q --no-build-isolation --no-deps -e . "$@"
