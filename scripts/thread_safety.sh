#!/usr/bin/env bash
# scripts/thread_safety.sh: builds the backends, server and client libraries (no tests,
# no CUDA, no executables: cheap enough for CI) with clang 14 and
# -Wthread-safety -Werror=thread-safety, which checks every
# KVSTASH_GUARDED_BY / KVSTASH_REQUIRES annotation (runtime's
# kvstash/runtime/thread_annotations.h). Exits non-zero on a violation.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${KVSTASH_TSA_BUILD_DIR:-build-thread-safety}
cc=${KVSTASH_TSA_CC:-clang-14}
cxx=${KVSTASH_TSA_CXX:-clang++-14}
command -v "$cxx" >/dev/null || { echo "thread-safety: $cxx not found (apt-get install clang-14)" >&2; exit 1; }
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
start=$(date +%s)
# -O0: the analysis runs in the front end; no code worth optimizing is made.
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_CXX_FLAGS="-Wthread-safety -Werror=thread-safety" \
  -DKVSTASH_WITH_CUDA=OFF -DKVSTASH_BUILD_TESTS=OFF -DKVSTASH_BUILD_BENCH=OFF "${launcher[@]}" >/dev/null
cmake --build "$build_dir" -j "$(nproc)" --target kvstash_backends kvstash_server kvstash_tiers kvstash_client kvstash_shared
echo "thread-safety: backends, server and client libraries pass -Wthread-safety ($(($(date +%s) - start)) s)"
