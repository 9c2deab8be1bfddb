{{/*
Names, labels and the pieces the operator's objects share. The refusals of S9.4 are in
_validate.tpl; the RBAC rules of S8.2 in _rbac.tpl.
*/}}

{{/* operator.nameOverride, else "hikyo-operator": the app.kubernetes.io/name label. */}}
{{- define "hikyo-operator.name" -}}
{{- .Values.operator.nameOverride | default "hikyo-operator" | trunc 50 | trimSuffix "-" -}}
{{- end -}}

{{/* operator.fullnameOverride, else the release name joined with the name (once). Suffixed
names (-worker, -redis, -dashboard, -worker-metrics) stay under 63 characters. */}}
{{- define "hikyo-operator.fullname" -}}
{{- $name := include "hikyo-operator.name" . -}}
{{- if .Values.operator.fullnameOverride -}}
{{- .Values.operator.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else if contains $name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "hikyo-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hikyo-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Every object carries these (and operator.commonLabels); the operator's own (not Redis)
add the component label. Selectors use selectorLabels only. */}}
{{- define "hikyo-operator.labels" -}}
{{ include "hikyo-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- with .Values.operator.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "hikyo-operator.componentLabels" -}}
{{ include "hikyo-operator.labels" . }}
app.kubernetes.io/component: hikyo-operator
{{- end -}}

{{/* S4.1.7 / S9.4: what this release reaches, on its ClusterRole: "*" or the namespaces. */}}
{{- define "hikyo-operator.reach" -}}
{{- if .Values.operator.namespaces -}}
{{- join "," .Values.operator.namespaces -}}
{{- else -}}
*
{{- end -}}
{{- end -}}

{{- define "hikyo-operator.scaled" -}}
{{- if and .Values.operator.scaled .Values.operator.scaled.enabled -}}true{{- end -}}
{{- end -}}

{{- define "hikyo-operator.image" -}}
{{- printf "%s@%s" .Values.operator.image.repository .Values.operator.image.digest -}}
{{- end -}}

{{- define "hikyo-operator.redisSecretName" -}}
{{- .Values.operator.scaled.redis.existingSecret | default (printf "%s-redis" (include "hikyo-operator.fullname" .)) -}}
{{- end -}}

{{- define "hikyo-operator.dashboardSecretName" -}}
{{- .Values.operator.dashboard.existingSecret | default (printf "%s-dashboard" (include "hikyo-operator.fullname" .)) -}}
{{- end -}}

{{/* S9.3: Django's session key, created once and kept across upgrades (lookup). */}}
{{- define "hikyo-operator.keptSecretValue" -}}
{{- $existing := lookup "v1" "Secret" .namespace .name -}}
{{- if and $existing $existing.data (hasKey $existing.data .key) -}}
{{- index $existing.data .key -}}
{{- else -}}
{{- randAlphaNum .length | b64enc -}}
{{- end -}}
{{- end -}}

{{/* S8.3: every pod the chart renders. */}}
{{- define "hikyo-operator.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "hikyo-operator.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end -}}

{{/* Scheduling of every pod the chart renders; called with (dict "root" $ "component" name).
A topology spread constraint without a labelSelector gets the pod's own selector labels. */}}
{{- define "hikyo-operator.podPlacement" -}}
{{- $op := .root.Values.operator -}}
{{- with $op.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with $op.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $op.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $op.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if $op.topologySpreadConstraints }}
{{- $own := include "hikyo-operator.podSelector" . | fromYaml }}
topologySpreadConstraints:
{{- range $op.topologySpreadConstraints }}
  {{- if hasKey . "labelSelector" }}
  - {{- toYaml . | nindent 4 }}
  {{- else }}
  - {{- toYaml (set (deepCopy .) "labelSelector" (dict "matchLabels" $own)) | nindent 4 }}
  {{- end }}
{{- end }}
{{- end }}
{{- with $op.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The hosts the dashboard answers (DJANGO_ALLOWED_HOSTS): the Service's names, loopback
for port-forwards, and operator.dashboard.hosts. Probes answer any Host. */}}
{{- define "hikyo-operator.allowedHosts" -}}
{{- $svc := include "hikyo-operator.fullname" . -}}
{{- $ns := .Release.Namespace -}}
{{- $hosts := list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) "localhost" "127.0.0.1" -}}
{{- join "," (concat $hosts .Values.operator.dashboard.hosts) -}}
{{- end -}}

{{/* S9.2: the environment of every operator process (run_operator and workers): the chart's
own variables, then operator.extraEnv (which may not name one of them, _validate.tpl). */}}
{{- define "hikyo-operator.env" -}}
{{ include "hikyo-operator.chartEnv" . }}
{{- with .Values.operator.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "hikyo-operator.chartEnv" -}}
{{- $op := .Values.operator -}}
- name: HIKYO_OPERATOR_NAMESPACES
  value: {{ join "," $op.namespaces | quote }}
- name: HIKYO_OPERATOR_TRIGGER_ROLLOUTS
  value: {{ $op.triggerRollouts | toString | quote }}
- name: HIKYO_OPERATOR_NATIVE_SECRET_TYPES
  value: {{ $op.nativeSecretTypes | toString | quote }}
- name: HIKYO_OPERATOR_STATUS_REPORTING
  value: {{ $op.statusReporting | toString | quote }}
- name: HIKYO_OPERATOR_DESIGNATED_SERVICE_ACCOUNTS
  value: {{ $op.designatedServiceAccounts | toJson | quote }}
- name: HIKYO_OPERATOR_FETCH_QPS
  value: {{ $op.fetchQPS | toString | quote }}
- name: HIKYO_OPERATOR_FETCH_BURST
  value: {{ $op.fetchBurst | int64 | toString | quote }}
- name: HIKYO_OPERATOR_ALLOW_STAMP_ROOT_RESET
  value: {{ $op.allowStampRootReset | toString | quote }}
- name: HIKYO_OPERATOR_LEADER_ELECTION
  value: "true"
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: HIKYO_OPERATOR_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: HIKYO_OPERATOR_METRICS_ADDR
  value: ":8080"
- name: HIKYO_OPERATOR_HEALTH_ADDR
  value: ":8081"
- name: HIKYO_LOG_LEVEL
  value: {{ $op.logLevel | quote }}
- name: HIKYO_OPERATOR_HTTPS
  value: {{ $op.dashboard.https | toString | quote }}
- name: DJANGO_ALLOWED_HOSTS
  value: {{ include "hikyo-operator.allowedHosts" . | quote }}
- name: DJANGO_SECRET_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "hikyo-operator.dashboardSecretName" . }}
      key: secret-key
