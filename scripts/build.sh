#!/usr/bin/env bash
# Installs the OS packages (scripts/setup.sh), then configures and builds
# kvstash into ${KVSTASH_BUILD_DIR:-build}. CUDA sources compile where nvcc
# is found (for CMAKE_CUDA_ARCHITECTURES, default 90); otherwise the host
# backend alone builds.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
build_dir=${KVSTASH_BUILD_DIR:-build}
# nvcc is often installed outside PATH.
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE="${KVSTASH_BUILD_TYPE:-Release}" ${KVSTASH_CMAKE_ARGS:-}
cmake --build "$build_dir" -j "$(nproc)"
