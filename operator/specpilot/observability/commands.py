"""`specpilot dashboards` and `specpilot alerts`: write the chart's generated observability files."""

from __future__ import annotations

import argparse
from pathlib import Path

from . import alerts, dashboards

DEFAULT_DASHBOARDS_DIR = Path("charts/specpilot/dashboards")
DEFAULT_ALERTS_FILE = Path("charts/specpilot/files/specpilot-alerts.yaml")


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("dashboards", help="write the Grafana dashboards' JSON")
    parser.add_argument("--out", type=Path, default=DEFAULT_DASHBOARDS_DIR,
                        help=f"directory for the JSON files (default {DEFAULT_DASHBOARDS_DIR})")
    parser.set_defaults(func=_dashboards)
    parser = sub.add_parser("alerts", help="write the Prometheus recording and alerting rules")
    parser.add_argument("--out", type=Path, default=DEFAULT_ALERTS_FILE,
                        help=f"rule file (default {DEFAULT_ALERTS_FILE})")
    parser.set_defaults(func=_alerts)


def _dashboards(args: argparse.Namespace) -> int:
    for path in dashboards.write(args.out):
        print(path)
    return 0


def _alerts(args: argparse.Namespace) -> int:
    print(alerts.write(args.out))
    return 0
