"""Tournament profiles for `specpilot bench tournament`: the source article's head-to-heads, and generated ones.

    cd harness/specpilot_harness/bench/profiles
    python -m specpilot_harness.bench.tournament_profiles article > tournaments-article.json
    python -m specpilot_harness.bench.tournament_profiles dev     > tournaments-dev.json
    python -m specpilot_harness.bench.tournament_profiles holdout > tournaments-holdout.json
    python -m specpilot_harness.bench.tournament_profiles holdout2 > tournaments-holdout2.json
    python -m specpilot_harness.bench.tournament_profiles holdout3 > tournaments-holdout3.json
    python -m specpilot_harness.bench.tournament_profiles holdout4 > tournaments-holdout4.json

Article: each entry is calibrated as `calibrate.py` calibrates a profile (acceptance fitted so that, with
the H200 step times at the article's load, the entry's best N and speedup over no speculation are the
article's), so every entry of a tournament shares the target's step time at N = 0 and the comparison is
the article's. Where the article gives no number for one side, the assumption is in the entry's source.

Generated (`dev`: seeds 4000..4029, tuned on; `holdout`: 5000..5029, never looked at while tuning;
`holdout2`: 7000..7059, a second held-out split, first run after the first had been looked at; `holdout3`:
8000..8059, a third, first run after both had been traced; `holdout4`: 14000..14059, a fourth, made to
check the false-promotion rate once on tournaments nobody had looked at): per
seed a machine of one cost-shape family (as `generate.py` draws them: dense, moe, tp, old-gpu, compute),
one load mix, and 2-3 distinct methods, each with its own drafter cost (0.5-2x) and acceptance curve; the
deployment starts at the first method's common N.
"""

from __future__ import annotations

import json
import sys

import numpy as np

from specpilot_runtime.speculative import METHODS, Family

from . import calibrate, generate
from .calibrate import ARTICLE_LOAD, Target

SPLITS = {"dev": range(4000, 4030), "holdout": range(5000, 5030), "holdout2": range(7000, 7060),
          "holdout3": range(8000, 8060), "holdout4": range(14000, 14060)}

# (name, start method, load mix, entries). An entry is a calibration Target (its name says which article
# result it is); entries of one tournament share the load mix.
HEAD_TO_HEADS: tuple[tuple[str, str, dict[int, float], tuple[Target, ...]], ...] = (
    ("qwen35-27b-gsm8k-mtp-vs-dflash", "mtp", {ARTICLE_LOAD: 1.0}, (
        Target("mtp", "mtp", 7, 5, 2.0, "Qwen3.5-27B MTP best N=5 on GSM8K, ~2.0x"),
        Target("dflash", "dflash", 15, 7, 1.75,
               "Qwen3.5-27B: built-in MTP beat DFlash; DFlash 1.75x at N=7 assumed"))),
    ("qwen36-35b-a3b-mtp-vs-dflash", "mtp", {ARTICLE_LOAD: 1.0}, (
        Target("mtp", "mtp", 7, 6, 1.49, "Qwen3.6-35B-A3B MTP 1.28-1.49x, best N=6; drafter factor 1.8",
               factor=1.8),
        Target("dflash", "dflash", 15, 7, 2.06, "Qwen3.6-35B-A3B DFlash 1.77-2.06x, best N=7"))),
    ("qwen3-8b-math500-eagle3-vs-dspark-vs-off", "eagle3", {ARTICLE_LOAD: 1.0}, (
        Target("eagle3", "eagle3", 7, 0, 0.95, "Qwen3-8B EAGLE-3 below baseline on MATH500 (best N>=1 0.95x)"),
        Target("dspark", "dspark", 15, 3, 1.15, "Qwen3-8B DSpark 1.15x on MATH500; best N=3 assumed"))),
    ("qwen3-8b-gsm8k-eagle3-vs-dflash-vs-dspark", "eagle3", {ARTICLE_LOAD: 1.0}, (
        Target("eagle3", "eagle3", 7, 3, 1.35, "Qwen3-8B EAGLE-3 on GSM8K ~1.35x at N=3 (assumed)"),
        Target("dflash", "dflash", 15, 7, 1.27, "Qwen3-8B DFlash 1.08-1.27x; 1.27x at N=7 assumed"),
        Target("dspark", "dspark", 15, 7, 1.63, "Qwen3-8B DSpark 1.63x on GSM8K, best N=7"))),
    ("gemma4-26b-mtp-vs-dflash", "mtp", {ARTICLE_LOAD: 1.0}, (
        Target("mtp", "mtp", 7, 4, 2.74, "gemma-4-26B-A4B MTP assistant 2.74x on GSM8K; best N=4 assumed"),
        Target("dflash", "dflash", 15, 7, 2.87, "gemma-4-26B-A4B DFlash 2.87x on MATH500; best N=7 assumed; "
                                                 "a close call (the article's two sets differ)"))),
    ("kimi-k25-eagle3-vs-dflash", "eagle3", {ARTICLE_LOAD: 1.0}, (
        Target("eagle3", "eagle3", 7, 4, 2.33, "Kimi-K2.5 EAGLE-3 up to 2.33x, best N=4; drafter factor 0.6",
               factor=0.6),
        Target("dflash", "dflash", 15, 7, 2.68, "Kimi-K2.5 DFlash up to 2.68x, best N=7"))),
    ("qwen36-35b-a3b-dflash-start", "dflash", {ARTICLE_LOAD: 1.0}, (
        Target("mtp", "mtp", 7, 6, 1.49, "as qwen36-35b-a3b-mtp-vs-dflash, started at the winner", factor=1.8),
        Target("dflash", "dflash", 15, 7, 2.06, "Qwen3.6-35B-A3B DFlash 1.77-2.06x, best N=7"))),
    ("qwen36-35b-a3b-busy-mtp-vs-dflash", "mtp", {64: 0.5, 128: 0.5}, (
        Target("mtp", "mtp", 7, 6, 1.49, "the Qwen3.6-35B-A3B MTP curve at 64-128 sequences per pod",
               factor=1.8),
        Target("dflash", "dflash", 15, 7, 2.06, "the Qwen3.6-35B-A3B DFlash curve at 64-128 sequences per pod"))),
    ("qwen35-27b-mixed-mtp-vs-dflash", "mtp", {16: 0.7, 64: 0.3}, (
        Target("mtp", "mtp", 7, 5, 2.0, "the Qwen3.5-27B GSM8K MTP curve at 16 and 64 sequences per pod"),
        Target("dflash", "dflash", 15, 7, 1.75, "the DFlash curve above at 16 and 64 sequences per pod"))),
)


