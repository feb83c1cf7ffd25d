"""`specpilot-runtime serve`: validate engine.json, check the checkpoints, start and supervise vLLM.

The pod's entrypoint. It refuses a bad config before vLLM spends minutes loading weights, logs the
exact command on one line, runs vLLM as a child in its own process group, forwards SIGTERM/SIGINT to
it, gives it a grace period to drain in-flight requests, and exits with vLLM's exit code.
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from importlib.metadata import distributions
from pathlib import Path
from types import FrameType
from typing import Any, Callable

from pydantic import ValidationError

from . import engine
from .checkpoint import check_checkpoints
from .drain import read_drain
from .engine_config import ENV_NAME_PATTERN, NO_NUL_PATTERN, TEARDOWN_S, EngineConfig
from .files import FileProblem, kib, parse_json, read_bounded
from .hub_config import fetch_config
from .report import MAX_PATH_CHARS, one_line, summarised
from .speculative import MODEL_PATTERN, Problem

log = logging.getLogger("specpilot.runtime")

# Without a drain budget in engine.json: below Kubernetes' default terminationGracePeriodSeconds (30), so
# vLLM is killed by us, with a log line, rather than by the kubelet.
DEFAULT_GRACE_S = 25.0
EXIT_INVALID = 2
EXIT_NOT_FOUND = 127
EXIT_CANNOT_RUN = 126  # as a shell says of a command found but not executable
# engine.json is a few KiB and a few levels deep (the operator's spec is at most 256 KiB as JSON); anything far
# past that is not one, and is not read into memory.
MAX_CONFIG_BYTES = 1024 * 1024
MAX_CONFIG_DEPTH = 64
_PR_SET_PDEATHSIG = 1
LIVE_STATE_FILE = "live-state.prom"


def seconds(text: str) -> float:
    """argparse type of --grace-period: a finite number of seconds >= 0 (float() also takes nan and inf)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds >= 0")
    return value


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("serve", help="validate engine.json and run vLLM with it",
                              description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True, type=Path, help="path of engine.json (an EngineConfig)")
    p.add_argument("--dry-run", action="store_true", help="print the argv and env as JSON and exit")
    p.add_argument("--grace-period", type=seconds, metavar="SECONDS",
                   help=f"how long vLLM may drain after SIGTERM/SIGINT before it is killed (default: the "
                        f"config's shutdown_timeout_s, or its drain_file's seconds read at the signal, + "
                        f"{TEARDOWN_S} s of teardown, or {DEFAULT_GRACE_S:g} without one)")
    p.set_defaults(func=run)


def load(path: Path, fetch: bool = False) -> tuple[EngineConfig | None, list[Problem]]:
    """engine.json parsed and checked: the config, and every problem with it. A problem with the file as a
    whole has the path "" (the caller names the file). `fetch`: a hub id's config.json not in the pod's hub
    cache is fetched first (hub_config.py), so its checkpoint is checked too."""
    try:
        raw = parse_json(read_bounded(path, MAX_CONFIG_BYTES), MAX_CONFIG_DEPTH)
    except OSError as e:
        return None, [Problem("", f"cannot read: {e.strerror or e}")]
    except FileProblem as e:
        why = {"not_regular": f"--config takes engine.json, a file of at most {kib(MAX_CONFIG_BYTES)}",
               "too_large": "engine.json is a few KiB", "too_deep": "engine.json nests a few levels"}
        return None, [Problem("", f"{e}; {why[e.kind]}" if e.kind in why else str(e))]
    try:
        cfg = EngineConfig.model_validate(raw)
    except ValidationError as e:
        return None, [Problem(_field(err["loc"]), _message(err)) for err in e.errors()]
    problems = cfg.problems() + engine.env_problems(cfg, os.environ) + engine.live_problems(cfg)
    if not problems:  # the checkpoint rules assume a config that is valid on its own
        # The pod's environment (HF_HOME on the model cache volume) locates hub ids' cached config.json.
        env = {**os.environ, **cfg.env}
        if fetch:
            revision = cfg.speculative.extra.get("revision")
            for model, rev in ((cfg.model, None),
                               (cfg.speculative.model, revision if isinstance(revision, str) else None)):
                if model:
                    fetch_config(model, env, rev)
        problems = check_checkpoints(cfg.model, cfg.speculative, env=env)
    return cfg, problems


def _field(loc: tuple[int | str, ...]) -> str:
    """pydantic's location as the runtime's own problems name fields: `args[3]`, `env.NAME`."""
    path = ""
    for part in loc:
        if part == "[key]":  # the map key itself, which the path already ends with
            continue
        path = f"{path}[{part}]" if isinstance(part, int) else f"{path}.{part}" if path else str(part)
    return path


def _message(err: Any) -> str:
    """pydantic's message for one error, what it says a string must match spelled out where it can be."""
    if err["type"] == "string_unicode":
        return "must be text: it holds a lone surrogate (\\ud800-\\udfff), which no argv or file name can"
    if err["type"] == "string_pattern_mismatch" and err.get("ctx", {}).get("pattern") in _PATTERNS:
        return _PATTERNS[err["ctx"]["pattern"]]
    return str(err["msg"])


_PATTERNS = {
    MODEL_PATTERN: "must not start with '-' nor hold control or bidirectional-override characters",
    NO_NUL_PATTERN: "must not hold a NUL character, which no argv item or environment value can",
    ENV_NAME_PATTERN: "an environment variable's name must not be empty nor hold '=' or a NUL character",
}


