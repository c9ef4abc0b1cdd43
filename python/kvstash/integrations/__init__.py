"""Integrations of kvstash into inference engines (``kvstash.integrations.vllm``)."""
