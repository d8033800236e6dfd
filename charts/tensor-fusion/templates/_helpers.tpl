{{/* Names, labels and images shared by every template (deployment.md §1, §4, §6). */}}

{{/* The release's full name: fullnameOverride, else the release name (TF_RELEASE_FULLNAME). */}}
{{- define "tf.fullname" -}}
{{- default .Release.Name .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "tf.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "tf.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride -}}
{{- end -}}

{{/* Labels every object carries. */}}
{{- define "tf.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/name: {{ include "tf.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* The controller Deployment's selector. */}}
{{- define "tf.controllerSelector" -}}
app.kubernetes.io/name: {{ include "tf.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end -}}

{{- define "tf.serviceAccountName" -}}
{{- include "tf.fullname" . -}}
{{- end -}}

{{/*
An image reference from a {repository, tag} map or a "repository:tag" string; an empty tag is
the chart's appVersion. Call with (dict "image" <value> "root" $).
*/}}
{{- define "tf.image" -}}
{{- $image := .image -}}
{{- if kindIs "string" $image -}}
{{- $image -}}
{{- else -}}
{{- $tag := default .root.Chart.AppVersion (toString (default "" $image.tag)) -}}
{{- printf "%s:%s" $image.repository $tag -}}
{{- end -}}
{{- end -}}

{{/* Whether the webhook sees every pod (progressive migration or autoMigration.enable). */}}
{{- define "tf.migrationMode" -}}
{{- if or .Values.controller.nvidiaOperatorProgressiveMigration (dig "autoMigration" "enable" false .Values.dynamicConfig) -}}
true
{{- end -}}
{{- end -}}

{{/* The Secret holding the GreptimeDB password (cloud mode), and its key. */}}
{{- define "tf.greptimeSecretName" -}}
{{- default (printf "%s-greptimedb-secret" (include "tf.fullname" .)) .Values.greptime.existingSecret -}}
{{- end -}}

{{- define "tf.greptimeSecretKey" -}}
{{- if .Values.greptime.existingSecret -}}{{ .Values.greptime.existingSecretKey | default "password" }}{{- else -}}password{{- end -}}
{{- end -}}

{{/* The Secret holding the password of the read-only rule user (docs/rule-sandbox.md), and its key. */}}
{{- define "tf.greptimeRuleSecretName" -}}
{{- default (printf "%s-greptimedb-rule-reader" (include "tf.fullname" .)) .Values.greptime.ruleReader.existingSecret -}}
{{- end -}}

{{- define "tf.greptimeRuleSecretKey" -}}
{{- if .Values.greptime.ruleReader.existingSecret -}}{{ .Values.greptime.ruleReader.existingSecretKey | default "password" }}{{- else -}}password{{- end -}}
{{- end -}}

{{/* The controller's rule user (TSDB_RULE_*), only when greptime.ruleReader.user is set. */}}
{{- define "tf.tsdbRuleEnv" -}}
{{- if and .Values.greptime.host .Values.greptime.ruleReader.user -}}
- name: TSDB_RULE_USER
  value: {{ .Values.greptime.ruleReader.user | quote }}
- name: TSDB_RULE_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "tf.greptimeRuleSecretName" . }}
      key: {{ include "tf.greptimeRuleSecretKey" . }}
{{- end }}
{{- end -}}

{{/* The TSDB_* env of the controller and the Console agent (deployment.md §3.1, §3.3). */}}
{{- define "tf.tsdbEnv" -}}
- name: TSDB_MYSQL_HOST
  value: {{ .Values.greptime.host | quote }}
- name: TSDB_MYSQL_PORT
  value: {{ .Values.greptime.port | quote }}
- name: TSDB_MYSQL_DATABASE
  value: {{ .Values.greptime.db | quote }}
- name: TSDB_HTTP_PORT
  value: {{ .Values.greptime.httpPort | quote }}
- name: TSDB_IS_CLOUD
  value: {{ .Values.greptime.isCloud | quote }}
- name: TSDB_MYSQL_USER
  value: {{ ternary .Values.greptime.user "root" (and .Values.greptime.isCloud true) | quote }}
{{- if .Values.greptime.isCloud }}
- name: TSDB_MYSQL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "tf.greptimeSecretName" . }}
      key: {{ include "tf.greptimeSecretKey" . }}
{{- end }}
{{- end -}}
