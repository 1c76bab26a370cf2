#!/usr/bin/env bash
# Builds the extension with AddressSanitizer + UndefinedBehaviorSanitizer into .venv-asan and runs
# the tests under it (all of them, or the test files/folders given). Extra arguments go to pytest.
# CI (.ci/run) runs the fuzz, thread and garbage tests this way after the normal suite.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv-asan/bin/python ] || "$PY" -m venv .venv-asan
. .venv-asan/bin/activate
python -m pip install -q "torch==2.13.0"
python -m pip install -q scikit-build-core nanobind pytest hypothesis matplotlib
DIMTORCH_SANITIZE=ON python -m pip install -q --no-build-isolation --force-reinstall --no-deps \
  -C build-dir=build/asan .
LIBASAN=$(gcc -print-file-name=libasan.so)
LIBUBSAN=$(gcc -print-file-name=libubsan.so)
# torch and CPython are not built with ASan: leaks and their allocator mismatches are not ours.
# Reports also go to files (log_path), which are printed again last: a CI log shown by its tail
# then ends with the report's first frames (where the fault is), not with the interpreter's.
report_dir=$(mktemp -d)
export ASAN_OPTIONS=detect_leaks=0:alloc_dealloc_mismatch=0:new_delete_type_mismatch=0:allocator_may_return_null=1:log_path=$report_dir/asan
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:log_path=$report_dir/ubsan
# Tests that measure process memory skip that part (ASan's quarantine grows the process).
export DIMTORCH_SANITIZED=1
targets=(tests)
for arg in "$@"; do
  case "$arg" in tests/*) targets=() ;; esac
done
# --capture=sys: pytest leaves file descriptor 2 alone, so that a sanitizer's report (written there just
# before it ends the process) reaches the log; with fd capture it is lost with the process.
# no:faulthandler: a segmentation fault goes straight to ASan, whose report has the faulting frame
# (Python's handler would re-raise it from its own, and ASan would report that place instead).
rc=0
LD_PRELOAD="$LIBASAN $LIBUBSAN" python -m pytest -q -p no:cacheprovider -p no:faulthandler --capture=sys \
  "${targets[@]}" "$@" || rc=$?
for report in "$report_dir"/*; do
  [ -f "$report" ] || continue
  # The whole report, then its first lines again (its kind and the frames where it happened),
  # minus ASan's warnings of refused huge allocations (tests ask for those on purpose).
  if grep -qv "failed to allocate" "$report"; then
    echo "=== $(basename "$report") ==="
    grep -v "failed to allocate" "$report"
    echo "=== $(basename "$report"), its first 24 lines again ==="
    grep -v "failed to allocate" "$report" | head -24
  fi
done
rm -rf "$report_dir"
exit $rc
