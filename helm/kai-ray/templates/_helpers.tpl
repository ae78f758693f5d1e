{{- define "kai-ray.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kai-ray.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kai-ray.labels" -}}
app.kubernetes.io/name: {{ include "kai-ray.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "kai-ray.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kai-ray.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "kai-ray.image" -}}
{{- $repository := required "image.repository is required: the image built from operators/Dockerfile and pushed to your registry (--set image.repository=REGISTRY/kai-ray; docs/install.md: The operator image)" .Values.image.repository -}}
{{- printf "%s:%s" $repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* One Lease per operator and release: two releases in one namespace never share a leader. */}}
{{- define "kai-ray.leaseName" -}}
{{- if and (eq .operator "scheduler") .root.Values.leaderElection.leaseName -}}
{{- .root.Values.leaderElection.leaseName -}}
{{- else -}}
{{- printf "%s-%s" (include "kai-ray.fullname" .root) .operator | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Flags shared by both operators. */}}
{{/* off | queues | all: queueAdmissionGating, with a bare YAML off (false) read as off */}}
{{- define "kai-ray.gating" -}}
{{- $v := toString .Values.queueAdmissionGating -}}
{{- if or (eq $v "false") (eq $v "") (eq $v "<nil>") }}off{{ else }}{{ $v }}{{ end -}}
{{- end -}}

{{/* "true" when the podgrouper serves its admission webhook (upstream gangs or the queue-admission gate) */}}
{{- define "kai-ray.webhook" -}}
{{- if or .Values.podgrouper.upstreamGangs (ne (include "kai-ray.gating" .) "off") }}true{{ end -}}
{{- end -}}

{{/* "true" when cert-manager issues the webhook's certificate and the chart registers the webhook */}}
{{- define "kai-ray.certManager" -}}
{{- if and (include "kai-ray.webhook" .) .Values.webhook.certManager.enabled }}true{{ end -}}
{{- end -}}

{{- define "kai-ray.webhookCertName" -}}{{ include "kai-ray.fullname" . }}-podgrouper-webhook{{- end -}}

{{- define "kai-ray.commonArgs" -}}
- --scheduler-name={{ .Values.schedulerName }}
- --queue-label-key={{ .Values.queueLabelKey }}
- --metrics-port={{ .Values.metrics.port }}
- --health-port={{ .Values.health.port }}
{{- range .Values.watchNamespaces }}
- --namespace={{ . }}
{{- end }}
{{- end -}}

{{- define "kai-ray.podCommon" -}}
serviceAccountName: {{ include "kai-ray.serviceAccountName" . }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "kai-ray.ports" -}}
- {name: metrics, containerPort: {{ .Values.metrics.port }}}
- {name: health, containerPort: {{ .Values.health.port }}}
{{- end -}}

{{- define "kai-ray.probes" -}}
livenessProbe:
  httpGet: {path: /healthz, port: health}
  initialDelaySeconds: 10
  periodSeconds: 10
readinessProbe:
  httpGet: {path: /healthz, port: health}
  periodSeconds: 5
{{- end -}}
