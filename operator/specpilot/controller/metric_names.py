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

# Tuner (the canary loop). Counter, labels (namespace, deployment, decision): one per tuning decision,
# decision one of DECISIONS.
TUNER_DECISIONS = f"{PREFIX}_tuner_decisions"
# Gauge, labels (namespace, deployment): unix time of the latest tuning decision (any kind, hold included).
# Remove the series when tuning is turned off or the object is deleted: the TunerStalled alert reads it.
TUNER_LAST_DECISION_TIMESTAMP = f"{PREFIX}_tuner_last_decision_timestamp_seconds"
# Gauge, labels (namespace, deployment, num_speculative_tokens): goodput (tokens/s) the tuner predicts
# for each candidate N at the observed load; num_speculative_tokens="0" is the no-speculation estimate.
TUNER_PREDICTED_GOODPUT = f"{PREFIX}_tuner_predicted_goodput_tokens_per_second"
# Gauge, labels (namespace, deployment, num_speculative_tokens, bound): the ends of that prediction's credible
# interval (tuning.constants.PLAN_INTERVAL, 90%), bound one of BOUNDS; absent for a plan written without one.
TUNER_PREDICTED_GOODPUT_BOUND = f"{PREFIX}_tuner_predicted_goodput_bound_tokens_per_second"
# Gauge, labels (namespace, deployment, track): goodput (tokens/s) measured in the latest window.
TUNER_OBSERVED_GOODPUT = f"{PREFIX}_tuner_observed_goodput_tokens_per_second"
# Gauge, labels (namespace, deployment, track, batch_sizes): N a track serves in each batch-size range of its
# schedule (tuning mode schedule), batch_sizes as "lo-hi" ("lo+" for the last range); absent without one.
TUNER_SCHEDULE = f"{PREFIX}_tuner_schedule_num_speculative_tokens"
# Gauge, labels (namespace, deployment, contender, method, role): with spec.tuning.alternatives, each measured
# contender's expected goodput at its best N relative to the stable track's (the stable's is 1); contender
# "0" is spec.speculative, "i" alternatives[i - 1]; role one of ROLES. Untried contenders have no series.
TUNER_METHOD_GOODPUT = f"{PREFIX}_tuner_method_relative_goodput"
# Schedule mode under switchback: the band verdicts of the newest decision that judged an arm band by band
# (status.tuning.history[].numbers.bands), band a runtime `live.band_of` label ("16-31"); at most one series
# set per band, replaced with each such decision. Gauge, labels (namespace, deployment, band): the judge's
# estimate of the arm's gain over the stable's K at that band, in percent; absent where it paired too rarely.
TUNER_BAND_GAIN = f"{PREFIX}_tuner_band_gain_estimate_percent"
# Gauge, labels (namespace, deployment, band, bound): the ends of that estimate's interval, bound one of BOUNDS.
TUNER_BAND_GAIN_BOUND = f"{PREFIX}_tuner_band_gain_bound_percent"
# Gauge, labels (namespace, deployment, band, track): the K each arm drafted at the band in that comparison,
# track "stable" or "canary" (the arm).
TUNER_BAND_K = f"{PREFIX}_tuner_band_num_speculative_tokens"

LABEL_NAMESPACE = "namespace"
LABEL_DEPLOYMENT = "deployment"
LABEL_RESULT = "result"
LABEL_REASON = "reason"
LABEL_KIND = "kind"
LABEL_TRACK = "track"
LABEL_DECISION = "decision"
LABEL_NUM_SPECULATIVE_TOKENS = "num_speculative_tokens"
LABEL_BATCH_SIZES = "batch_sizes"
LABEL_CONTENDER = "contender"
LABEL_METHOD = "method"
LABEL_ROLE = "role"
LABEL_BOUND = "bound"
LABEL_BAND = "band"

# Values of the `bound` label of TUNER_PREDICTED_GOODPUT_BOUND and TUNER_BAND_GAIN_BOUND.
BOUND_LOWER = "lower"
BOUND_UPPER = "upper"
BOUNDS = (BOUND_LOWER, BOUND_UPPER)

# Values of the `role` label of TUNER_METHOD_GOODPUT.
ROLES = ("stable", "canary", "measured")

# Values of the `result` label of RECONCILES.
RESULT_APPLIED = "applied"      # children created or changed
RESULT_UNCHANGED = "unchanged"  # children already matched
RESULT_INVALID = "invalid"      # spec refused, nothing touched
RESULT_PAUSED = "paused"        # specpilot.io/paused annotation set, nothing touched
RESULT_CONFLICT = "conflict"    # a child's name is another object's, nothing touched
RESULT_REFUSED = "refused"      # the API server refused a child (4xx); said in status
RESULT_ERROR = "error"
RESULTS = (RESULT_APPLIED, RESULT_UNCHANGED, RESULT_INVALID, RESULT_PAUSED, RESULT_CONFLICT, RESULT_REFUSED,
           RESULT_ERROR)

# Values of the `decision` label of TUNER_DECISIONS.
DECISION_HOLD = "hold"                  # current N stays, no canary
DECISION_START_CANARY = "start_canary"  # a canary at another N begins
DECISION_CONTINUE = "continue"          # canary analysis goes on for another window
DECISION_PROMOTE = "promote"            # canary's N becomes stable's
DECISION_ROLLBACK = "rollback"          # canary removed, stable untouched
DECISION_STOP = "stop"                  # round over (budget spent) or tuning disabled; any canary removed
DECISIONS = (DECISION_HOLD, DECISION_START_CANARY, DECISION_CONTINUE, DECISION_PROMOTE, DECISION_ROLLBACK,
             DECISION_STOP)
