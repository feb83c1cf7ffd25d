"""Structural benchmark profiles: shapes the tuner's models cannot express, made from another generator's
profiles by deforming them, never by fitting them.

    python -m specpilot_harness.bench.structural > harness/specpilot_harness/bench/profiles/structural.json
    python -m specpilot_harness.bench.structural --mixed > harness/specpilot_harness/bench/profiles/structural-mixed.json

Each base profile (the generated held-out split, chain and lookup drafters, one load level) gets one
deformation, at random (seeded):
- `cliff`: every N past the best one steps 6-20% slower (a CUDA-graph capture size or a kernel's tile
  that the larger verify batch no longer fits): the N after the best is the cliff's first victim;
- `cap`: only the largest 1-2 N step 15-25% slower (graphs captured up to a size, eager above it);
- `bump`: one N in the middle steps 8-15% slower than both neighbours (a non-monotone step time);
- `peak`: acceptance collapses after a position (a drafter trained on short drafts): conditional
  acceptance past position p drops to 5-15% of what it was, a sharp peak of goodput at p.
A deformed profile keeps its name with the deformation appended, so a result says which shape it had.
"""

from __future__ import annotations

import json
import sys
from importlib import resources

import numpy as np

from specpilot_harness.sim.profile import Profile, load_profiles
from specpilot_runtime.speculative import METHODS, Family

SEED = 7100
SHAPES = ("cliff", "cap", "bump", "peak")
BASE = "generated-holdout4.json"


def _deform(p: Profile, shape: str, rng: np.random.Generator) -> Profile | None:
    best = p.oracle_n()
    rows = {b: list(r) for b, r in p.step_time_ms.items()}
    survival = list(p.survival)
    if shape == "cliff":
        if best >= p.max_n:
            return None
        f = rng.uniform(1.06, 1.20)
        rows = {b: [t * (f if n > best else 1.0) for n, t in enumerate(r)] for b, r in rows.items()}
    elif shape == "cap":
        top = int(rng.integers(1, 3))
        f = rng.uniform(1.15, 1.25)
        rows = {b: [t * (f if n > p.max_n - top else 1.0) for n, t in enumerate(r)] for b, r in rows.items()}
    elif shape == "bump":
        if p.max_n < 3:
            return None
        at = int(rng.integers(1, p.max_n))
        f = rng.uniform(1.08, 1.15)
        rows = {b: [t * (f if n == at else 1.0) for n, t in enumerate(r)] for b, r in rows.items()}
    else:
        at = int(rng.integers(2, max(3, p.max_n - 1)))
        keep = rng.uniform(0.05, 0.15)
        cond = [survival[0]] + [survival[k] / survival[k - 1] if survival[k - 1] > 0 else 0.0
                                for k in range(1, len(survival))]
        cond = [c * (keep if k >= at else 1.0) for k, c in enumerate(cond)]
        survival = list(np.cumprod(cond))
    return p.model_copy(update={"name": f"{p.name}-{shape}", "step_time_ms": rows, "survival": survival,
                                "family": shape})


# The mixed-load variant: the same deformations of the mixed-load held-out splits' chain and lookup drafters,
# every load level deformed alike, for schedule mode (K per batch-size band) on shapes no generator made.
MIXED_SEED = 7300
MIXED_BASES = ("mixed-load-holdout2.json", "mixed-load-holdout3.json")


def _bases(name: str) -> list[Profile]:
    text = (resources.files("specpilot_harness.bench") / "profiles" / name).read_text()
    return [p for p in load_profiles(text, name).values()
            if METHODS[p.method].family in (Family.SEQUENTIAL, Family.NEAR_FREE)]


def _deformed(bases: list[Profile], seed: int) -> list[Profile]:
    """One deformation per base, the shapes in turn; those that deform to nothing or to N=0 best are dropped."""
    rng = np.random.default_rng(seed)
    out: list[Profile] = []
    for i, p in enumerate(bases):
        made = _deform(p, SHAPES[i % len(SHAPES)], rng)
        if made is not None and made.oracle_n() > 0:
            out.append(made)
    return out


def build() -> list[Profile]:
    return _deformed([p for p in _bases(BASE) if len(p.concurrency) == 1][:40], SEED)


def build_mixed() -> list[Profile]:
    return _deformed([p for name in MIXED_BASES for p in _bases(name)], MIXED_SEED)


def main() -> None:
    """`python -m specpilot_harness.bench.structural [--mixed]` writes the profile file to stdout."""
    made = build_mixed() if sys.argv[1:] == ["--mixed"] else build()
    profiles = [json.loads(p.model_dump_json(exclude_defaults=True)) for p in made]
    json.dump({"profiles": profiles}, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
