"""`specpilot` command line. Each subcommand lives next to the code it drives and registers itself."""

from __future__ import annotations

import argparse
import importlib
import sys

# Modules that define `register(subparsers)`; each adds one or more subcommands.
COMMAND_MODULES: tuple[str, ...] = (
    "specpilot.api.commands",
    "specpilot.render.commands",
    "specpilot.observability.commands",
    "specpilot.load.command",
    "specpilot.bench.cli",
    "specpilot.controller.commands",
    "specpilot.sandbox.commands",
    "specpilot.demo.command",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specpilot",
        description="Tune vLLM speculative decoding (num_speculative_tokens) on Kubernetes with canaries.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
