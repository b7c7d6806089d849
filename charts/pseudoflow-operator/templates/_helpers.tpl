{{- define "pseudoflow.name" -}}pseudoflow-operator{{- end -}}
{{- /* Object names: the release name when it already says pseudoflow, else <release>-pseudoflow,
so two releases (e.g. one per team namespace) never share a ClusterRole. */ -}}
{{- define "pseudoflow.fullname" -}}
{{- if contains "pseudoflow" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-pseudoflow" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- define "pseudoflow.labels" -}}
app.kubernetes.io/name: {{ include "pseudoflow.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}
{{- define "pseudoflow.selector" -}}
app.kubernetes.io/name: {{ include "pseudoflow.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
{{- define "pseudoflow.controllerImage" -}}
{{ .Values.image.controller.repository }}:{{ .Values.image.controller.tag | default .Chart.AppVersion }}
{{- end -}}
{{- define "pseudoflow.runtimeImage" -}}
{{ .Values.image.runtime.repository }}:{{ .Values.image.runtime.tag | default .Chart.AppVersion }}
{{- end -}}
{{- define "pseudoflow.webhookService" -}}
{{ include "pseudoflow.fullname" . }}-webhook
{{- end -}}
{{- /* The self-made serving certificate's names: the webhook Service's, then certNames. */ -}}
{{- define "pseudoflow.webhookCertNames" -}}
{{- $svc := include "pseudoflow.webhookService" . -}}
{{- $names := list (printf "%s.%s.svc" $svc .Release.Namespace) (printf "%s.%s.svc.cluster.local" $svc .Release.Namespace) -}}
{{- join "," (concat $names .Values.webhook.certNames) -}}
{{- end -}}
