"""Generated benchmark profiles: cost shapes x acceptance curves x load mixes, broad on purpose.

    python -m specpilot_harness.bench.generate dev     > harness/specpilot_harness/bench/profiles/generated-dev.json
    python -m specpilot_harness.bench.generate holdout > harness/specpilot_harness/bench/profiles/generated-holdout.json
    python -m specpilot_harness.bench.generate holdout2 > harness/specpilot_harness/bench/profiles/generated-holdout2.json
    python -m specpilot_harness.bench.generate holdout3 > harness/specpilot_harness/bench/profiles/generated-holdout3.json
    python -m specpilot_harness.bench.generate holdout4 > harness/specpilot_harness/bench/profiles/generated-holdout4.json

Each profile comes from one generator seed (`dev`: seeds 0..49, tuned on; `holdout`: seeds 1000..1049,
never looked at while tuning; `holdout2`: seeds 6000..6099, first run after the first held-out split had
been looked at for many sessions; `holdout3`: seeds 9000..9099, first run after both had been traced;
`holdout4`: seeds 12000..12099, first run after all three had been traced, to check what was tried on
them). The seed picks, at random:

- a cost shape family (seed mod 5, so the families are balanced) with random parameters:
  `dense` (a measured dense table, 8B or 32B, its load axis stretched by 0.7-1.4x), `moe` (a random blend
  of two measured MoE tables), `tp` (a dense table plus a fixed per-step cost of 30-150% of a plain step,
  flat in N: all-reduces, host overhead), `old-gpu` (the 8B table at 2-6x the load: a GPU that saturates
  early) and `compute` (a parametric roofline whose cost grows with tokens from one sequence: a CPU);
  drafter cost scaled by 0.5-2x;
- an acceptance curve: conditional acceptance moving geometrically from a_1 to a_inf (weak or strong,
  rising or falling with depth); for parallel drafters the curve also depends on N (longer blocks accept
  less at every position, or the curve drops past a point in the block);
- a load mix: one level in 1..256 (1..16 on `compute`) or two levels with a random split.

Step times are the tables' shapes; their level does not matter to the oracle. The generator never reads
the tuner's prior: the measured tables are the machines, the perturbations are what no prior has seen.

Mixed-load profiles (where a batch-size schedule of N pays), from the same pieces:

    cd harness/specpilot_harness/bench/profiles
    python -m specpilot_harness.bench.generate mixed         > mixed-load.json
    python -m specpilot_harness.bench.generate mixed-holdout > mixed-load-holdout.json
    python -m specpilot_harness.bench.generate mixed-holdout2 > mixed-load-holdout2.json
    python -m specpilot_harness.bench.generate mixed-holdout3 > mixed-load-holdout3.json

One profile per seed (`mixed`: 2000..2009, `mixed-holdout`: 3000..3009, never tuned on, `mixed-holdout2`:
3100..3119, and `mixed-holdout3`: 3200..3219, a second and a third held-out split): even seeds a
chain drafter (mtp, eagle3, draft_model; N up to 7), odd seeds a parallel one (dflash, dspark; N up to 15),
a GPU cost family (dense, moe, tp, old-gpu in turn), an acceptance curve as above, and a load mix of 3-5
levels out of 1, 4, 16, 64, 256 sequences per pod spanning at least 1-4 to 64-256, with random shares of
the time (at least 10% each). A draw is kept only when the best N falls with load (the lightest level's
best K above the heaviest's) and the per-load oracle (`report.per_load_oracle_started`: the best schedule
vLLM can serve, parallel drafters' K under the started N's curve) beats the best single N by at least
MIXED_MIN_GAIN over the mix; otherwise the seed's generator draws again (the attempt is recorded).
"""

from __future__ import annotations

import json
import math
import sys

import numpy as np

from specpilot.tuning import costs
from specpilot_runtime.speculative import METHODS, Family

FAMILIES = ("dense", "moe", "tp", "old-gpu", "compute")
SPLITS = {"dev": range(0, 50), "holdout": range(1000, 1050), "holdout2": range(6000, 6100),
          "holdout3": range(9000, 9100), "holdout4": range(12000, 12100)}