def print_problems(config: object, problems: list[Problem]) -> None:
    """One line per problem on stderr (a long list summarised), each bounded: `specpilot-runtime: FILE:
    field: message`, or `specpilot-runtime: FILE: message` for the file as a whole."""
    for p in summarised(problems):
        where = f"{one_line(p.path, MAX_PATH_CHARS)}: " if p.path else ""
        print(f"specpilot-runtime: {config}: {where}{one_line(p.message)}", file=sys.stderr)


def grace_period(cfg: EngineConfig, override: float | None) -> float:
    """How long vLLM may take after the first signal: its own drain (--shutdown-timeout, or the drain.json in
    force, read now) plus teardown."""
    if override is not None:
        return override
    if cfg.shutdown_timeout_s is None:
        return DEFAULT_GRACE_S
    drain_s = cfg.shutdown_timeout_s
    if cfg.drain_file is not None:
        drain_s, problem = read_drain(cfg.drain_file, cfg.shutdown_timeout_s)
        if problem:
            log.warning("drain file: %s; draining up to %d s", one_line(problem), drain_s)
    return float(drain_s + TEARDOWN_S)


def unwritable_cache(env: dict[str, str]) -> str | None:
    """Why vLLM could not write its cache where `env` puts it (a read-only model cache volume), or None.
    vLLM writes torch.compile artifacts there at start-up and fails if it cannot."""
    root = env.get(engine.VLLM_CACHE_ENV)
    if not root:
        return None
    try:
        os.makedirs(root, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=root):
            pass
    except OSError as e:
        return f"{root}: {e.strerror or e}"
    return None


def installed_vllm_plugins() -> list[str]:
    """Entry-point names in vLLM's plugin groups (`vllm.*`) installed in this interpreter, which is vLLM's too
    (engine.env lists them to leave specpilot's plugin out). A name with a comma cannot be listed in
    VLLM_PLUGINS, so it is left out too."""
    return sorted({ep.name for dist in distributions() for ep in dist.entry_points
                   if ep.group.startswith("vllm.") and "," not in ep.name})


def vllm_executable() -> str:
    """The `vllm` next to this interpreter (same venv) when there is one, else the one on PATH."""
    beside = Path(sys.executable).parent / "vllm"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("vllm") or "vllm"


def _die_with_parent() -> None:
    # Runs in the child before exec: if the runtime is SIGKILLed, the kernel sends vLLM SIGTERM
    # instead of leaving it orphaned with the GPU (Linux only; elsewhere a no-op).
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def supervise(argv: list[str], env: dict[str, str], grace: Callable[[], float]) -> int:
    """Run argv until it exits; forward SIGTERM/SIGINT; SIGKILL its process group `grace()` seconds after the
    first (asked when it arrives: the drain in force may have changed since the start)."""
    child = subprocess.Popen(argv, env=env, start_new_session=True, preexec_fn=_die_with_parent)
    deadline: list[float] = []
    grace_s: list[float] = []

    def forward(signum: int, _frame: FrameType | None) -> None:
        if not grace_s:
            grace_s.append(grace())
            deadline.append(time.monotonic() + grace_s[0])
        log.info("got %s: forwarding to vLLM (pid %d), %g s to drain", signal.Signals(signum).name,
                 child.pid, grace_s[0])
        if child.poll() is None:
            child.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        while True:
            try:
                code = child.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                if deadline and time.monotonic() > deadline[0]:
                    log.warning("vLLM did not exit within %g s: killing it", grace_s[0])
                    os.killpg(child.pid, signal.SIGKILL)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    # A child killed by a signal reports -signum; a shell reports 128 + signum, and so do we.
    return code if code >= 0 else 128 - code


def run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s specpilot-runtime %(levelname)s %(message)s")
    cfg, problems = load(args.config, fetch=not args.dry_run)
    if problems or cfg is None:
        print_problems(args.config, problems)
        return EXIT_INVALID
    # The engine core's live counters, for the API server's /metrics: private to this pod's processes. A dry
    # run makes no directory: it shows the pattern mkdtemp would fill in.
    live_dir = None if cfg.live_file is None else (
        Path(tempfile.gettempdir()) / "specpilot-live-XXXXXXXX" if args.dry_run
        else Path(tempfile.mkdtemp(prefix="specpilot-live-")))
    live_state = None if live_dir is None else str(live_dir / LIVE_STATE_FILE)
    plan = engine.launch(cfg, os.environ, vllm_executable(), installed_vllm_plugins(), live_state)
    if args.dry_run:
        print(plan.to_json())
        return 0
    try:
        return _start(cfg, plan, args.grace_period, started)
    finally:
        if live_dir is not None:
            shutil.rmtree(live_dir, ignore_errors=True)


def _start(cfg: EngineConfig, plan: engine.Launch, grace_override: float | None, started: float) -> int:
    overrides = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(plan.env.items()))
    log.info("starting vLLM after %.0f ms of checks: %s %s", (time.monotonic() - started) * 1000,
             overrides, shlex.join(plan.argv))
    env = {**os.environ, **plan.env}
    unwritable = unwritable_cache(env)
    if unwritable:
        log.warning("%s is not writable (%s): vLLM keeps its cache in the container instead",
                    engine.VLLM_CACHE_ENV, unwritable)
        del env[engine.VLLM_CACHE_ENV]
    try:
        return supervise(plan.argv, env, lambda: grace_period(cfg, grace_override))
    except FileNotFoundError:
        print(f"specpilot-runtime: {plan.argv[0]} not found: is vLLM installed?", file=sys.stderr)
        return EXIT_NOT_FOUND
    except OSError as e:  # found but not executable (EACCES, ENOEXEC)
        print(f"specpilot-runtime: cannot run {plan.argv[0]}: {e.strerror or e}", file=sys.stderr)
        return EXIT_CANNOT_RUN
