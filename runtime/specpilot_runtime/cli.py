"""`specpilot-runtime` command line: what runs inside each serving pod."""

from __future__ import annotations

import argparse
import importlib
import sys

# Modules that define `register(subparsers)`.
COMMAND_MODULES: tuple[str, ...] = (
    "specpilot_runtime.serve",
    "specpilot_runtime.sim.command",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specpilot-runtime",
        description="Run vLLM (or the simulated engine) with a speculative config inside a specpilot pod.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
