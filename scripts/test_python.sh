#!/usr/bin/env bash
# Builds and installs the kvstash Python package (`pip install .`) into the CI
# virtual environment and runs its pytest suite against kvstashd from
# $KVSTASH_BIN_DIR (default build/bin). Called at the end of scripts/test.sh.
#
# The venv lives OUTSIDE the clone ($KVSTASH_CI_VENV, default
# /opt/kvstash-ci/venv) and is made once: vLLM (pinned below, with torch) for
# the vLLM connector's tests, pytest and numpy. Later runs reuse it when it
# still imports the pinned vLLM; installing the package (no dependencies)
# never reinstalls vLLM or torch.
set -euo pipefail
cd "$(dirname "$0")/.."

VLLM_VERSION=0.32.0
venv=${KVSTASH_CI_VENV:-/opt/kvstash-ci/venv}
base_python=${KVSTASH_CI_PYTHON:-$( [ -x /usr/bin/python3 ] && echo /usr/bin/python3 || command -v python3)}
export KVSTASH_BIN_DIR=${KVSTASH_BIN_DIR:-$PWD/build/bin}
# The vLLM connector's tests (tests/python/vllm_connector) fail instead of skipping
# when vllm does not import: this script's venv always has it.
export KVSTASH_REQUIRE_VLLM=1

venv_ok() {
  [ -x "$venv/bin/python" ] && "$venv/bin/python" - "$VLLM_VERSION" <<'PY' >/dev/null 2>&1
import sys
import numpy, pytest, torch, vllm
sys.exit(0 if vllm.__version__ == sys.argv[1] else 1)
PY
}

mkdir -p "$(dirname "$venv")"
# One creator at a time (parallel CI jobs, or several checkouts sharing the
# machine).
exec 9>"$venv.lock"
flock 9
if ! venv_ok; then
  echo "test_python: creating $venv with vllm==$VLLM_VERSION (one time, several minutes)"
  rm -rf "$venv"
  "$base_python" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --upgrade pip
  "$venv/bin/python" -m pip install --quiet "vllm==$VLLM_VERSION" pytest numpy
  venv_ok || { echo "test_python: $venv does not import vllm $VLLM_VERSION after install" >&2; exit 1; }
fi
flock -u 9

echo "test_python: pip install . into $venv"
"$venv/bin/python" -m pip install --quiet --no-deps --force-reinstall .

# Run from a folder outside the clone's python/ so that `import kvstash` is
# the installed wheel, not the sources.
status=0
"$venv/bin/python" -m pytest -q -rs -p no:cacheprovider "$PWD/tests/python" "$@" || status=$?
if [ "$status" -eq 5 ]; then
  echo "test_python: pytest collected no tests" >&2
  exit 1
fi
exit "$status"
