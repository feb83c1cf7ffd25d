"""specpilot's development harness: the sandbox cluster, simulated vLLM engines, load, demo and benchmarks.

Never imported by the product (specpilot, specpilot_runtime); see docs/architecture.md."""
