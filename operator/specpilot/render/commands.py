"""`specpilot render`: print the objects the operator would create, as multi-document YAML."""

from __future__ import annotations

import argparse
import sys

from pydantic import ValidationError

from specpilot_runtime.report import one_line
from specpilot_runtime.speculative import MAX_NUM_SPECULATIVE_TOKENS

from ..api import documents, kube_yaml
from ..api.models import KIND
from ..api.validate import InvalidSpeculativeDeployment, add_policy_arguments, load, policy_from, problem_lines
from ..api.drain import DEFAULT_DRAIN_SECONDS
from . import render_service, render_track
from .drain import drain_config_map
from .images import add_serving_arguments, serving_defaults_from
from ..api.names import TRACKS


def register(sub: argparse._SubParsersAction) -> None:
    cmd = sub.add_parser(
        "render", help="print the ConfigMap, Deployment and Service the operator creates",
        description="Validate each SpeculativeDeployment, then print its children as multi-document "
                    "YAML. The stable track includes the Service shared by both tracks.")
    cmd.add_argument("-f", "--filename", action="append", required=True, metavar="FILE",
                     help="YAML file (multi-document; '-' reads stdin); repeatable")
    cmd.add_argument("--track", choices=TRACKS, default="stable", help="which track to render (default stable)")
    cmd.add_argument("--n", type=int, default=None, metavar="N",
                     help="num_speculative_tokens to render (default: spec.speculative.numSpeculativeTokens)")
    add_policy_arguments(cmd)
    add_serving_arguments(cmd)
    cmd.set_defaults(func=_render)


# What `render --n` takes before any method is known; each document's method may allow less (exit 1 then).
N_ALLOWED = f"N is 0 (no speculation) or 1..{MAX_NUM_SPECULATIVE_TOKENS}, and at most the method's own limit"
EXIT_USAGE = 2


def _render(args: argparse.Namespace) -> int:
    if args.n is not None and not 0 <= args.n <= MAX_NUM_SPECULATIVE_TOKENS:
        print(f"specpilot render: --n {args.n} is not allowed: {N_ALLOWED}", file=sys.stderr)
        return EXIT_USAGE
    objects = []
    failed = False
    serving = serving_defaults_from(args)
    for path in args.filename:
        for doc in documents.read(path):
            if doc.error:
                print(f"{doc.file}: -: {doc.error}", file=sys.stderr)
                failed = True
                continue
            if isinstance(doc.obj, dict) and doc.obj.get("kind") not in (None, KIND):
                continue
            try:
                sd = load(doc.obj, policy_from(args))
                objects += render_track(sd, args.track, args.n, defaults=serving)
                if args.track == "stable":
                    objects.append(render_service(sd))
                    if sd.spec.engine.drain_seconds is None:  # automatic: the drain in force until measured
                        objects.append(drain_config_map(sd, DEFAULT_DRAIN_SECONDS))
            except InvalidSpeculativeDeployment as err:
                for line in problem_lines(doc, err.problems):
                    print(line, file=sys.stderr)
                failed = True
            except ValidationError as err:  # a rendered config its own model refuses: one line, not pydantic's
                first = err.errors()[0]
                where = ".".join(str(x) for x in first["loc"])
                print(documents.problem_line(doc, "(rendered engine.json)", one_line(f"{where}: {first['msg']}")),
                      file=sys.stderr)
                failed = True
            except ValueError as err:  # --n outside the method's limits
                print(documents.problem_line(doc, "--n", one_line(str(err))), file=sys.stderr)
                failed = True
    if failed:
        return 1
    if not objects:
        print(f"no {KIND} found in {', '.join(args.filename)}", file=sys.stderr)
        return 1
    sys.stdout.write(to_yaml(objects))
    return 0


def to_yaml(objects: list[dict]) -> str:
    """Multi-document YAML of Kubernetes objects, as kubectl reads them (kube_yaml: multi-line strings such
    as engine.json as `|` blocks; YAML 1.1's bool and null words quoted, so `nodeSelector: {gpu: n}` stays
    a string)."""
    return kube_yaml.dump_all(objects, sort_keys=False, width=120)