- name: HIKYO_OPERATOR_DATA_DIR
  value: /var/lib/hikyo-operator
- name: HOME
  value: /tmp
- name: PYTHONDONTWRITEBYTECODE
  value: "1"
{{- if include "hikyo-operator.scaled" . }}
- name: HIKYO_OPERATOR_REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "hikyo-operator.redisSecretName" . }}
      key: {{ $op.scaled.redis.key }}
- name: HIKYO_OPERATOR_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ $op.scaled.database.existingSecret }}
      key: {{ $op.scaled.database.key }}
{{- end }}
{{- end -}}

{{/* The writable paths under the read-only root (S8.3): /tmp and the SQLite directory. */}}
{{- define "hikyo-operator.volumeMounts" -}}
- name: tmp
  mountPath: /tmp
- name: data
  mountPath: /var/lib/hikyo-operator
{{- with .Values.operator.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "hikyo-operator.volumes" -}}
- name: tmp
  emptyDir:
    sizeLimit: 64Mi
- name: data
  emptyDir:
    sizeLimit: 256Mi
{{- with .Values.operator.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* S4.1.8: how many shard leaders (1 unsharded; embedded mode is always 1). */}}
{{- define "hikyo-operator.shards" -}}
{{- if include "hikyo-operator.scaled" . -}}{{ int64 (.Values.operator.scaled.shards | default 1) }}{{- else -}}1{{- end -}}
{{- end -}}

{{/* A shard leader's component label: shard 0 keeps the unsharded one, so its Deployment's
selector never changes as shards are added. */}}
{{- define "hikyo-operator.shardComponent" -}}
hikyo-operator{{ if gt (int .) 0 }}-shard-{{ . }}{{ end }}
{{- end -}}

{{/* The operator's pods (run_operator, component hikyo-operator) or the workers'. */}}
{{- define "hikyo-operator.podSelector" -}}
{{ include "hikyo-operator.selectorLabels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* S4.14.5: the one-line command of NOTES.txt; a JSON-patch test keeps every other finalizer. */}}
{{- define "hikyo-operator.removeOrphanFinalizers" -}}
{{- `kubectl get hikyosecrets -A -o go-template='{{range .items}}{{$ns := .metadata.namespace}}{{$n := .metadata.name}}{{range $i, $f := .metadata.finalizers}}{{if eq $f "hikyo.dev/orphan"}}{{$ns}} {{$n}} {{$i}}{{"\n"}}{{end}}{{end}}{{end}}' | while read -r ns name i; do kubectl patch hikyosecret -n "$ns" "$name" --type json -p "[{\"op\":\"test\",\"path\":\"/metadata/finalizers/$i\",\"value\":\"hikyo.dev/orphan\"},{\"op\":\"remove\",\"path\":\"/metadata/finalizers/$i\"}]"; done` -}}
{{- end -}}

{{/* One egress rule of operator.networkPolicy: TCP to .to.ports (or .to.port) at .to.cidrs
(none: any address). */}}
{{- define "hikyo-operator.egressRule" -}}
- ports:
    {{- range (.to.ports | default (list .to.port)) }}
    - port: {{ int64 . }}
      protocol: TCP
    {{- end }}
  {{- with .to.cidrs }}
  to:
    {{- range . }}
    - ipBlock:
        cidr: {{ . }}
    {{- end }}
  {{- end }}
{{- end -}}