def _entry(t: Target, conc: dict[int, float]) -> dict:
    a1, ainf = calibrate.fit(t)
    curve = calibrate.survival(a1, ainf, t.max_n)
    by_n = calibrate.survival_by_n(t.method, curve, t.max_n)
    steps = {b: calibrate.step_times(t.method, t.factor, t.max_n, b) for b in generate.step_loads(list(conc))}
    out = {"method": t.method, "max_n": t.max_n, "survival": [round(s, 5) for s in curve],
           "step_time_ms": {str(b): [round(x, 4) for x in row] for b, row in steps.items()},
           "calibration": {"source": t.source, "a1": round(a1, 4), "a_inf": round(ainf, 4),
                           "drafter_factor": t.factor}}
    if by_n:
        out["survival_by_n"] = {str(n): [round(s, 5) for s in v] for n, v in by_n.items()}
    return out


def article() -> dict:
    return {"tournaments": [
        {"name": name, "start": {"method": start, "n": METHODS[start].default_n},
         "concurrency": {str(b): w for b, w in conc.items()}, "noise": calibrate.NOISE,
         "entries": [_entry(t, conc) for t in targets]}
        for name, start, conc, targets in HEAD_TO_HEADS]}


def generated(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    family = generate.FAMILIES[seed % len(generate.FAMILIES)]
    conc = generate.draw_loads(rng, family)
    shape = generate.draw_shape(rng, family)
    methods = [str(m) for m in rng.choice(generate.METHOD_CHOICES, size=int(rng.integers(2, 4)), replace=False)]
    entries = []
    for method in methods:
        max_n = generate.draw_max_n(method, rng)
        s, acc = generate.draw_survival(rng, max_n)
        entry: dict = {"method": method, "max_n": max_n, "survival": s}
        if METHODS[method].family is Family.PARALLEL:
            entry["survival_by_n"], extra = generate.draw_survival_by_n(rng, s, max_n)
            acc.update(extra)
        factor = float(rng.uniform(0.5, 2.0))
        entry["step_time_ms"] = generate.shape_step_times(shape, method, factor, max_n,
                                                        generate.step_loads([int(b) for b in conc]))
        entry["generator"] = {"acceptance": acc, "cost": generate.cost_info(shape, factor)}
        entries.append(entry)
    start = methods[0]
    return {"name": f"tour-{family}-{'-'.join(methods)}-{seed}", "family": family,
            "start": {"method": start, "n": min(METHODS[start].default_n, entries[0]["max_n"])},
            "concurrency": conc, "noise": generate.NOISE, "generator": {"seed": seed}, "entries": entries}


def build(split: str) -> dict:
    if split == "article":
        return article()
    return {"split": split, "seeds": [SPLITS[split][0], SPLITS[split][-1]],
            "tournaments": [generated(seed) for seed in SPLITS[split]]}


if __name__ == "__main__":
    split = sys.argv[1] if len(sys.argv) > 1 else "article"
    if split != "article" and split not in SPLITS:
        sys.exit(f"usage: python -m specpilot_harness.bench.tournament_profiles {{article|{'|'.join(SPLITS)}}}")
    print(json.dumps(build(split), indent=1))
