{{/*
S9.4 refusals. Each fails rendering with one message that names the value and the rule.
values.schema.json checks the same types first; these also hold under
--skip-schema-validation. Checks needing a cluster use lookup, which `helm template` skips.
*/}}

{{- define "hikyo-operator.fail" -}}
{{- fail (printf "hikyo-operator: %s" .) -}}
{{- end -}}

{{- define "hikyo-operator.requireBool" -}}
{{- if not (kindIs "bool" .value) -}}
{{- include "hikyo-operator.fail" (printf "%s must be true or false, got %v" .name .value) -}}
{{- end -}}
{{- end -}}

{{/* A positive number; integer: also whole (fetchBurst, replicaCount, scaled.workers). */}}
{{- define "hikyo-operator.requirePositive" -}}
{{- $v := .value -}}
{{- if not (or (kindIs "float64" $v) (kindIs "int64" $v) (kindIs "int" $v)) -}}
{{- include "hikyo-operator.fail" (printf "%s must be a positive number, got %v" .name $v) -}}
{{- end -}}
{{- if le (float64 $v) 0.0 -}}
{{- include "hikyo-operator.fail" (printf "%s must be a positive number, got %v" .name $v) -}}
{{- end -}}
{{- if and .integer (ne (float64 $v) (floor $v)) -}}
{{- include "hikyo-operator.fail" (printf "%s must be a positive integer, got %v" .name $v) -}}
{{- end -}}
{{- end -}}

{{- define "hikyo-operator.validate" -}}
{{- $op := .Values.operator -}}
{{- if not (kindIs "map" $op) -}}
{{- include "hikyo-operator.fail" "operator is required: a map with enabled, namespaces, triggerRollouts, designatedServiceAccounts and resources" -}}
{{- end -}}
{{- if not (hasKey $op "enabled") -}}
{{- include "hikyo-operator.fail" "operator.enabled is required (true, or false to render no operator object)" -}}
{{- end -}}
{{- include "hikyo-operator.requireBool" (dict "name" "operator.enabled" "value" $op.enabled) -}}
{{- if $op.enabled -}}
{{- include "hikyo-operator.validateEnabled" . -}}
{{- end -}}
{{- end -}}

