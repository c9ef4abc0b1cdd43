#!/usr/bin/env bash
# The kvstash Python package's GPU tests (tests/python/test_gpu.py, marker
# `gpu`), the GPU Llama example and the Python benchmarks (bench/python_*.py),
# on a machine with a GPU and torch.
# Needs a built tree (kvstashd in $KVSTASH_BIN_DIR, default build/bin; libkvstash.so in
# build/client or $KVSTASH_LIB). Uses the package from python/ (no pip install);
# pass extra pytest arguments after the script name.
#   scripts/gpu_python_tests.sh              # GPU tests + the Llama example
#   PYTHON=/path/to/python scripts/gpu_python_tests.sh -k mla
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
export KVSTASH_BIN_DIR=${KVSTASH_BIN_DIR:-$PWD/build/bin}
export KVSTASH_LIB=${KVSTASH_LIB:-$PWD/build/client/libkvstash.so}
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
"$python" -c "import torch; assert torch.cuda.is_available(), 'torch sees no GPU'; print('torch', torch.__version__, torch.cuda.get_device_name())"
"$python" -m pip show pytest >/dev/null 2>&1 || "$python" -m pip install --quiet pytest numpy

status=0
"$python" -m pytest -q -rs -p no:cacheprovider -m gpu tests/python "$@" || status=$?
[ "$status" -eq 5 ] && { echo "gpu_python_tests: no GPU tests collected" >&2; status=1; }

if "$python" -c "import transformers" 2>/dev/null || "$python" -m pip install --quiet transformers; then
  "$python" examples/llama_gpu_roundtrip.py || status=1
else
  echo "gpu_python_tests: transformers could not be installed; Llama example not run" >&2
  status=1
fi
# Figures for the resolution (not pass/fail): Python's per-call overhead over
# the C++ client (host backend) and Python GB/s on the GPU.
if [ -x "$KVSTASH_BIN_DIR/kvstash_call_latency" ]; then
  "$python" bench/python_call_overhead.py || status=1
fi
"$python" bench/python_gpu_throughput.py || status=1
exit "$status"
