"""`specpilot bench slo`: the tuner scored by SLO goodput on a family of profiles with KV capacity.

A family file is a profiles file (it loads as one: `bench tuner` runs it too) with the traffic and the SLOs
on top:

    {"slo": {"ttft": "2s", "tpot": "50ms", "percentile": 0.9}, "prompt_tokens": 256, "output_tokens": 256,
     "profiles": [... each with a "kv" section and its load levels in "concurrency" ...]}

Each profile is run at each of its load levels on its own. A level B (sequences per pod, as everywhere in
the profiles) is served as the request rate at which N = 0 holds B sequences per pod without a KV limit
(Little's law: B over a request's decode time, `output_tokens` steps of t(0, B)), so at every N the pods
get the same requests, and a configuration that holds them longer or in more blocks queues. Per level and
seed, two choices of N, both from the profile's default N:
- the old objective: the tuner on `bench tuner`'s deployment (simulate.py: decode speed alone, no queue);
- the new one: the tuner with the family's SLOs on simulated engines (engine_tuning.py), where its SLO and
  queueing gates see TTFT, waiting requests and preemptions.
Both are scored by the SLO goodput each N serves at that rate (slo_goodput.py), against the best N's.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from rich.console import Console
from rich.table import Table

from specpilot.api.models import Slo, canary_pods

from specpilot_harness.sim.profile import Profile, ProfileError, load_profiles

from .engine_tuning import STABLE_REPLICAS, WINDOW, Requests, tune_on_engines
from .simulate import Fleet
from .slo_goodput import serve
from .strategies import MAX_WINDOWS, run_tuner

SERVE_S = 120.0  # seconds of requests each N is scored on


class Traffic(BaseModel):
    """A family's requests and SLOs (the keys beside "profiles")."""

    model_config = ConfigDict(extra="ignore", frozen=True, allow_inf_nan=False)

    slo: Slo
    prompt_tokens: int = Field(ge=1, le=131072)
    output_tokens: int = Field(ge=2, le=131072)  # a decode phase, so TPOT is defined


@dataclass(frozen=True)
class Family:
    traffic: Traffic
    profiles: list[Profile]


def load_family(text: str, source: str) -> Family:
    """Parse a family file; every error names the field (a profile's as `load_profiles` does)."""
    profiles = list(load_profiles(text, source).values())
    try:
        traffic = Traffic.model_validate(json.loads(text))
    except ValidationError as e:
        first = e.errors()[0]
        raise ProfileError(f"{source}: {'.'.join(str(p) for p in first['loc'])}: {first['msg']}") from e
    for p in profiles:
        if not p.concurrency:
            raise ProfileError(f"{source}: profile {p.name!r}: concurrency: needs the load levels to run at")
    return Family(traffic, profiles)


def request_rate(profile: Profile, level: int, traffic: Traffic) -> float:
    """Requests per second per pod at which N = 0 holds `level` sequences (Little's law)."""
    return level * 1000.0 / (traffic.output_tokens * profile.step_time(0, level))


def old_fleet() -> Fleet:
    """`bench tuner`'s deployment shaped as the engines' one: two stable replicas, replace canaries."""
    return Fleet(STABLE_REPLICAS, canary_pods("replace", STABLE_REPLICAS, 1), measure="canary")


def run_level(profile: Profile, level: int, traffic: Traffic, seed: int, windows: int,
              serve_s: float = SERVE_S) -> dict[str, Any]:
    """One profile at one load level and seed: both choices and the SLO goodput of every N."""
    at_level = profile.model_copy(update={"concurrency": {level: 1.0}})
    requests = Requests(request_rate(profile, level, traffic), traffic.prompt_tokens, traffic.output_tokens)
    old = run_tuner(at_level, seed, windows, "single", old_fleet())
    new = tune_on_engines(at_level, requests, traffic.slo, windows, seed)
    served = {n: serve(at_level, n, requests, traffic.slo, serve_s, seed) for n in range(profile.max_n + 1)}
    goodput = {n: s.slo_goodput for n, s in served.items()}
    best = max(goodput.values())
    return {"name": profile.name, "level": level, "rate": round(requests.rate, 4), "seed": seed,
            "old_n": old.chosen_n, "new_n": new.chosen_n,
            "best_n": [n for n, g in goodput.items() if g >= best],
            "slo_goodput": {str(n): round(g, 1) for n, g in goodput.items()},
            "tpot_median_ms": {str(n): round(1000 * s.tpot_median, 2) for n, s in served.items()},
            "old_share": round(goodput[old.chosen_n] / best, 4) if best else None,
            "new_share": round(goodput[new.chosen_n] / best, 4) if best else None,
            "canaries": len(new.tried), "tried": new.tried, "gate_rollbacks": len(new.gate_rollbacks),
            "gate_reasons": new.gate_rollbacks, "windows": new.windows}


