#!/usr/bin/env bash
# Builds the kvstash Python package once (a wheel, as `pip install .` builds
# it) and runs its pytest suites against kvstashd from $KVSTASH_BIN_DIR
# (default build/bin): the vLLM connector's suites (tests/python/vllm_connector)
# against each vLLM of $KVSTASH_VLLM_VERSIONS, the oldest and the newest the
# connector supports by default, and the other suites once, with the last.
# Then SGLang's HiCache backend suite (tests/python/sglang_backend) against
# SGLang $KVSTASH_SGLANG_VERSION (default 0.5.17; KVSTASH_SKIP_SGLANG=1 skips it).
# Called at the end of scripts/test.sh; arguments go to every pytest run.
#
# Each vLLM has its own venv OUTSIDE the clone, $KVSTASH_CI_CACHE/venv-vllm-<v>
# (default /opt/kvstash-ci; about 8 GB each), made once with that vLLM (and
# its torch), pytest and numpy. Later runs reuse it while it still imports the
# pinned vLLM; installing the package (no dependencies) never reinstalls vLLM
# or torch.
set -euo pipefail
cd "$(dirname "$0")/.."

read -r -a vllm_versions <<<"${KVSTASH_VLLM_VERSIONS:-0.26.0 0.33.0}"
cache=${KVSTASH_CI_CACHE:-/opt/kvstash-ci}
base_python=${KVSTASH_CI_PYTHON:-$( [ -x /usr/bin/python3 ] && echo /usr/bin/python3 || command -v python3)}
export KVSTASH_BIN_DIR=${KVSTASH_BIN_DIR:-$PWD/build/bin}
# The vLLM connector's tests (tests/python/vllm_connector) fail instead of skipping
# when vllm does not import: this script's venvs always have it.
export KVSTASH_REQUIRE_VLLM=1

venv_ok() {  # venv version
  [ -x "$1/bin/python" ] && "$1/bin/python" - "$2" <<'PY' >/dev/null 2>&1
import sys
import numpy, pytest, torch, vllm
sys.exit(0 if vllm.__version__ == sys.argv[1] else 1)
PY
}

make_venv() {  # venv version
  local venv=$1 version=$2
  mkdir -p "$(dirname "$venv")"
  # One creator at a time (parallel CI jobs, or several clones on one machine).
  exec 9>"$venv.lock"
  flock 9
  if ! venv_ok "$venv" "$version"; then
    local free_gb
    free_gb=$(df -Pk "$(dirname "$venv")" | awk 'NR == 2 { print int($4 / 1048576) }')
    if [ "$free_gb" -lt 12 ]; then
      echo "test_python: $venv needs about 8 GB (10 to install) but $(dirname "$venv") has" \
           "${free_gb} GB free; free some, or point KVSTASH_CI_CACHE elsewhere" >&2
      exit 1
    fi
    echo "test_python: creating $venv with vllm==$version (one time, several minutes)"
    rm -rf "$venv"
    "$base_python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    "$venv/bin/python" -m pip install --quiet "vllm==$version" pytest numpy
    venv_ok "$venv" "$version" || {
      echo "test_python: $venv does not import vllm $version after install" >&2
      exit 1
    }
  fi
  flock -u 9
  exec 9>&-
}

# SGLang's HiCache backend suite (tests/python/sglang_backend) runs in its own
# venv, $KVSTASH_CI_CACHE/venv-sglang-<v> (about 5 GB): torch (its PyPI build,
# run on the CPU), what SGLang's HiCache modules import
# (tests/python/sglang_backend/requirements.txt), and sglang itself without
# its dependencies (the rest of them are GPU kernels and servers the suite
# never loads). Made once, like the vLLM venvs; the first time takes about
# 8 minutes, mostly downloads.
sglang_version=${KVSTASH_SGLANG_VERSION:-0.5.17}
sglang_venv=$cache/venv-sglang-$sglang_version

sglang_venv_ok() {  # venv version
  [ -x "$1/bin/python" ] && "$1/bin/python" - "$2" <<'PY' >/dev/null 2>&1
import sys
import numpy, pytest, torch
from importlib.metadata import version
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory
sys.exit(0 if version("sglang") == sys.argv[1] else 1)
PY
}

