#!/usr/bin/env bash
# Serve a model with vLLM and kvstash as its KV connector (vLLM 0.26.0 to 0.33.0).
#
#   kvstashd --socket ipc:///run/kvstash/kvstash.sock --l1-gb 64 &   # the sidecar, once per node
#   pip install '.[vllm]'        # at the repository root: the kvstash package and vLLM
#   examples/vllm_serve.sh meta-llama/Llama-3.1-8B-Instruct
#
# Settings go in kv_connector_extra_config (docs/vllm.md): socket (default
# $KVSTASH_SOCKET, then ipc:///run/kvstash/kvstash.sock), model (default: the
# served model name), tenant, timeout_ms, lease_ms. kvstashd's --chunk-tokens
# (default 256) must be a multiple of vLLM's --block-size (default 16).
set -euo pipefail

MODEL="${1:?usage: $0 MODEL [vllm serve arguments...]}"
shift
SOCKET="${KVSTASH_SOCKET:-ipc:///run/kvstash/kvstash.sock}"

exec vllm serve "$MODEL" \
  --kv-transfer-config "{\"kv_connector\": \"KvstashConnector\", \"kv_connector_module_path\": \"kvstash.integrations.vllm\", \"kv_role\": \"kv_both\", \"kv_load_failure_policy\": \"recompute\", \"kv_connector_extra_config\": {\"socket\": \"$SOCKET\"}}" \
  "$@"
