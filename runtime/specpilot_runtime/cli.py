"""`specpilot-runtime` command line: what runs inside each serving pod."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .commands import command_parser

# Built-in subcommand modules; the harness adds `simulate` through the `specpilot_runtime.commands` group.
COMMAND_MODULES: tuple[str, ...] = ("specpilot_runtime.serve", "specpilot_runtime.install")


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser; plugins are loaded unless `argv` asks for a built-in command."""
    return command_parser(
        "specpilot-runtime", "Run vLLM with a speculative config inside a specpilot pod.",
        COMMAND_MODULES, "specpilot_runtime.commands", argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
