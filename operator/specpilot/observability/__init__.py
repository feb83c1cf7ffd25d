"""Grafana dashboards and Prometheus alerts, generated from the metric-name modules."""
