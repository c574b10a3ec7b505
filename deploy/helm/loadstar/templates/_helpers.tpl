{{/*
Names, labels and image references shared by every template.

Object names are "<fullname>-<component>": with the release name `loadstar` (which contains
the chart name) fullname is just `loadstar`, so the objects are `loadstar-scorer`,
`loadstar-agent`, `loadstar-scorer-agents`, ... - the names the docs, the scorer's default
`--agent-service-account=loadstar/loadstar-agent` and the e2e suite use. fullname is cut to
40 characters so that the longest suffix (`-scorer-leader-election`) still fits a 63-character
name.
*/}}

{{- define "loadstar.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{- define "loadstar.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "loadstar.scorerName" -}}
{{- include "loadstar.fullname" . }}-scorer
{{- end -}}

{{- define "loadstar.agentName" -}}
{{- include "loadstar.fullname" . }}-agent
{{- end -}}

{{/* The agent's PriorityClass: this release's own, or an existing one by name. */}}
{{- define "loadstar.agentPriorityClassName" -}}
{{- if .Values.agent.priorityClass.create -}}
{{- include "loadstar.agentName" . -}}
{{- else -}}
{{- .Values.agent.priorityClass.name -}}
{{- end -}}
{{- end -}}

{{/* The kubernetes.io/tls Secret with the scorer's gRPC certificate. */}}
{{- define "loadstar.tlsSecretName" -}}
{{- default (printf "%s-tls" (include "loadstar.scorerName" .)) .Values.scorer.tls.secretName -}}
{{- end -}}

{{/* Service accounts whose pod-bound tokens the scorer accepts from agents. */}}
{{- define "loadstar.agentServiceAccounts" -}}
{{- if .Values.scorer.auth.agentServiceAccounts -}}
{{- join "," .Values.scorer.auth.agentServiceAccounts -}}
{{- else -}}
{{- printf "%s/%s" .Release.Namespace (include "loadstar.agentName" .) -}}
{{- end -}}
{{- end -}}

{{/* Labels on every object; call with (dict "ctx" $ "component" "scorer"). */}}
{{- define "loadstar.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .ctx.Chart.Name .ctx.Chart.Version | replace "+" "_" }}
{{ include "loadstar.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: loadstar
{{- end -}}

{{/* The labels a component's selectors match (never change them in an upgrade). */}}
{{- define "loadstar.selectorLabels" -}}
app.kubernetes.io/name: {{ include "loadstar.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* An image reference; call with (dict "image" .Values.scorer.image "ctx" $). */}}
{{- define "loadstar.image" -}}
{{- printf "%s:%s" .image.repository (default .ctx.Chart.AppVersion .image.tag) -}}
{{- end -}}
