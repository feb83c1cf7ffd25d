"""Inside a fresh mount namespace: bind each volume at its mountPath, then exec the container's argv.

`python -m specpilot_harness.sandbox.container_entry --bind=SRC=DST ... -- PROGRAM ARGS...`, started by
`unshare --mount --propagation private` (exec_pods.py), so the mounts are this container's alone. The
program is looked up on the PATH of the environment it was given (the container's).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="container_entry")
    parser.add_argument("--bind", action="append", default=[], metavar="SRC=DST")
    parser.add_argument("--bind-ro", action="append", default=[], metavar="SRC=DST")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command after --")
    for bind, read_only in [(b, False) for b in args.bind] + [(b, True) for b in args.bind_ro]:
        src, _, dst = bind.partition("=")
        os.makedirs(dst, exist_ok=True)
        subprocess.run(["mount", "--bind", src, dst], check=True)
        if read_only:
            subprocess.run(["mount", "-o", "remount,bind,ro", dst], check=True)
    program = shutil.which(command[0], path=os.environ.get("PATH")) or command[0]
    os.execve(program, command, os.environ)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
