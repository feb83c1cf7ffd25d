"""specpilot's serving-pod runtime: launches and supervises vLLM with a speculative config."""