def run_family(family: Family, seeds: int, windows: int, progress: Callable[[str], None],
               serve_s: float = SERVE_S) -> list[dict[str, Any]]:
    rows = []
    for p in family.profiles:
        for level in sorted(p.concurrency):
            for seed in range(seeds):
                r = run_level(p, level, family.traffic, seed, windows, serve_s)
                progress(f"{p.name} at {level} seq/pod seed {seed}: old N={r['old_n']}, new N={r['new_n']} "
                         f"(best {r['best_n']}), {r['gate_rollbacks']} of {r['canaries']} canaries rolled back "
                         f"by a gate")
                rows.append(r)
    return rows


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean SLO goodput of each choice (share of the best N's), and the share of the new objective's canaries
    an SLO or queueing gate rolled back."""
    scored = [r for r in rows if r["old_share"] is not None]  # a level where no N met the SLOs scores none
    canaries = sum(r["canaries"] for r in rows)
    mean = lambda vals: sum(vals) / max(len(vals), 1)  # noqa: E731
    return {"runs": len(rows),
            "old_mean_share": round(mean([r["old_share"] for r in scored]), 4),
            "new_mean_share": round(mean([r["new_share"] for r in scored]), 4),
            "old_mean_slo_goodput": round(mean([float(r["slo_goodput"][str(r["old_n"])]) for r in rows]), 1),
            "new_mean_slo_goodput": round(mean([float(r["slo_goodput"][str(r["new_n"])]) for r in rows]), 1),
            "canaries": canaries, "gate_rollbacks": sum(r["gate_rollbacks"] for r in rows),
            "gate_rollback_share": round(sum(r["gate_rollbacks"] for r in rows) / canaries, 4) if canaries else None}


def table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Per profile and level, over seeds: the N each objective picked, their SLO goodput, the gates."""
    header = ["profile", "seq/pod", "req/s/pod", "best N", "old N", "old SLO goodput", "new N",
              "new SLO goodput", "best SLO goodput", "TPOT ms new N / N=0", "gate rollbacks / canaries"]
    out = []
    keys = list(dict.fromkeys((r["name"], r["level"]) for r in rows))
    for name, level in keys:
        rs = [r for r in rows if (r["name"], r["level"]) == (name, level)]
        mean = lambda key: sum(float(r["slo_goodput"][str(r[key])]) for r in rs) / len(rs)  # noqa: E731
        ns = lambda key: ",".join(str(r[key]) for r in rs)  # noqa: E731 - the N of each seed
        best = sum(max(float(g) for g in r["slo_goodput"].values()) for r in rs) / len(rs)
        tpot = sum(r["tpot_median_ms"][str(r["new_n"])] for r in rs) / len(rs)
        tpot_off = sum(r["tpot_median_ms"]["0"] for r in rs) / len(rs)
        everywhere = set.intersection(*(set(r["best_n"]) for r in rs))  # best in every seed
        out.append([name, str(level), f"{rs[0]['rate']:.2f}", ",".join(map(str, sorted(everywhere))) or "-",
                    ns("old_n"),
                    f"{mean('old_n'):.0f}", ns("new_n"), f"{mean('new_n'):.0f}", f"{best:.0f}",
                    f"{tpot:.1f} / {tpot_off:.1f}",
                    f"{sum(r['gate_rollbacks'] for r in rs)} / {sum(r['canaries'] for r in rs)}"])
    return header, out


def markdown(rows: list[dict[str, Any]]) -> str:
    header, body = table(rows)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in body]) + "\n"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("slo", help="the tuner scored by SLO goodput on profiles with KV capacity",
                       description="Per profile, load level and seed: the N the old objective (bench tuner's "
                                   "decode-speed deployment) and the tuner with the family's SLOs on simulated "
                                   "engines (KV capacity, queueing, preemption, TTFT) each choose, scored by SLO "
                                   "goodput (output tokens per second per pod from requests that met every SLO) "
                                   f"at that load; {STABLE_REPLICAS} stable replicas, replace canaries, {WINDOW} "
                                   "windows on the engines.")
    p.add_argument("--profiles", required=True, type=Path,
                   help='family file (JSON: {"slo", "prompt_tokens", "output_tokens", "profiles"})')
    p.add_argument("--seeds", type=int, default=3, help="seeds per profile and level (default 3)")
    p.add_argument("--windows", type=int, default=MAX_WINDOWS,
                   help=f"windows per tuning run (default {MAX_WINDOWS}, one round)")
    p.add_argument("--serve-seconds", type=float, default=SERVE_S,
                   help="seconds of requests each N is scored on (default %(default)s)")
    p.add_argument("--json", type=Path, dest="json_out", help="write rows and summary as JSON here")
    p.add_argument("--markdown", type=Path, help="write the table as Markdown here")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    err = Console(stderr=True)
    try:
        family = load_family(args.profiles.read_text(encoding="utf-8"), str(args.profiles))
    except OSError as e:
        err.print(f"[red]error:[/red] cannot read {args.profiles}: {e.strerror}")
        return 2
    except ProfileError as e:
        err.print(f"[red]error:[/red] {e}")
        return 2
    if args.seeds < 1 or args.windows < 8 or not args.serve_seconds > 0:
        err.print("[red]error:[/red] --seeds must be at least 1, --windows at least 8, --serve-seconds above 0")
        return 2
    rows = run_family(family, args.seeds, args.windows, lambda m: print(m, file=sys.stderr, flush=True),
                      args.serve_seconds)
    header, body = table(rows)
    t = Table(title=f"specpilot bench slo: {len(family.profiles)} profiles x {args.seeds} seeds, SLO goodput in "
                    "output tokens/s per pod")
    for h in header:
        t.add_column(h, justify="left" if h == "profile" else "right")
    for r in body:
        t.add_row(*r)
    out = Console(width=200)
    out.print(t)
    s = summary(rows)
    share = "n/a" if s["gate_rollback_share"] is None else f"{100 * s['gate_rollback_share']:.0f}%"
    out.print(f"SLO goodput, share of the best N's: old objective {100 * s['old_mean_share']:.1f}%, new "
              f"{100 * s['new_mean_share']:.1f}%; canaries rolled back by an SLO or queueing gate: "
              f"{s['gate_rollbacks']} of {s['canaries']} ({share})", highlight=False)
    if args.json_out:
        args.json_out.write_text(json.dumps({"rows": rows, "summary": s,
                                             "settings": {"seeds": args.seeds, "windows": args.windows,
                                                          "serve_seconds": args.serve_seconds}}, indent=1) + "\n")
    if args.markdown:
        args.markdown.write_text(markdown(rows))
    return 0
