#!/usr/bin/env bash
# Sets up, builds and runs every test (unit, integration; gpu tests skip with
# a message where no GPU is present). Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
build_dir=${KVSTASH_BUILD_DIR:-build}
export KVSTASH_BIN_DIR="$PWD/$build_dir/bin"
ctest --test-dir "$build_dir" --output-on-failure --timeout 300 -j "$(nproc)" "$@"
# The Python package: pip install . into the CI venv and its pytest suite.
bash scripts/test_python.sh
