"""Grafana dashboard JSON (schema of Grafana 11) from a few plain descriptions.

Only the shapes specpilot's dashboards use: rows of Prometheus-backed panels and query variables over
a Prometheus data source picked by a `datasource` variable. tests/dashboards checks the output against
Grafana's own types (grafana-foundation-sdk) and runs every query against a real Prometheus.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

# Grafana's dashboard schema version these dashboards are written for (Grafana 11).
SCHEMA_VERSION = 39
GRID_WIDTH = 24
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# What a multi-value variable means when "All" is chosen: every value, as a regex.
ALL_VALUE = ".*"

PanelType = Literal["timeseries", "stat", "bargauge", "state-timeline"]


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""
    instant: bool = False


@dataclass(frozen=True)
class Panel:
    title: str
    description: str
    queries: tuple[Query, ...]
    type: PanelType = "timeseries"
    unit: str = "short"
    width: int = 12
    height: int = 8
    min: float | None = None
    max: float | None = None
    stacked: bool = False
    bars: bool = False


@dataclass(frozen=True)
class Row:
    title: str
    panels: tuple[Panel, ...]


@dataclass(frozen=True)
class Variable:
    """A multi-value query variable: values of `label` on `metric` (narrowed by `match`)."""

    name: str
    label: str
    metric: str
    source_label: str
    match: str = ""


@dataclass(frozen=True)
class Dashboard:
    uid: str
    title: str
    description: str
    variables: tuple[Variable, ...]
    rows: tuple[Row, ...]
    tags: tuple[str, ...] = ("specpilot",)


def render(dashboard: Dashboard) -> dict[str, Any]:
    """The dashboard as Grafana JSON: ids and grid positions assigned in reading order."""
    panels: list[dict[str, Any]] = []
    next_id = 1
    y = 0
    for row in dashboard.rows:
        panels.append({"type": "row", "id": next_id, "title": row.title, "collapsed": False,
                       "gridPos": {"h": 1, "w": GRID_WIDTH, "x": 0, "y": y}, "panels": []})
        next_id += 1
        y += 1
        x = 0
        row_height = 0
        for panel in row.panels:
            if x + panel.width > GRID_WIDTH:
                x, y, row_height = 0, y + row_height, 0
            panels.append(_panel(panel, next_id, x, y))
            next_id += 1
            x += panel.width
            row_height = max(row_height, panel.height)
        y += row_height
    return {
        "uid": dashboard.uid,
        "title": dashboard.title,
        "description": dashboard.description,
        "tags": list(dashboard.tags),
        "timezone": "browser",
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": SCHEMA_VERSION,
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "30s",
        # A menu of the other specpilot dashboards, keeping the chosen variables and time range.
        "links": [{"type": "dashboards", "title": "specpilot", "tags": ["specpilot"], "asDropdown": True,
                   "includeVars": True, "keepTime": True}],
        "annotations": {"list": [{
            "builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"}, "enable": True,
            "hide": True, "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts",
            "type": "dashboard"}]},
        "templating": {"list": [_datasource_variable()] + [_variable(v) for v in dashboard.variables]},
        "panels": panels,
    }


def _panel(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    defaults: dict[str, Any] = {"unit": panel.unit}
    if panel.min is not None:
        defaults["min"] = panel.min
    if panel.max is not None:
        defaults["max"] = panel.max
    if panel.type == "timeseries":
        defaults["custom"] = {
            "drawStyle": "bars" if panel.bars else "line",
            "lineWidth": 1,
            "fillOpacity": 80 if panel.bars else 10,
            "showPoints": "never",
            "spanNulls": False,
            "stacking": {"mode": "normal" if panel.stacked else "none", "group": "A"},
        }
    return {
        "type": panel.type,
        "id": panel_id,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": panel.height, "w": panel.width, "x": x, "y": y},
        "targets": [_target(q, chr(ord("A") + i)) for i, q in enumerate(panel.queries)],
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": _options(panel.type),
    }


def _target(query: Query, ref_id: str) -> dict[str, Any]:
    return {"refId": ref_id, "datasource": DATASOURCE, "expr": query.expr,
            "legendFormat": query.legend or "__auto", "range": not query.instant,
            "instant": query.instant, "editorMode": "code"}


def _options(panel_type: PanelType) -> dict[str, Any]:
    legend = {"displayMode": "table", "placement": "right", "showLegend": True, "calcs": ["lastNotNull"]}
    if panel_type == "timeseries":
        return {"legend": legend, "tooltip": {"mode": "multi", "sort": "desc"}}
    if panel_type == "state-timeline":
        return {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                "mergeValues": False, "showValue": "auto", "tooltip": {"mode": "single", "sort": "none"}}
    reduce = {"calcs": ["lastNotNull"], "fields": "", "values": False}
    if panel_type == "stat":
        return {"reduceOptions": reduce, "colorMode": "value", "graphMode": "area", "justifyMode": "auto",
                "orientation": "auto", "textMode": "auto"}
    return {"reduceOptions": reduce, "displayMode": "gradient", "orientation": "horizontal",
            "showUnfilled": True}


def _datasource_variable() -> dict[str, Any]:
    return {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
            "hide": 0, "refresh": 1, "current": {}, "options": []}


def _variable(variable: Variable) -> dict[str, Any]:
    selector = f"{variable.metric}{{{variable.match}}}" if variable.match else variable.metric
    query = f"label_values({selector}, {variable.source_label})"
    return {"name": variable.name, "label": variable.label, "type": "query", "datasource": DATASOURCE,
            "query": {"query": query, "refId": f"{variable.name}-values"},
            "refresh": 2, "sort": 1, "multi": True, "includeAll": True, "allValue": ALL_VALUE,
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]}, "options": [],
            "hide": 0}