MIXED_SPLITS = {"mixed": range(2000, 2010), "mixed-holdout": range(3000, 3010),
                "mixed-holdout2": range(3100, 3120), "mixed-holdout3": range(3200, 3220)}
MIXED_LOADS = (1, 4, 16, 64, 256)
MIXED_FAMILIES = ("dense", "moe", "tp", "old-gpu")
CHAIN_METHODS = ("mtp", "eagle3", "draft_model")
PARALLEL_METHODS = ("dflash", "dspark")
MIXED_MIN_GAIN = 0.02  # per-load oracle over the best single N, over the load mix
MIXED_MIN_SHARE = 0.1  # of the time, per load level
MIXED_ATTEMPTS = 200
METHOD_CHOICES = ("mtp", "eagle3", "draft_model", "ngram", "dflash", "dspark")
LOADS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
CPU_LOADS = (1, 2, 4, 8, 16)
NOISE = 0.10


def draw_max_n(method: str, rng: np.random.Generator) -> int:
    if METHODS[method].family is Family.PARALLEL:
        return int(rng.choice([7, 15]))
    return 8 if method == "ngram" else 7


def draw_survival(rng: np.random.Generator, n: int) -> tuple[list[float], dict]:
    """Conditional acceptance from a_1 towards a_inf (rate 0.5 per position): S_k = a_1 ... a_k."""
    strong = rng.random() < 0.5
    a1 = float(rng.uniform(0.6, 0.92) if strong else rng.uniform(0.25, 0.6))
    a_inf = float(np.clip(a1 + rng.uniform(-0.3, 0.3), 0.2, 0.97))
    s, prev = [], 1.0
    for j in range(n):
        a = a_inf + (a1 - a_inf) * 0.5 ** j
        prev *= a
        s.append(round(prev, 5))
    return s, {"a1": round(a1, 3), "a_inf": round(a_inf, 3)}


def draw_survival_by_n(rng: np.random.Generator, s: list[float], max_n: int) -> tuple[dict[str, list[float]], dict]:
    """Parallel drafters: S_k(N) depends on N (dilution with block length, or a drop past a point)."""
    kind = str(rng.choice(["dilute", "drop"]))
    out = {}
    if kind == "dilute":
        rate = float(rng.uniform(0.0, 0.04))
        for n in range(1, max_n + 1):
            out[str(n)] = [round(x * math.exp(-rate * (n - 1)), 5) for x in s[:n]]
        return out, {"by_n": kind, "rate": round(rate, 4)}
    at = int(rng.integers(3, max_n + 1))
    factor = float(rng.uniform(0.6, 0.95))
    for n in range(at, max_n + 1):
        out[str(n)] = [round(x * (factor if k + 1 >= at else 1.0), 5) for k, x in enumerate(s[:n])]
    return out, {"by_n": kind, "at": at, "factor": round(factor, 3)}


def draw_loads(rng: np.random.Generator, family: str) -> dict[str, float]:
    levels = CPU_LOADS if family == "compute" else LOADS
    if rng.random() < 0.5:
        return {str(int(rng.choice(levels))): 1.0}
    a, b = sorted(int(x) for x in rng.choice(levels, size=2, replace=False))
    w = round(float(rng.uniform(0.2, 0.8)), 2)
    return {str(a): w, str(b): round(1.0 - w, 2)}


def draw_shape(rng: np.random.Generator, family: str) -> dict:
    """A machine of the family, at random: what every drafter on it shares."""
    if family == "compute":
        # Roofline of one pod: a memory-bound floor and compute that grows with the B (N + 1) tokens.
        sat = float(np.exp(rng.uniform(0.0, math.log(16.0))))  # tokens per step where compute = memory floor
        head = float(rng.uniform(0.03, 0.3))  # drafter head (or block pass) relative to the target
        return {"family": family, "sat_tokens": sat, "head": head}
    stretch, fixed, shapes = 1.0, 0.0, ["h200-dense8b"]
    if family == "dense":
        shapes = [str(rng.choice(["h200-dense8b", "h200-dense32b"]))]
        stretch = float(rng.uniform(0.7, 1.4))
    elif family == "moe":
        shapes = [str(x) for x in rng.choice(["h200-moe-a3b-uniform", "h200-moe-a3b-pool32", "h200-moe512"],
                                             size=2, replace=False)]
    elif family == "tp":
        shapes = [str(rng.choice(["h200-dense8b", "h200x2-dense70b-tp2"]))]
        fixed = float(rng.uniform(0.3, 1.5))
    else:  # old-gpu
        stretch = float(rng.uniform(2.0, 6.0))
    blend = float(rng.uniform(0.0, 1.0))
    return {"family": family, "shapes": shapes, "load_stretch": stretch, "fixed": fixed, "blend": blend}


