{{/* The `specpilot run` arguments, from the watch, leader-election and metrics values. */}}
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
- --lease-name={{ default (include "specpilot.fullname" .) .Values.leaderElection.leaseName }}
- --lease-namespace={{ .Release.Namespace }}
- --lease-duration={{ .Values.leaderElection.leaseDurationSeconds }}
{{- else }}
- --no-leader-election
{{- end }}
- --metrics-port={{ .Values.operator.metricsPort }}
- --liveness-stall-seconds={{ .Values.operator.livenessStallSeconds }}
- --scrape-max-bytes={{ int .Values.operator.scrapeMaxBytes }}
{{- if .Values.operator.verbose }}
- --verbose
{{- end }}
{{- range $vendor, $image := .Values.serving.images }}
{{- if $image }}
- --serving-image={{ $vendor }}={{ $image }}
{{- end }}
{{- end }}
{{- range .Values.serving.imagePullSecrets }}
- --image-pull-secret={{ . }}
{{- end }}
- --runtime-image={{ default (include "specpilot.image" .) .Values.serving.runtimeImage }}
{{- with .Values.serving.listenAddress }}
- {{ printf "--serving-listen-address=%s" . | quote }}
{{- end }}
{{- range .Values.operator.allowedHostPaths }}
- --allow-host-path={{ . }}
{{- end }}
{{- with .Values.operator.policy }}
- --secret-references={{ .secretReferences }}
{{- range .allowedEnv }}
- --allow-env={{ . }}
{{- end }}
{{- range .allowedRegistries }}
- --allow-registry={{ . }}
{{- end }}
{{- if .allowUnconfined }}
- --allow-unconfined
{{- end }}
{{- end }}
{{- with .Values.operator.extraArgs }}
{{ toYaml . }}
{{- end }}
{{- end }}
