"""Engine integrations (kvstash.integrations.vllm: the vLLM KV connector)."""
