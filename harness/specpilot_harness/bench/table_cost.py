"""Table-cost benchmark profiles: article profiles whose pods pay for a batch-size table.

    python -m specpilot_harness.bench.table_cost > harness/specpilot_harness/bench/profiles/table-cost.json

Under switchback the serving pods carry a batch-size table (vLLM's num_speculative_tokens_per_batch_size) so
their K can be set live. On GPUs a table costs every step: vLLM stops padding decode requests to one draft
length and its V1 runner falls back from full CUDA graphs to piecewise ones (+6.6-21.6% TPOT at K = 0,
vllm-project/vllm#49548). Each base profile (the source article's: chain drafters of two methods, a lookup drafter, a
mixed load, a high load, and a parallel drafter, whose pods switchback never gives a table) is copied once per
cost in COSTS as its `table_cost`, named "<base>-table<cost>" with family "table-<cost>", so the bench's
per-family table reads by cost. Nothing else changes: every copy's oracle (the best static N) is its base's,
and a tuner that keeps a costly table shows that cost as regret. Built, not drawn: no randomness.
"""

from __future__ import annotations

import json
import sys
from importlib import resources

from specpilot_harness.sim.profile import Profile, load_profiles

BASE = "article.json"
BASES = ("qwen35-27b-mtp-gsm8k", "qwen3-8b-eagle3-math500", "llama8b-ngram-code-edits",
         "qwen35-27b-mtp-gsm8k-mixed", "qwen3-8b-eagle3-gsm8k-highload", "qwen36-35b-a3b-dflash")
COSTS = (0.0, 0.03, 0.07, 0.12, 0.2)


def build() -> list[Profile]:
    """Every base profile at every cost, bases in BASES' order, costs ascending."""
    text = (resources.files("specpilot_harness.bench") / "profiles" / BASE).read_text()
    profiles = load_profiles(text, BASE)
    return [profiles[name].model_copy(update={"name": f"{name}-table{cost:g}", "family": f"table-{cost:g}",
                                              "table_cost": cost})
            for name in BASES for cost in COSTS]


def main() -> None:
    """`python -m specpilot_harness.bench.table_cost` writes the profile file to stdout."""
    profiles = [json.loads(p.model_dump_json(exclude_defaults=True)) for p in build()]
    json.dump({"profiles": profiles}, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
