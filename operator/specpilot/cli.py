"""`specpilot` command line. Each subcommand lives next to the code it drives and registers itself."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from specpilot_runtime.commands import command_parser

# Built-in subcommand modules (the product). The development harness (`pip install specpilot[harness]`)
# adds sandbox, load, demo and bench through the `specpilot.commands` entry-point group.
COMMAND_MODULES: tuple[str, ...] = (
    "specpilot.api.commands",
    "specpilot.render.commands",
    "specpilot.observability.commands",
    "specpilot.controller.commands",
)


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser; plugins are loaded unless `argv` asks for a built-in command."""
    return command_parser(
        "specpilot", "Tune vLLM speculative decoding (num_speculative_tokens) on Kubernetes with canaries.",
        COMMAND_MODULES, "specpilot.commands", argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
