"""Real vLLM (the CPU build) for the harness: tiny models, and the end-to-end tuning run against it."""