make_sglang_venv() {  # venv version
  local venv=$1 version=$2
  mkdir -p "$(dirname "$venv")"
  exec 9>"$venv.lock"
  flock 9
  if ! sglang_venv_ok "$venv" "$version"; then
    local free_gb
    free_gb=$(df -Pk "$(dirname "$venv")" | awk 'NR == 2 { print int($4 / 1048576) }')
    if [ "$free_gb" -lt 8 ]; then
      echo "test_python: $venv needs about 5.5 GB (7 to install) but $(dirname "$venv") has" \
           "${free_gb} GB free; free some, point KVSTASH_CI_CACHE elsewhere, or set KVSTASH_SKIP_SGLANG=1" >&2
      exit 1
    fi
    echo "test_python: creating $venv with sglang==$version (one time, several minutes)"
    rm -rf "$venv"
    "$base_python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    "$venv/bin/python" -m pip install --quiet -r tests/python/sglang_backend/requirements.txt
    "$venv/bin/python" -m pip install --quiet --no-deps "sglang==$version"
    sglang_venv_ok "$venv" "$version" || {
      echo "test_python: $venv does not import sglang $version's HiCache modules" >&2
      exit 1
    }
  fi
  flock -u 9
  exec 9>&-
}

for version in "${vllm_versions[@]}"; do
  make_venv "$cache/venv-vllm-$version" "$version"
done
if [ "${KVSTASH_SKIP_SGLANG:-0}" != 1 ]; then
  make_sglang_venv "$sglang_venv" "$sglang_version"
fi

# One wheel for every venv: the package does not depend on the vLLM version.
wheel_dir=$(mktemp -d)
trap 'rm -rf "$wheel_dir"' EXIT
first_venv=$cache/venv-vllm-${vllm_versions[0]}
echo "test_python: building the kvstash wheel"
"$first_venv/bin/python" -m pip wheel --quiet --no-deps --wheel-dir "$wheel_dir" .
wheel=("$wheel_dir"/*.whl)

# pytest from outside the clone's python/ folder so that `import kvstash` is
# the installed wheel, not the sources. Exit status 5: nothing collected.
status=0
summary=()
last=$(( ${#vllm_versions[@]} - 1 ))
for i in "${!vllm_versions[@]}"; do
  version=${vllm_versions[$i]}
  venv=$cache/venv-vllm-$version
  "$venv/bin/python" -m pip install --quiet --no-deps --force-reinstall "${wheel[0]}"
  if [ "$i" -eq "$last" ]; then
    suites=("$PWD/tests/python" --ignore="$PWD/tests/python/sglang_backend")
  else
    suites=("$PWD/tests/python/vllm_connector")
  fi
  echo "test_python: vLLM $version: pytest ${suites[*]#$PWD/}"
  run=0
  "$venv/bin/python" -m pytest -q -rs -p no:cacheprovider "${suites[@]}" "$@" || run=$?
  if [ "$run" -eq 5 ]; then
    echo "test_python: vLLM $version: pytest collected no tests" >&2
    run=1
  fi
  summary+=("vLLM $version: $([ "$run" -eq 0 ] && echo passed || echo "FAILED (pytest exit $run)")")
  [ "$run" -eq 0 ] || status=1
done
if [ "${KVSTASH_SKIP_SGLANG:-0}" != 1 ]; then
  "$sglang_venv/bin/python" -m pip install --quiet --no-deps --force-reinstall "${wheel[0]}"
  echo "test_python: SGLang $sglang_version: pytest tests/python/sglang_backend"
  run=0
  KVSTASH_REQUIRE_SGLANG=1 "$sglang_venv/bin/python" -m pytest -q -rs -p no:cacheprovider \
    "$PWD/tests/python/sglang_backend" "$@" || run=$?
  [ "$run" -ne 5 ] || { echo "test_python: SGLang: pytest collected no tests" >&2; run=1; }
  summary+=("SGLang $sglang_version: $([ "$run" -eq 0 ] && echo passed || echo "FAILED (pytest exit $run)")")
  [ "$run" -eq 0 ] || status=1
fi
printf 'test_python: %s\n' "${summary[@]}"
exit "$status"
