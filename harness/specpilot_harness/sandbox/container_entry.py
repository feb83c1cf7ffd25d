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
    binds = [(b.partition("=")[0], b.partition("=")[2], False) for b in args.bind] + \
        [(b.partition("=")[0], b.partition("=")[2], True) for b in args.bind_ro]
    # Parents first, and read-only only once every mount point exists: a mount nested in a read-only one
    # (/etc/specpilot/drain in /etc/specpilot) gets its mount point made in the parent, as a kubelet makes it.
    binds.sort(key=lambda b: b[1].rstrip("/").count("/"))
    for src, dst, _ in binds:
        os.makedirs(dst, exist_ok=True)
        subprocess.run(["mount", "--bind", src, dst], check=True)
    for _, dst, read_only in binds:
        if read_only:
            subprocess.run(["mount", "-o", "remount,bind,ro", dst], check=True)
    program = shutil.which(command[0], path=os.environ.get("PATH")) or command[0]
    os.execve(program, command, os.environ)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