{{- define "hikyo-operator.validateEnabled" -}}
{{- $op := .Values.operator -}}
{{/* namespaces: the watch list and the RBAC bindings (S8.1 rules for each entry). */}}
{{- if not (hasKey $op "namespaces") -}}
{{- include "hikyo-operator.fail" "operator.namespaces is required: [] for cluster-wide, or a list of namespaces" -}}
{{- end -}}
{{- if not (kindIs "slice" $op.namespaces) -}}
{{- include "hikyo-operator.fail" (printf "operator.namespaces must be a list of namespaces ([] for cluster-wide), got %v" $op.namespaces) -}}
{{- end -}}
{{- $seen := dict -}}
{{- range $i, $ns := $op.namespaces -}}
{{- if not (kindIs "string" $ns) -}}
{{- include "hikyo-operator.fail" (printf "operator.namespaces[%d] must be a namespace name, got %v" $i $ns) -}}
{{- end -}}
{{- if eq (trim $ns) "" -}}
{{- include "hikyo-operator.fail" (printf "operator.namespaces[%d] is empty" $i) -}}
{{- end -}}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$" $ns) -}}
{{- include "hikyo-operator.fail" (printf "operator.namespaces[%d] %q is not a namespace name (DNS-1123 label, at most 63 characters)" $i $ns) -}}
{{- end -}}
{{- if hasKey $seen $ns -}}
{{- include "hikyo-operator.fail" (printf "operator.namespaces lists %q twice" $ns) -}}
{{- end -}}
{{- $_ := set $seen $ns true -}}
{{- end -}}
{{- if not (hasKey $op "triggerRollouts") -}}
{{- include "hikyo-operator.fail" "operator.triggerRollouts is required (true grants workload patch for rollouts; false: you own restarts)" -}}
{{- end -}}
{{- include "hikyo-operator.requireBool" (dict "name" "operator.triggerRollouts" "value" $op.triggerRollouts) -}}
{{/* designatedServiceAccounts: namespace -> [ServiceAccount], the TokenRequest Roles. */}}
{{- if not (hasKey $op "designatedServiceAccounts") -}}
{{- include "hikyo-operator.fail" "operator.designatedServiceAccounts is required: {} or a map of namespace to a list of ServiceAccount names" -}}
{{- end -}}
{{- $dsa := $op.designatedServiceAccounts -}}
{{- if not (kindIs "map" $dsa) -}}
{{- include "hikyo-operator.fail" (printf "operator.designatedServiceAccounts must be a map of namespace to a list of ServiceAccount names, got %v" $dsa) -}}
{{- end -}}
{{- range $ns, $names := $dsa -}}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$" $ns) -}}
{{- include "hikyo-operator.fail" (printf "operator.designatedServiceAccounts: %q is not a namespace name" $ns) -}}
{{- end -}}
{{- if not (kindIs "slice" $names) -}}
{{- include "hikyo-operator.fail" (printf "operator.designatedServiceAccounts.%s must be a list of ServiceAccount names, got %v" $ns $names) -}}
{{- end -}}
{{- range $i, $name := $names -}}
{{- if or (not (kindIs "string" $name)) (eq (trim (toString $name)) "") -}}
{{- include "hikyo-operator.fail" (printf "operator.designatedServiceAccounts.%s[%d] is empty: name a ServiceAccount" $ns $i) -}}
{{- end -}}
{{- end -}}
{{- if and $op.namespaces (not (has $ns $op.namespaces)) -}}
{{- include "hikyo-operator.fail" (printf "operator.designatedServiceAccounts names namespace %q, which operator.namespaces does not list (the operator would not watch it)" $ns) -}}
{{- end -}}
{{- end -}}
{{/* resources: all four, for every operator container. */}}
{{- $res := $op.resources | default dict -}}
{{- range $kind := list "requests" "limits" -}}
{{- range $what := list "cpu" "memory" -}}
{{- $section := index $res $kind | default dict -}}
{{- if not (and (kindIs "map" $section) (hasKey $section $what) (index $section $what)) -}}
{{- include "hikyo-operator.fail" (printf "operator.resources.%s.%s is required (all four of requests/limits cpu/memory)" $kind $what) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{/* Defaulted keys: types. */}}
{{- range $key := list "statusReporting" "nativeSecretTypes" "leaderElection" "allowStampRootReset" -}}
{{- include "hikyo-operator.requireBool" (dict "name" (printf "operator.%s" $key) "value" (index $op $key)) -}}
{{- end -}}
{{- include "hikyo-operator.requireBool" (dict "name" "operator.scaled.enabled" "value" $op.scaled.enabled) -}}
{{- include "hikyo-operator.requireBool" (dict "name" "operator.dashboard.https" "value" $op.dashboard.https) -}}
{{- include "hikyo-operator.requirePositive" (dict "name" "operator.replicaCount" "value" $op.replicaCount "integer" true) -}}
{{- include "hikyo-operator.requirePositive" (dict "name" "operator.fetchQPS" "value" $op.fetchQPS "integer" false) -}}
{{- include "hikyo-operator.requirePositive" (dict "name" "operator.fetchBurst" "value" $op.fetchBurst "integer" true) -}}
{{- /* The operator's own bounds (workers/engine/settings.py): a larger rate is a typo. */ -}}
{{- if or (lt (float64 $op.fetchQPS) 0.01) (gt (float64 $op.fetchQPS) 10000.0) -}}
{{- include "hikyo-operator.fail" (printf "operator.fetchQPS must be from 0.01 to 10000, got %v" $op.fetchQPS) -}}
{{- end -}}
{{- if gt (float64 $op.fetchBurst) 100000.0 -}}
{{- include "hikyo-operator.fail" (printf "operator.fetchBurst must be from 1 to 100000, got %v" $op.fetchBurst) -}}
{{- end -}}
{{- include "hikyo-operator.requirePositive" (dict "name" "operator.scaled.workers" "value" $op.scaled.workers "integer" true) -}}
{{- include "hikyo-operator.requirePositive" (dict "name" "operator.scaled.workerConcurrency" "value" $op.scaled.workerConcurrency "integer" true) -}}
{{- $shards := $op.scaled.shards | default 1 -}}
{{- include "hikyo-operator.requirePositive" (dict "name" "operator.scaled.shards" "value" $shards "integer" true) -}}
{{- if gt (float64 $shards) 64.0 -}}
{{- include "hikyo-operator.fail" (printf "operator.scaled.shards must be from 1 to 64, got %v" $shards) -}}
{{- end -}}
{{- if and (not $op.scaled.enabled) (gt (float64 $shards) 1.0) -}}
{{- include "hikyo-operator.fail" (printf "operator.scaled.shards must be 1 in embedded mode (got %v): shard leaders share a Redis keyed queue; set operator.scaled.enabled" $shards) -}}
{{- end -}}
{{- if not (has $op.scaled.workerPool (list "threads" "prefork")) -}}
{{- include "hikyo-operator.fail" (printf "operator.scaled.workerPool must be threads or prefork, got %v" $op.scaled.workerPool) -}}
{{- end -}}
{{- if not $op.leaderElection -}}
{{- include "hikyo-operator.fail" "operator.leaderElection must be true: the Lease keeps two operators from reconciling the same objects (S4.1.7)" -}}
{{- end -}}
{{- if and (not $op.scaled.enabled) (ne (int64 $op.replicaCount) 1) -}}
{{- include "hikyo-operator.fail" (printf "operator.replicaCount must be 1 in embedded mode (got %v): its queue is in memory; set operator.scaled.enabled for more replicas" $op.replicaCount) -}}
{{- end -}}
{{- if not (regexMatch "^sha256:[0-9a-f]{64}$" (toString $op.image.digest)) -}}
{{- include "hikyo-operator.fail" (printf "operator.image.digest must be sha256:<64 hex> (got %q): the chart runs the operator image by digest only" (toString $op.image.digest)) -}}
{{- end -}}
{{- if and $op.scaled.enabled (not $op.scaled.database.existingSecret) -}}
{{- include "hikyo-operator.fail" "operator.scaled.database.existingSecret is required in scaled mode: a Secret holding the PostgreSQL DSN of the observation store" -}}
{{- end -}}
{{- include "hikyo-operator.validateSecretReferences" . -}}
{{- include "hikyo-operator.validateFitting" . -}}
{{- include "hikyo-operator.validateAgainstCluster" . -}}
{{- end -}}

{{/* Values the apiserver (or prometheus-operator) would refuse only at install, and values it
would accept that then defeat the chart (issue 50). */}}
{{- define "hikyo-operator.validateFitting" -}}
{{- $op := .Values.operator -}}
{{/* extraEnv: a second definition of a name wins in Kubernetes, and would undo the chart's. */}}
{{- $reserved := list "HIKYO_OPERATOR_SHARDS" "HIKYO_OPERATOR_SHARD" -}}
{{- range (include "hikyo-operator.chartEnv" . | fromYamlArray) }}{{ $reserved = append $reserved .name }}{{ end -}}
{{- range $i, $env := $op.extraEnv -}}
{{- if and (kindIs "map" $env) (has $env.name $reserved) -}}
{{- include "hikyo-operator.fail" (printf "operator.extraEnv[%d] sets %s, which the chart sets itself from its values: set the value instead (reserved: %s)" $i $env.name (join ", " $reserved)) -}}
{{- end -}}
{{- end -}}
{{/* Volumes: the chart's own are tmp (/tmp) and data (/var/lib/hikyo-operator). */}}
{{- $volumes := list "tmp" "data" -}}
{{- range $i, $volume := $op.extraVolumes -}}
{{- if has $volume.name $volumes -}}
{{- include "hikyo-operator.fail" (printf "operator.extraVolumes[%d]: the volume name %q is used twice (the chart's own are tmp and data)" $i $volume.name) -}}
{{- end -}}
{{- $volumes = append $volumes $volume.name -}}
{{- end -}}
{{- $paths := list "/tmp" "/var/lib/hikyo-operator" -}}
{{- range $i, $mount := $op.extraVolumeMounts -}}
{{- if not (has $mount.name $volumes) -}}
{{- include "hikyo-operator.fail" (printf "operator.extraVolumeMounts[%d] mounts volume %q, which neither operator.extraVolumes nor the chart (tmp, data) defines" $i $mount.name) -}}
{{- end -}}
{{- if has (trimSuffix "/" $mount.mountPath) $paths -}}
{{- include "hikyo-operator.fail" (printf "operator.extraVolumeMounts[%d]: mountPath %q is mounted twice (the chart's own are /tmp and /var/lib/hikyo-operator)" $i $mount.mountPath) -}}
{{- end -}}
{{- $paths = append $paths (trimSuffix "/" $mount.mountPath) -}}
{{- end -}}
{{/* Scheduling. */}}
{{- if and $op.priorityClassName (not (regexMatch `^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$` (toString $op.priorityClassName))) -}}
{{- include "hikyo-operator.fail" (printf "operator.priorityClassName %q is not a PriorityClass name (lower-case DNS-1123 subdomain)" (toString $op.priorityClassName)) -}}
{{- end -}}
{{- range $i, $spread := $op.topologySpreadConstraints -}}
{{- $skew := $spread.maxSkew -}}
{{- if not (and (or (kindIs "int64" $skew) (kindIs "float64" $skew) (kindIs "int" $skew)) (ge (float64 $skew) 1.0) (eq (float64 $skew) (floor $skew))) -}}
{{- include "hikyo-operator.fail" (printf "operator.topologySpreadConstraints[%d].maxSkew must be an integer of at least 1, got %v" $i $skew) -}}
{{- end -}}
{{- if not (has $spread.whenUnsatisfiable (list "DoNotSchedule" "ScheduleAnyway")) -}}
{{- include "hikyo-operator.fail" (printf "operator.topologySpreadConstraints[%d].whenUnsatisfiable must be DoNotSchedule or ScheduleAnyway, got %v" $i $spread.whenUnsatisfiable) -}}
{{- end -}}
{{- end -}}
{{/* NetworkPolicy CIDRs and peers. */}}
{{- $np := $op.networkPolicy -}}
{{- range $to := list "apiServer" "hikyoInstances" "database" "redis" -}}
{{- range $i, $cidr := (index $np $to).cidrs -}}
{{- if not (regexMatch `^((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])/(3[0-2]|[12]?[0-9])$|^[0-9a-fA-F:]*:[0-9a-fA-F:.]*/(12[0-8]|1[01][0-9]|[1-9]?[0-9])$` (toString $cidr)) -}}
{{- include "hikyo-operator.fail" (printf "operator.networkPolicy.%s.cidrs[%d] %q is not a CIDR (an address and a prefix length, e.g. 10.0.0.0/16)" $to $i (toString $cidr)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if $np.ingressFrom -}}
{{- include "hikyo-operator.fail" "operator.networkPolicy.ingressFrom is replaced by networkPolicy.metrics (who scrapes /metrics) and networkPolicy.dashboard.from (who reaches the dashboard): each port now has its own peers" -}}
{{- end -}}
{{/* ServiceMonitor durations (prometheus-operator's Duration). */}}
{{- $sm := $op.metrics.serviceMonitor -}}
{{- range $key := list "interval" "scrapeTimeout" -}}
{{- $duration := toString (index $sm $key | default "") -}}
{{- $ok := regexMatch `^(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?$` $duration -}}
{{- if eq $key "interval" }}{{ $ok = and $ok (ne $duration "") }}{{ end -}}
{{- if not $ok -}}
{{- include "hikyo-operator.fail" (printf "operator.metrics.serviceMonitor.%s %q is not a Prometheus duration (e.g. 30s, 1m30s)" $key $duration) -}}
{{- end -}}
{{- end -}}
{{- include "hikyo-operator.validateDisruptionBudget" . -}}
{{- end -}}

{{/* A budget the single embedded pod (or any Deployment) can never meet blocks every drain;
maxUnavailable 0 is honoured as asked (it holds voluntary evictions until changed). */}}
{{- define "hikyo-operator.validateDisruptionBudget" -}}
{{- $op := .Values.operator -}}
{{- $min := $op.podDisruptionBudget.minAvailable -}}
{{- if and $op.podDisruptionBudget.enabled (not (kindIs "invalid" $min)) -}}
{{- $replicas := dict "run_operator" (int64 $op.replicaCount) -}}
{{- if include "hikyo-operator.scaled" . }}{{ $_ := set $replicas "worker" (int64 $op.scaled.workers) }}{{ end -}}
{{- range $what, $count := $replicas -}}
{{- $kept := 0.0 -}}
{{- if kindIs "string" $min -}}
{{- $kept = ceil (divf (mulf (float64 (trimSuffix "%" $min)) $count) 100.0) -}}
{{- else -}}
{{- $kept = float64 $min -}}
{{- end -}}
{{- if ge $kept (float64 $count) -}}
{{- include "hikyo-operator.fail" (printf "operator.podDisruptionBudget.minAvailable %v keeps all %d %s pod(s) up, so every drain would be blocked: use maxUnavailable (1 by default), or a minAvailable below the replica count" $min $count $what) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* S9.3: no operator pod references the server's Secrets. */}}
{{- define "hikyo-operator.validateSecretReferences" -}}
{{- $op := .Values.operator -}}
{{- $server := list "hikyo-database" "hikyo-root-key" -}}
{{- with .Values.database }}{{ if kindIs "map" . }}{{ with .existingSecret }}{{ $server = append $server . }}{{ end }}{{ end }}{{ end -}}
{{- with .Values.rootKey }}{{ if kindIs "map" . }}{{ with .existingSecret }}{{ $server = append $server . }}{{ end }}{{ end }}{{ end -}}
{{- $refs := dict "operator.scaled.redis.existingSecret" $op.scaled.redis.existingSecret "operator.scaled.database.existingSecret" $op.scaled.database.existingSecret "operator.dashboard.existingSecret" $op.dashboard.existingSecret -}}
{{- range $i, $pull := $op.imagePullSecrets -}}
{{- $_ := set $refs (printf "operator.imagePullSecrets[%d]" $i) (ternary $pull.name $pull (kindIs "map" $pull)) -}}
{{- end -}}
{{- range $key, $name := $refs -}}
{{- if and $name (has $name $server) -}}
{{- include "hikyo-operator.fail" (printf "%s names %q, a Hikyo server Secret: no operator pod may reference it (S9.3)" $key $name) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Needs a cluster (skipped by `helm template`, where lookup answers nothing). */}}
{{- define "hikyo-operator.validateAgainstCluster" -}}
{{- $op := .Values.operator -}}
{{- $namespaces := lookup "v1" "Namespace" "" "" -}}
{{- if and $namespaces $namespaces.items (not $op.namespaces) -}}
{{- $existing := list -}}
{{- range $namespaces.items }}{{ $existing = append $existing .metadata.name }}{{ end -}}
{{- range $ns, $_ := $op.designatedServiceAccounts -}}
{{- if not (has $ns $existing) -}}
{{- include "hikyo-operator.fail" (printf "operator.designatedServiceAccounts names namespace %q, which does not exist in the cluster" $ns) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $roles := lookup "rbac.authorization.k8s.io/v1" "ClusterRole" "" "" -}}
{{- if and $roles $roles.items -}}
{{- $mine := include "hikyo-operator.reach" . -}}
{{- range $roles.items -}}
{{- $labels := .metadata.labels | default dict -}}
{{- $annotations := .metadata.annotations | default dict -}}
{{- $ownRelease := and (eq (index $annotations "meta.helm.sh/release-name" | default "") $.Release.Name) (eq (index $annotations "meta.helm.sh/release-namespace" | default "") $.Release.Namespace) -}}
{{- if and (eq (index $labels "app.kubernetes.io/component" | default "") "hikyo-operator") (not $ownRelease) -}}
{{- $theirs := index $annotations "hikyo.dev/reach" | default "" -}}
{{- $overlap := or (eq $mine "*") (eq $theirs "*") -}}
{{- range $ns := splitList "," $theirs }}{{ if has $ns (splitList "," $mine) }}{{ $overlap = true }}{{ end }}{{ end -}}
{{- if and $theirs $overlap -}}
{{- include "hikyo-operator.fail" (printf "operator.namespaces (reach %q) overlaps the operator of release %q in namespace %q (reach %q): two operators must not reconcile the same namespaces (S4.1.7)" $mine (index $annotations "meta.helm.sh/release-name" | default "?") (index $annotations "meta.helm.sh/release-namespace" | default "?") $theirs) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
