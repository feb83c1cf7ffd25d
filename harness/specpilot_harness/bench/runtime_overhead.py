"""`specpilot bench runtime`: what the pod's runtime adds before vLLM starts.

Everything `specpilot-runtime serve` does before it execs vLLM (interpreter start, imports, validation, the
checkpoints' config reads, argv) is what `serve --dry-run` does, so that is timed end to end, best of
`--repeats`, on a config-only target and draft pair (their config.json is all serve reads). A number to watch,
not a pass/fail: a test timing it would fail on a loaded machine, not on a slower runtime.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from rich.console import Console

TINY_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 1024,
               "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
               "num_key_value_heads": 2, "max_position_embeddings": 512}

DRY_RUN_TIMEOUT_S = 60


def register(sub: argparse._SubParsersAction) -> None:
    """Adds `runtime` to the subcommands of `specpilot bench`."""
    p = sub.add_parser("runtime", help="time the pod runtime's work before vLLM starts (serve --dry-run)",
                       description="Time `specpilot-runtime serve --dry-run` end to end on a draft_model engine "
                                   "config: what the runtime adds to a pod's start before vLLM's own.")
    p.add_argument("--runtime", type=Path, default=None,
                   help="the specpilot-runtime executable (default: the one on PATH)")
    p.add_argument("--repeats", type=int, default=5, help="runs, the best reported (default %(default)s)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    err = Console(stderr=True)
    runtime = shutil.which(str(args.runtime) if args.runtime else "specpilot-runtime")
    if runtime is None:
        err.print(f"[red]error:[/red] --runtime: no executable {args.runtime or 'specpilot-runtime on PATH'}")
        return 2
    if args.repeats < 1:
        err.print("[red]error:[/red] --repeats must be at least 1")
        return 2
    with tempfile.TemporaryDirectory(prefix="specpilot-bench-runtime-") as tmp:
        config = _engine_config(Path(tmp))
        times = []
        for _ in range(args.repeats):
            started = time.monotonic()
            try:
                done = subprocess.run([runtime, "serve", "--config", str(config), "--dry-run"],
                                      capture_output=True, text=True, timeout=DRY_RUN_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                err.print(f"[red]error:[/red] serve --dry-run took over {DRY_RUN_TIMEOUT_S} s")
                return 1
            times.append(time.monotonic() - started)
            if done.returncode != 0:
                err.print(f"[red]error:[/red] serve --dry-run failed:\n{done.stderr}")
                return 1
    print(f"runtime overhead before vLLM starts (serve --dry-run): best {min(times):.3f} s, "
          f"median {sorted(times)[len(times) // 2]:.3f} s of {len(times)}")
    return 0


def _engine_config(workdir: Path) -> Path:
    for name in ("target", "draft"):
        (workdir / name).mkdir()
        (workdir / name / "config.json").write_text(json.dumps(TINY_CONFIG))
    config = workdir / "engine.json"
    config.write_text(json.dumps({
        "model": str(workdir / "target"), "accelerator": {"vendor": "cpu"},
        "speculative": {"method": "draft_model", "model": str(workdir / "draft"), "num_speculative_tokens": 4}}))
    return config
