{{/* The `specpilot run` command line, from the watch, leader-election and port values. */}}
{{- define "specpilot.operatorArgs" -}}
- run
{{- if include "specpilot.clusterWide" . }}
- --all-namespaces
{{- else }}
{{- range .Values.watch.namespaces }}
- --namespace={{ . }}
{{- end }}
{{- end }}
{{- if .Values.leaderElection.enabled }}
- --leader-election
- --lease-name={{ default (include "specpilot.fullname" .) .Values.leaderElection.leaseName }}
{{- end }}
- --metrics-port={{ .Values.operator.metricsPort }}
- --health-port={{ .Values.operator.healthPort }}
- --log-level={{ .Values.operator.logLevel }}
{{- with .Values.operator.extraArgs }}
{{ toYaml . }}
{{- end }}
{{- end }}
