"""Building a command line from subcommand modules, with more subcommands from installed plugins.

Each module defines `register(subparsers)`. Plugins are entry points in a group (the development
harness registers `sandbox`, `demo`, `bench`, `load` and `simulate` this way); they are imported only when
the command asked for is not one of the built-in ones, so `specpilot run` and `specpilot-runtime serve`
never load the harness.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Sequence
from importlib.metadata import entry_points


def command_parser(prog: str, description: str, modules: Sequence[str], plugin_group: str,
                 argv: Sequence[str] | None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in modules:
        importlib.import_module(name).register(sub)
    asked = next((a for a in argv or () if not a.startswith("-")), None)
    if asked not in sub.choices:
        for ep in entry_points(group=plugin_group):
            ep.load().register(sub)
    return parser
