"""Names and labels of the operator's own Prometheus metrics: the one place they are spelled.

The Grafana dashboards and PrometheusRules are built from these constants, so renaming a metric here is
a change to a public contract. Prometheus appends `_total` to counters and `_bucket`/`_sum`/`_count`
to histograms; the constants below are the base names given to prometheus_client.
"""

from __future__ import annotations

PREFIX = "specpilot_operator"

# Counter, labels (namespace, deployment, result). result is one of RESULTS.
RECONCILES = f"{PREFIX}_reconciles"
RECONCILES_TOTAL = f"{RECONCILES}_total"
# Counter, labels (namespace, deployment, reason): reconciles that raised or hit an API error.
RECONCILE_ERRORS = f"{PREFIX}_reconcile_errors"
RECONCILE_ERRORS_TOTAL = f"{RECONCILE_ERRORS}_total"
# Histogram in seconds, no labels (per-object latency histograms would multiply series by objects).
RECONCILE_DURATION = f"{PREFIX}_reconcile_duration_seconds"
# Gauge, label (kind): SpeculativeDeployments this replica manages and the children it owns, per kind.
MANAGED_OBJECTS = f"{PREFIX}_managed_objects"
# Gauge, labels (namespace, deployment, track): N the Deployment of that track runs.
NUM_SPECULATIVE_TOKENS = f"{PREFIX}_num_speculative_tokens"
# Gauge, labels (namespace, deployment): 1 while the spec fails validation (SpecValid=False).
SPEC_INVALID = f"{PREFIX}_spec_invalid"
# Gauge, labels (namespace, deployment): ready stable replicas as last observed.
READY_REPLICAS = f"{PREFIX}_ready_replicas"
# Gauge, no labels: 1 on the replica holding the leader Lease, 0 on standbys.
LEADER = f"{PREFIX}_leader"

LABEL_NAMESPACE = "namespace"
LABEL_DEPLOYMENT = "deployment"
LABEL_RESULT = "result"
LABEL_REASON = "reason"
LABEL_KIND = "kind"
LABEL_TRACK = "track"

# Values of the `result` label of RECONCILES.
RESULT_APPLIED = "applied"      # children created or changed
RESULT_UNCHANGED = "unchanged"  # children already matched
RESULT_INVALID = "invalid"      # spec refused, nothing touched
RESULT_PAUSED = "paused"        # specpilot.io/paused annotation set, nothing touched
RESULT_ERROR = "error"
RESULTS = (RESULT_APPLIED, RESULT_UNCHANGED, RESULT_INVALID, RESULT_PAUSED, RESULT_ERROR)
