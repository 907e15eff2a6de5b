{{/* The release's name for every object (at most 63 characters). */}}
{{- define "hub.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "hub.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "hub.labels" -}}
{{ include "hub.selectorLabels" . }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "hub.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "hub.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}{{ default (include "hub.fullname" .) .Values.serviceAccount.name }}{{- else -}}{{ default "default" .Values.serviceAccount.name }}{{- end -}}
{{- end -}}

{{/* The roles this layout runs: `all`, or `ingest` and `delivery`. */}}
{{- define "hub.roles" -}}
{{- if eq .Values.layout "all" -}}all{{- else if eq .Values.layout "split" -}}ingest,delivery{{- else -}}{{- fail (printf "layout must be all or split (got %q)" .Values.layout) -}}{{- end -}}
{{- end -}}

{{/*
The container's environment: the plain settings of `env` (never a secret: those come from
existing Secrets), the secrets' references, and what the chart itself decides (the drain delay).
*/}}
{{- define "hub.env" -}}
{{- $secretKeys := list "STREAMING_HUB_POSTGRES_DSN" "STREAMING_HUB_ADMIN_TOKEN" "STREAMING_HUB_DEV_KEK" "STREAMING_HUB_KAFKA_SCRAM_PASSWORD" -}}
{{- $kekVar := default "STREAMING_HUB_KEK" (index .Values.env "STREAMING_HUB_KEK_REF") -}}
{{- if and (eq (lower (toString (index .Values.env "STREAMING_HUB_ENV" | default "local"))) "production") (not .Values.secrets.kek.name) -}}
{{- fail "secrets.kek.name is required in production: the key-encryption key comes from an existing Secret" -}}
{{- end -}}
{{- range $name, $value := .Values.env }}
{{- if has $name $secretKeys }}{{ fail (printf "env.%s holds a secret: give it through secrets.* from an existing Secret" $name) }}{{ end }}
{{- if eq $name $kekVar }}{{ fail (printf "env.%s holds the key-encryption key: give it through secrets.kek" $name) }}{{ end }}
{{- if not (has $name (list "STREAMING_HUB_ROLE" "STREAMING_HUB_DRAIN_DELAY" "STREAMING_HUB_PRE_STOP_DRAIN_TIMEOUT")) }}
- name: {{ $name }}
  value: {{ $value | toString | quote }}
{{- end }}
{{- end }}
{{- /* The drain delay: the original's name or ours when `env` sets one, else drain.delaySeconds. */}}
{{- $drain := index .Values.env "STREAMING_HUB_DRAIN_DELAY" | default (index .Values.env "STREAMING_HUB_PRE_STOP_DRAIN_TIMEOUT") | default (printf "%ds" (int .Values.drain.delaySeconds)) }}
- name: STREAMING_HUB_DRAIN_DELAY
  value: {{ $drain | toString | quote }}
{{- with .Values.secrets.dsn }}{{ if .name }}
- name: STREAMING_HUB_POSTGRES_DSN
  valueFrom: {secretKeyRef: {name: {{ .name | quote }}, key: {{ .key | quote }}}}
{{- end }}{{ end }}
{{- with .Values.secrets.adminToken }}{{ if .name }}
- name: STREAMING_HUB_ADMIN_TOKEN
  valueFrom: {secretKeyRef: {name: {{ .name | quote }}, key: {{ .key | quote }}}}
{{- end }}{{ end }}
{{- with .Values.secrets.kek }}{{ if .name }}
- name: {{ $kekVar }}
  valueFrom: {secretKeyRef: {name: {{ .name | quote }}, key: {{ .key | quote }}}}
{{- end }}{{ end }}
{{- with .Values.secrets.kafkaScramPassword }}{{ if .name }}
- name: STREAMING_HUB_KAFKA_SCRAM_PASSWORD
  valueFrom: {secretKeyRef: {name: {{ .name | quote }}, key: {{ .key | quote }}}}
{{- end }}{{ end }}
{{- range $name, $ref := .Values.secrets.extra }}
- name: {{ $name }}
  valueFrom: {secretKeyRef: {name: {{ $ref.name | quote }}, key: {{ $ref.key | quote }}}}
{{- end }}
{{- end -}}

{{- define "hub.volumes" -}}
# The root filesystem is read-only: the embedded store (when no DSN is given) and temporary files
# go to volumes of their own.
- name: data
  emptyDir: {}
- name: tmp
  emptyDir: {}
{{- end -}}

{{- define "hub.volumeMounts" -}}
- name: data
  mountPath: /data
- name: tmp
  mountPath: /tmp
{{- end -}}