def shape_step_times(shape: dict, method: str, factor: float, max_n: int, loads: list[int]) -> dict[str, list[float]]:
    """Step times t(N, B) in ms of one drafter (cost `factor` x the measured one) on the machine `shape`."""
    fam = METHODS[method].family
    if shape["family"] == "compute":
        sat, head = shape["sat_tokens"], shape["head"]

        def tgt(n: int, b: float) -> float:
            return math.hypot(1.0, b * (n + 1) / sat)

        def drf(n: int, b: float) -> float:
            if n == 0 or fam in (Family.NONE, Family.NEAR_FREE):
                return 0.0
            per = head * factor * math.hypot(1.0, b / sat)
            return per * (n if fam is Family.SEQUENTIAL else math.hypot(1.0, b * (n + 1) / sat) / math.hypot(1.0, b / sat))

        return {str(b): [round(10.0 * (tgt(n, b) + drf(n, b)), 4) for n in range(max_n + 1)] for b in loads}
    shapes, stretch, fixed, blend = shape["shapes"], shape["load_stretch"], shape["fixed"], shape["blend"]

    def t(n: int, b: float) -> float:
        # Shapes blend as relative costs t(N) / t(0), at the first shape's level.
        bb = b * stretch
        rel = [(costs.target_ms(n, bb, s) + factor * costs.drafter_ms(fam, n, bb, s)) / costs.target_ms(0, bb, s)
               for s in shapes]
        r = rel[0] if len(rel) == 1 else blend * rel[0] + (1 - blend) * rel[1]
        level = costs.target_ms(0, bb, shapes[0])
        return level * (r + fixed)

    return {str(b): [round(t(n, float(b)), 4) for n in range(max_n + 1)] for b in loads}


def step_loads(levels: list[int]) -> list[int]:
    """Loads a profile's step times are tabulated at: its load levels and every power of two below the
    highest. A canary takes a share of the traffic, so pods run between levels (one canary pod beside three
    stable ones at a level of 32 runs 24 each); tabulated at its levels alone, a profile holds the lowest
    level's step time below it, a machine whose steps never get cheaper with fewer sequences."""
    top = max(levels)
    return sorted(set(levels) | {2 ** i for i in range(int(math.log2(top)) + 1)})


def cost_info(shape: dict, factor: float) -> dict:
    info: dict = {"drafter_factor": round(factor, 3)}
    if shape["family"] == "compute":
        info.update(sat_tokens=round(shape["sat_tokens"], 3), head=round(shape["head"], 3))
    else:
        info.update(shapes=shape["shapes"], load_stretch=round(shape["load_stretch"], 3),
                    fixed=round(shape["fixed"], 3), blend=round(shape["blend"], 3))
    return info


def _step_times(rng: np.random.Generator, family: str, method: str, max_n: int,
                loads: list[int]) -> tuple[dict[str, list[float]], dict]:
    factor = float(rng.uniform(0.5, 2.0))
    shape = draw_shape(rng, family)
    return shape_step_times(shape, method, factor, max_n, step_loads(loads)), cost_info(shape, factor)


