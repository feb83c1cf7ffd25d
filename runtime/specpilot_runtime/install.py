"""`specpilot-runtime install --to DIR`: copy this runtime, with package metadata, into DIR.

A serving pod built from vLLM's published image has no specpilot in it. The pod's init container runs
this command from the operator image onto an emptyDir that the vLLM container has on PYTHONPATH: there
`python3 -m specpilot_runtime.cli serve` runs the runtime, and vLLM finds its plugins (the drafted-per-position
stat logger, the engine core's live draft length) because importlib.metadata discovers entry points from
every `*.dist-info` directory on sys.path. The dist-info is written here rather than copied, so that it declares only the runtime
(named `specpilot-runtime`, no dependencies: vLLM's images ship pydantic and prometheus_client) and its
entry points are the ones the installed specpilot declares, whatever way specpilot was installed.
The runtime is pure Python, so the copy works with the image's Python whatever its version.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from importlib import metadata
from pathlib import Path

PACKAGE = "specpilot_runtime"
DIST_NAME = "specpilot-runtime"
PLUGIN_GROUPS = ("vllm.stat_logger_plugins", "vllm.general_plugins")
CONSOLE_SCRIPT = "specpilot-runtime = specpilot_runtime.cli:main"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("install", help="copy the runtime and its plugin metadata into a directory",
                              description=__doc__.splitlines()[0])
    p.add_argument("--to", required=True, type=Path, metavar="DIR",
                   help="directory to put on PYTHONPATH in the vLLM container (created if missing)")
    p.set_defaults(func=run)


def _version() -> str:
    try:
        return metadata.version("specpilot")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def _plugin_entry_points(group: str) -> list[str]:
    """`name = module:attr` lines of the runtime's vLLM plugins in `group`, as the installed specpilot
    declares them."""
    return sorted(f"{ep.name} = {ep.value}" for ep in metadata.entry_points(group=group)
                  if ep.value.startswith(PACKAGE + "."))


def install(target: Path) -> list[Path]:
    """Copy the package's .py files and write its dist-info under `target`; returns the files written."""
    plugins = {group: _plugin_entry_points(group) for group in PLUGIN_GROUPS}
    missing = [group for group, found in plugins.items() if not found]
    if missing:
        raise RuntimeError(f"no {' or '.join(missing)} entry point of {PACKAGE} is installed here: "
                           f"is specpilot installed (pip install specpilot)?")
    source = Path(__file__).resolve().parent
    package, info = target / PACKAGE, target / f"{PACKAGE}-{_version()}.dist-info"
    target.mkdir(parents=True, exist_ok=True)
    for old in (package, *target.glob(f"{PACKAGE}-*.dist-info")):  # a restarted pod installs again
        shutil.rmtree(old, ignore_errors=True)
    package.mkdir()
    written = []
    for src in sorted(source.glob("*.py")):
        written.append(package / src.name)
        shutil.copyfile(src, written[-1])
    info.mkdir()
    files = {
        "METADATA": f"Metadata-Version: 2.1\nName: {DIST_NAME}\nVersion: {_version()}\n"
                    f"Summary: specpilot's serving-pod runtime, copied by `specpilot-runtime install`\n",
        "entry_points.txt": f"[console_scripts]\n{CONSOLE_SCRIPT}\n"
                            + "".join(f"\n[{group}]\n" + "\n".join(eps) + "\n" for group, eps in plugins.items()),
        "top_level.txt": PACKAGE + "\n",
        "INSTALLER": "specpilot-runtime install\n",
    }
    for name, text in files.items():
        written.append(info / name)
        written[-1].write_text(text, encoding="utf-8")
    record = [f"{p.relative_to(target).as_posix()},," for p in written] + [f"{info.name}/RECORD,,"]
    (info / "RECORD").write_text("\n".join(record) + "\n", encoding="utf-8")
    return written


def run(args: argparse.Namespace) -> int:
    try:
        written = install(args.to)
    except (OSError, RuntimeError) as exc:
        print(f"specpilot-runtime install: {exc}", file=sys.stderr)
        return 1
    print(f"specpilot-runtime install: {len(written)} files in {args.to}")
    return 0
