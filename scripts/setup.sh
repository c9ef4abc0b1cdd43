#!/usr/bin/env bash
# Installs the OS packages kvstash builds against. Idempotent; Debian 12 and
# Ubuntu 24.04. Runs apt-get as root (directly, or through sudo when present).
set -euo pipefail

packages=(
  build-essential cmake pkg-config git
  libzmq3-dev cppzmq-dev
  libflatbuffers-dev flatbuffers-compiler
  libspdlog-dev libfmt-dev
  libcli11-dev
  libgtest-dev libgmock-dev
  libssl-dev
  libcpp-httplib-dev nlohmann-json3-dev
  libhiredis-dev liburing-dev libxxhash-dev   # the tiers: hiredis (L3), io_uring (L2), XXH3
  redis-server redis-tools  # the L3 tests start their own redis-server (and a cluster via redis-cli)
  python3 python3-yaml python3-prometheus-client
  clang-14 libclang-rt-14-dev llvm-14   # scripts/fuzz.sh: libFuzzer, sanitizers, symbolizer
  clang-format-14                       # scripts/format.sh --check (scripts/test.sh)
  python3-venv  # scripts/test_python.sh: the CI venv (pip install ., pytest, vLLM)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all packages present"
  exit 0
fi

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo_cmd=(sudo)
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
