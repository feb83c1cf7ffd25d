"""specpilot: a Kubernetes operator that tunes vLLM speculative decoding."""
