"""The operator's Prometheus metrics (names from metric_names); health.py serves them."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from specpilot.controller import metric_names as m

NS, DEP = m.LABEL_NAMESPACE, m.LABEL_DEPLOYMENT


class OperatorMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.reconciles = Counter(m.RECONCILES, "Reconciles of SpeculativeDeployments by result.",
                                  [NS, DEP, m.LABEL_RESULT], registry=r)
        self.errors = Counter(m.RECONCILE_ERRORS, "Reconciles that failed, by reason.",
                              [NS, DEP, m.LABEL_REASON], registry=r)
        # A boundary at 200 ms, the p99 objective (docs/operator.md "Scale"): histogram_quantile interpolates
        # inside a bucket, so without it a p99 anywhere in 100-250 ms reads as anything in that range.
        self.duration = Histogram(m.RECONCILE_DURATION, "Wall time of one reconcile.", registry=r,
                                  buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.5, 1, 2.5, 5, 10, 30))
        self.managed = Gauge(m.MANAGED_OBJECTS, "SpeculativeDeployments managed and the children they own.",
                             [m.LABEL_KIND], registry=r)
        self.n = Gauge(m.NUM_SPECULATIVE_TOKENS, "N each track's Deployment runs.", [NS, DEP, m.LABEL_TRACK],
                       registry=r)
        self.invalid = Gauge(m.SPEC_INVALID, "1 while the spec fails validation.", [NS, DEP], registry=r)
        self.ready = Gauge(m.READY_REPLICAS, "Ready stable replicas.", [NS, DEP], registry=r)
        self.leader = Gauge(m.LEADER, "1 on the replica holding the leader Lease.", registry=r)

    def forget(self, namespace: str, name: str) -> None:
        """Drop every per-object series of a deleted SpeculativeDeployment, counters included."""
        for metric in (self.reconciles, self.errors, self.n, self.invalid, self.ready):
            metric.remove_by_labels({NS: namespace, DEP: name})