def profile(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    family = FAMILIES[seed % len(FAMILIES)]
    method = str(rng.choice(METHOD_CHOICES))
    max_n = draw_max_n(method, rng)
    s, acc = draw_survival(rng, max_n)
    out: dict = {"name": f"gen-{family}-{method}-{seed}", "family": family, "method": method, "max_n": max_n,
                 "survival": s}
    if METHODS[method].family is Family.PARALLEL:
        out["survival_by_n"], extra = draw_survival_by_n(rng, s, max_n)
        acc.update(extra)
    conc = draw_loads(rng, family)
    steps, cost = _step_times(rng, family, method, max_n, [int(b) for b in conc])
    out.update(step_time_ms=steps, concurrency=conc, noise=NOISE,
               generator={"seed": seed, "acceptance": acc, "cost": cost})
    return out


def _mixed_loads(rng: np.random.Generator) -> dict[str, float]:
    """3-5 of MIXED_LOADS spanning light (1 or 4) to heavy (64 or 256), random shares of the time."""
    light = [int(rng.choice(MIXED_LOADS[:2]))]
    heavy = [int(rng.choice(MIXED_LOADS[3:]))]
    rest = [b for b in MIXED_LOADS if b not in light + heavy]
    extra = [int(b) for b in rng.choice(rest, size=int(rng.integers(1, len(rest) + 1)), replace=False)]
    levels = sorted(light + heavy + extra)
    # Every level at least MIXED_MIN_SHARE of the time: a level seen in two windows of a 48-window round is
    # no part of a load mix that a schedule (or anything else) can be measured on.
    w = MIXED_MIN_SHARE + (1.0 - MIXED_MIN_SHARE * len(levels)) * rng.dirichlet(np.ones(len(levels)))
    return {str(b): round(float(x), 2) for b, x in zip(levels, w)}


def mixed_profile(seed: int) -> dict:
    """One mixed-load profile: the best K differs by load and a schedule of it beats any single N."""
    from specpilot_harness.sim.profile import Profile  # the schema the benchmark reads

    from .report import per_load_oracle_started

    rng = np.random.default_rng(seed)
    parallel = seed % 2 == 1
    family = MIXED_FAMILIES[(seed // 2) % len(MIXED_FAMILIES)]
    for attempt in range(MIXED_ATTEMPTS):
        method = str(rng.choice(PARALLEL_METHODS if parallel else CHAIN_METHODS))
        max_n = 15 if parallel else 7
        s, acc = draw_survival(rng, max_n)
        out: dict = {"name": f"mix-{family}-{method}-{seed}", "family": family, "method": method,
                     "max_n": max_n, "survival": s}
        if parallel:
            out["survival_by_n"], extra = draw_survival_by_n(rng, s, max_n)
            acc.update(extra)
        conc = _mixed_loads(rng)
        steps, cost = _step_times(rng, family, method, max_n, [int(b) for b in conc])
        out.update(step_time_ms=steps, concurrency=conc, noise=NOISE)
        p = Profile.model_validate(out)
        ks, g_load, started = per_load_oracle_started(p)
        gain = g_load / p.goodput(p.oracle_n()) - 1.0
        by_load = [ks[b] for b in sorted(ks)]
        if by_load[0] > by_load[-1] and gain >= MIXED_MIN_GAIN:
            out["generator"] = {"seed": seed, "attempt": attempt, "acceptance": acc, "cost": cost,
                                "best_k_by_load": {str(b): k for b, k in ks.items()}, "started_n": started,
                                "best_single_n": p.oracle_n(), "per_load_gain_pct": round(100 * gain, 2)}
            return out
    raise RuntimeError(f"seed {seed}: no mixed-load profile in {MIXED_ATTEMPTS} draws")


def build(split: str) -> dict:
    if split in MIXED_SPLITS:
        return {"split": split, "seeds": [MIXED_SPLITS[split][0], MIXED_SPLITS[split][-1]],
                "profiles": [mixed_profile(seed) for seed in MIXED_SPLITS[split]]}
    return {"split": split, "seeds": [SPLITS[split][0], SPLITS[split][-1]],
            "profiles": [profile(seed) for seed in SPLITS[split]]}


if __name__ == "__main__":
    split = sys.argv[1] if len(sys.argv) > 1 else "dev"
    if split not in SPLITS and split not in MIXED_SPLITS:
        names = "|".join([*SPLITS, *MIXED_SPLITS])
        sys.exit(f"usage: python -m specpilot_harness.bench.generate {{{names}}}")
    print(json.dumps(build(split), indent=1))
