"""`specpilot crd` and `specpilot validate`."""

from __future__ import annotations

import argparse
import sys

from . import documents
from .crd import crd_yaml
from .models import KIND
from .validate import add_policy_arguments, policy_from, problem_lines, validate_object


def register(sub: argparse._SubParsersAction) -> None:
    crd = sub.add_parser("crd", help="print the SpeculativeDeployment CRD (generated from the API models)")
    crd.set_defaults(func=_crd)
    val = sub.add_parser(
        "validate", help="check SpeculativeDeployment files offline: CRD schema, its CEL rules, vLLM rules",
        description="Exit 0 when every SpeculativeDeployment is valid; otherwise print one line per "
                    "problem (FILE: NAME: field: what is wrong, what is allowed) and exit 1.")
    val.add_argument("-f", "--filename", action="append", required=True, metavar="FILE",
                     help="YAML file (multi-document; '-' reads stdin); repeatable")
    add_policy_arguments(val)
    val.set_defaults(func=_validate)


def _crd(args: argparse.Namespace) -> int:
    sys.stdout.write(crd_yaml())
    return 0


def _validate(args: argparse.Namespace) -> int:
    problems = checked = skipped = 0
    policy = policy_from(args)
    for path in args.filename:
        for doc in documents.read(path):
            if doc.error:
                print(f"{doc.file}: -: {doc.error}")
                problems += 1
                continue
            if isinstance(doc.obj, dict) and doc.obj.get("kind") not in (None, KIND):
                skipped += 1  # other kinds in the same file (a Namespace, a Secret) are not ours to judge
                continue
            checked += 1
            found = validate_object(doc.obj, policy)
            for line in problem_lines(doc, found):
                print(line)
            problems += len(found)
    if checked == 0 and problems == 0:
        print(f"no {KIND} found in {', '.join(args.filename)}", file=sys.stderr)
        return 1
    note = f", {skipped} other object(s) skipped" if skipped else ""
    print(f"{checked} {KIND}(s) checked, {problems} problem(s){note}", file=sys.stderr)
    return 1 if problems else 0
