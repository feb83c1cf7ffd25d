"""`specpilot-runtime simulate`: serve one simulated vLLM engine until SIGTERM or Ctrl-C."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from typing import TYPE_CHECKING

from pydantic import TypeAdapter, ValidationError

from specpilot_runtime.speculative import METHODS, OFF, SpeculativeConfig
from .profile import read_profile

if TYPE_CHECKING:  # the server imports aiohttp; `serve` in a vLLM pod should not pay for it
    from .server import SimConfig


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "simulate", help="serve a simulated vLLM engine (OpenAI API + vLLM /metrics) driven by a profile",
        description="Serve a simulated vLLM engine: generation paced by the profile's step time at the "
                    "current concurrency, acceptance drawn from its survival curve at N.")
    p.add_argument("--profile", metavar="FILE",
                   help="profiles file (issue-4 format); default: the bundled example profiles")
    p.add_argument("--name", metavar="NAME",
                   help="profile to run from the file (optional when it holds exactly one)")
    p.add_argument("--num-speculative-tokens", type=int, required=True, metavar="N",
                   help="N, fixed for the engine's life as in vLLM; 0 turns speculation off")
    p.add_argument("--method", help="speculative method (default: the profile's); 'off' with N=0")
    p.add_argument("--num-speculative-tokens-per-batch-size", metavar="JSON",
                   help="vLLM's batch-size schedule, [[lo, hi, K], ...]: steps at a running batch size in "
                        "[lo, hi] draft K <= N tokens (the pod's speculative config key)")
    p.add_argument("--served-model-name", metavar="MODEL",
                   help="model name in the API and the model_name metric label (default: the profile name)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    p.add_argument("--time-scale", type=float, default=1.0, metavar="X",
                   help="engine time runs X times faster than wall time (default 1: real time)")
    p.add_argument("--seed", type=int, help="seed for acceptance and step-time noise draws")
    p.add_argument("--max-num-seqs", type=int, default=256, help="most sequences in one batch (vLLM's flag)")
    p.add_argument("--max-model-len", type=int, default=4096, help="context length (vLLM's flag)")
    p.add_argument("--drafted-per-position-metric", action=argparse.BooleanOptionalAction, default=True,
                   help="export specpilot's plugin counter of drafted tokens per position (default: on, "
                        "as EngineConfig.drafted_per_position_metric)")
    p.add_argument("--shutdown-timeout", type=float, default=0.0, metavar="SECONDS",
                   help="on SIGTERM/SIGINT refuse new requests and let those in flight finish for this long "
                        "(vLLM's flag; default 0: abort them)")
    p.add_argument(LIVE_FILE_FLAG, metavar="FILE",
                   help="live.json to follow (engine.json's live_file): serve the draft length it sets, "
                        "polled about once a second, without a restart")
    p.set_defaults(func=run)


def config_from_args(args: argparse.Namespace) -> SimConfig:
    """Check the flags against the profile and vLLM's method rules; ValueError names what is wrong."""
    profile = read_profile(args.profile, args.name)
    n = args.num_speculative_tokens
    method = args.method or (profile.method if n else OFF)
    if method not in METHODS:
        raise ValueError(f"--method {method!r} is not a vLLM speculative method: {', '.join(METHODS)}")
    if (method == OFF) != (n == 0):
        raise ValueError(f"--method {method} does not go with --num-speculative-tokens {n}: "
                         f"use method off exactly when N is 0")
    if args.time_scale <= 0:
        raise ValueError("--time-scale must be positive")
    if args.shutdown_timeout < 0:
        raise ValueError("--shutdown-timeout must be >= 0")
    if args.max_num_seqs < 1 or args.max_model_len < 2:
        raise ValueError("--max-num-seqs must be >= 1 and --max-model-len >= 2")
    profile.survival_at(n)  # N within the profile's 0..max_n
    schedule = parse_schedule(args.num_speculative_tokens_per_batch_size, method, n)
    from .server import SimConfig

    return SimConfig(
        profile=profile, num_speculative_tokens=n, method=method,
        served_model_name=args.served_model_name or profile.name,
        host=args.host, port=args.port, time_scale=args.time_scale, seed=args.seed,
        max_num_seqs=args.max_num_seqs, max_model_len=args.max_model_len,
        drafted_per_position_metric=args.drafted_per_position_metric,
        shutdown_timeout_s=args.shutdown_timeout, num_speculative_tokens_per_batch_size=schedule,
        live_file=args.live_file,
    )


_ROWS = TypeAdapter(list[tuple[int, int, int]])
SCHEDULE_FLAG = "--num-speculative-tokens-per-batch-size"
LIVE_FILE_FLAG = "--live-file"


def parse_schedule(text: str | None, method: str, n: int) -> tuple[tuple[int, int, int], ...] | None:
    """The schedule flag's rows, held to the rules vLLM starts by (`speculative.check`); None without
    one. ValueError names what is wrong."""
    if text is None:
        return None
    try:
        rows = _ROWS.validate_json(text)
    except ValidationError:
        raise ValueError(f"{SCHEDULE_FLAG} must be JSON [[lo, hi, K], ...] of integers, got {text!r}") from None
    if not rows:
        return None
    if method == OFF:
        raise ValueError(f"{SCHEDULE_FLAG} needs speculation on (N >= 1)")
    cfg = SpeculativeConfig(method=method, num_speculative_tokens=n, num_speculative_tokens_per_batch_size=rows)
    # Only the schedule's own rules: the draft model and the like are the real pod's business.
    wrong = [p for p in cfg.problems() if p.path.startswith("speculative.schedule")]
    if wrong:
        raise ValueError(f"{SCHEDULE_FLAG}: {'; '.join(str(p) for p in wrong)}")
    return tuple(rows)


async def serve(config: SimConfig) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    from .server import SimServer

    sim = SimServer(config)
    await sim.start()
    try:
        if config.method != config.profile.method and config.num_speculative_tokens:
            print(f"warning: profile {config.profile.name!r} was measured for {config.profile.method}, "
                  f"serving it as {config.method}", file=sys.stderr)
        print(f"simulated vLLM engine {config.served_model_name!r}: profile {config.profile.name}, "
              f"method {config.method}, N={config.num_speculative_tokens}, time x{config.time_scale:g}, "
              f"listening on {sim.url}", file=sys.stderr, flush=True)
        await stop.wait()
        await sim.shutdown()
    finally:
        await sim.stop()


def run(args: argparse.Namespace) -> int:
    try:
        config = config_from_args(args)
    except ValueError as e:  # ProfileError included
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        asyncio.run(serve(config))
    except OSError as e:
        print(f"error: cannot listen on {config.host}:{config.port}: {e.strerror}", file=sys.stderr)
        return 1
    return 0
