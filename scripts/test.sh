#!/usr/bin/env bash
# Sets up, builds and runs every test (unit, integration; gpu tests skip with
# a message where no GPU is present). Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
build_dir=${KVSTASH_BUILD_DIR:-build}
export KVSTASH_BIN_DIR="$PWD/$build_dir/bin"
status=0
ctest --test-dir "$build_dir" --output-on-failure --timeout 300 -j "$(nproc)" "$@" || status=$?
# Skipped tests' reasons (ctest keeps them in its log), whatever the outcome.
python3 scripts/ctest_skip_reasons.py "$build_dir"
[ "$status" -eq 0 ] || exit "$status"
# The code follows .clang-format.
bash scripts/format.sh --check
# The clang build of the server and client libraries that checks the
# thread-safety annotations (KVSTASH_THREAD_SAFETY=0 skips it).
if [ "${KVSTASH_THREAD_SAFETY:-1}" != 0 ]; then
  bash scripts/thread_safety.sh
fi
# Then the request fuzzer: its own clang build, the regression corpus, and
# KVSTASH_FUZZ_SECONDS of fuzzing (0 skips it).
fuzz_seconds=${KVSTASH_FUZZ_SECONDS:-60}
if [ "$fuzz_seconds" != 0 ]; then
  bash scripts/fuzz.sh "$fuzz_seconds"
fi
# The Python package: pip install . into the CI venv and its pytest suite.
bash scripts/test_python.sh
