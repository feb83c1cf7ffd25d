"""Feeds specpilot-built `vllm serve` argv to vLLM's own parser and config classes; prints the verdicts.

Runs inside the vLLM venv: reads a JSON list of {"name", "engine"} (EngineConfig dicts) on stdin, and
for each one builds the argv with `specpilot_runtime.engine.argv`, parses it with the `vllm serve`
subcommand's parser and builds vLLM's VllmConfig (which constructs its SpeculativeConfig) exactly as
`vllm serve` does before loading weights. Prints one JSON list: name, ok, error, and what vLLM made of
the speculative config.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.entrypoints.cli.serve import ServeSubcommand
from vllm.utils.argparse_utils import FlexibleArgumentParser

from specpilot_runtime.engine import argv
from specpilot_runtime.engine_config import EngineConfig


def verdict(engine: dict[str, Any]) -> dict[str, Any]:
    cmd = argv(EngineConfig.model_validate(engine))
    parser = FlexibleArgumentParser(prog="vllm")
    serve = ServeSubcommand()
    serve.subparser_init(parser.add_subparsers(dest="subparser"))
    try:
        args = parser.parse_args(cmd[1:])
        args.model = args.model_tag
        serve.validate(args)
        config = AsyncEngineArgs.from_cli_args(args).create_engine_config()
    except (Exception, SystemExit) as e:  # vLLM raises ValueError, TypeError, pydantic errors, argparse exits
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}
    spec = config.speculative_config
    return {
        "ok": True,
        "vllm_class": None if spec is None else f"{type(spec).__module__}.{type(spec).__qualname__}",
        "method": None if spec is None else spec.method,
        "num_speculative_tokens": None if spec is None else spec.num_speculative_tokens,
        "schedule": None if spec is None else spec.num_speculative_tokens_per_batch_size,
    }


def main() -> None:
    cases = json.load(sys.stdin)
    out = [{"name": c["name"], **verdict(c["engine"])} for c in cases]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
