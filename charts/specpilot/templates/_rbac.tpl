{{/*
What the operator does in a watched namespace. tests/chart/rbac_audit.py runs the operator as the
chart's ServiceAccount on a real kube-apiserver, which enforces these rules, and checks them both ways from
its audit log: every call allowed, every grant used. No wildcards; Secrets only read for their labels
(operator.policy.secretReferences).
*/}}
{{- define "specpilot.namespacedRules" -}}
# The SpeculativeDeployments it reconciles: read, watch (Kopf), patch finalizers and annotations (Kopf).
- apiGroups: ["specpilot.io"]
  resources: ["speculativedeployments"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["specpilot.io"]
  resources: ["speculativedeployments/status"]
  verbs: ["patch"]
# Children rendered for each SpeculativeDeployment: watched (Kopf) and listed to find drift, read by name
# before one is created (an object of that name the operator does not own is never written), written by
# server-side apply (a patch that creates what is missing), deleted when no longer rendered. create: an
# apply that creates the object is authorized by kube-apiserver as a create too, not only as a patch
# (without it the first reconcile of every SpeculativeDeployment is forbidden).
- apiGroups: [""]
  resources: ["configmaps", "services"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# The tuning loop finds each track's pods (and their IPs) to scrape their vLLM metrics, and their
# ReplicaSets to keep only pods its own Deployments made (a labelled stranger is ignored).
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list"]
- apiGroups: ["apps"]
  resources: ["replicasets"]
  verbs: ["list"]
# A model cache claim's access modes: a ReadWriteOnce claim cannot serve pods on several nodes.
- apiGroups: [""]
  resources: ["persistentvolumeclaims"]
  verbs: ["get"]
# The labels of a Secret spec.engine.hfTokenSecretRef names (its owner's opt-in, operator.policy), asked
# for as metadata only; RBAC cannot grant less than get.
{{- if eq .Values.operator.policy.secretReferences "labelled" }}
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get"]
{{- end }}
# What the operator did and why, on the SpeculativeDeployment (`kubectl describe`).
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
{{- if .Values.rbac.gatewayApi }}
# tuning.canary.trafficRouting: gateway: read the named HTTPRoute and set its backend weights.
- apiGroups: ["gateway.networking.k8s.io"]
  resources: ["httproutes"]
  verbs: ["get", "patch"]
{{- end }}
{{- end }}

{{/* Cluster-scoped reads Kopf makes to notice CRDs (and, when watching listed namespaces, namespaces)
appearing and going. Without them it warns and stops noticing. */}}
{{- define "specpilot.clusterRules" -}}
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  verbs: ["list", "watch"]
{{- if not (include "specpilot.clusterWide" .) }}
- apiGroups: [""]
  resources: ["namespaces"]
  verbs: ["list", "watch"]
{{- end }}
{{- end }}

{{/* Leader election in the operator's own namespace: read, create once, renew and hand over. */}}
{{- define "specpilot.leaderRules" -}}
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["get", "create", "update"]
{{- end }}
