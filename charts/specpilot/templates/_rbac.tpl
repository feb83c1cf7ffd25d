{{/*
What the operator does in a watched namespace. tests/chart/test_rbac.py checks these rules against the
API calls the operator makes; keep them to exactly that (no wildcards, no Secrets).
*/}}
{{- define "specpilot.namespacedRules" -}}
# The SpeculativeDeployments it reconciles; patch for finalizers, annotations and status.
- apiGroups: ["specpilot.io"]
  resources: ["speculativedeployments"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["specpilot.io"]
  resources: ["speculativedeployments/status"]
  verbs: ["get", "patch"]
# Children rendered for each SpeculativeDeployment.
- apiGroups: [""]
  resources: ["configmaps", "services"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["monitoring.coreos.com"]
  resources: ["podmonitors"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# Pod IPs of stable and canary replicas, to scrape their metrics.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch"]
# Canary traffic weights when trafficRouting is gateway.
- apiGroups: ["gateway.networking.k8s.io"]
  resources: ["httproutes"]
  verbs: ["get", "patch"]
# Every tuning decision and refused spec is posted as an Event.
- apiGroups: ["", "events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end }}

{{/* Cluster-scoped reads: whether optional CRDs (PodMonitor, HTTPRoute) exist. */}}
{{- define "specpilot.clusterRules" -}}
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  verbs: ["get", "list", "watch"]
{{- end }}

{{/* Leader election in the operator's own namespace. */}}
{{- define "specpilot.leaderRules" -}}
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["get", "create", "update", "patch"]
{{- end }}
