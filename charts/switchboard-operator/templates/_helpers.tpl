{{/* Chart name, shortened to the 63 characters a label allows. */}}
{{- define "switchboard-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified app name. */}}
{{- define "switchboard-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "switchboard-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels that select the operator pod. */}}
{{- define "switchboard-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "switchboard-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "switchboard-operator.labels" -}}
helm.sh/chart: {{ include "switchboard-operator.chart" . }}
{{ include "switchboard-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: operator
{{- end }}

{{/* The selector labels as k=v,k=v, for the NetworkPolicies the operator writes. */}}
{{- define "switchboard-operator.selectorString" -}}
app.kubernetes.io/name={{ include "switchboard-operator.name" . }},app.kubernetes.io/instance={{ .Release.Name }}
{{- end }}

{{- define "switchboard-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "switchboard-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "switchboard-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
