{{/* S8.2 "NS rules": the ClusterRole's in cluster-wide mode, else one Role per watched namespace. */}}
{{- define "hikyo-operator.nsRules" -}}
- apiGroups: [hikyo.dev]
  resources: [hikyosecrets]
  verbs: [get, list, watch, patch]
- apiGroups: [hikyo.dev]
  resources: [hikyosecrets/status]
  verbs: [update, patch]
- apiGroups: [hikyo.dev]
  resources: [hikyosecrets/finalizers]
  verbs: [update]
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, create, update, patch]
{{- if .Values.operator.nativeSecretTypes }}
- apiGroups: [""]
  resources: [secrets]
  verbs: [delete]
{{- end }}
- apiGroups: [""]
  resources: [serviceaccounts]
  verbs: [get]
{{- if .Values.operator.triggerRollouts }}
- apiGroups: [apps]
  resources: [deployments, statefulsets, daemonsets]
  verbs: [get, list, watch, patch]
{{- end }}
{{- end -}}
