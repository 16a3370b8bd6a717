{{/* Names and labels, as `helm create` makes them. */}}
{{- define "token-resource.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "token-resource.fullname" -}}
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

{{- define "token-resource.selectorLabels" -}}
app.kubernetes.io/name: {{ include "token-resource.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "token-resource.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "token-resource.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The ServiceAccount's user name, as the admission policies match it. */}}
{{- define "token-resource.username" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ include "token-resource.fullname" . }}
{{- end }}

{{/* token-resource.toml: config.toml, else config.values as TOML, else the base's file. */}}
{{- define "token-resource.configText" -}}
{{- if and .Values.config.toml (not (empty .Values.config.values)) }}
{{- fail "config: set config.toml or config.values, not both" }}
{{- else if .Values.config.toml }}
{{- .Values.config.toml }}
{{- else if .Values.config.values }}
{{- $values := deepCopy .Values.config.values }}
{{- include "token-resource.wholeNumbers" $values }}
{{- toToml $values }}
{{- else }}
{{- .Files.Get "files/token-resource.toml" }}
{{- end }}
{{- end }}

{{/* Helm reads every number of the values as a float: whole ones become integers again, in
     place, or TOML would say "count = 2.0", which the agent refuses. */}}
{{- define "token-resource.wholeNumbers" -}}
{{- range $key, $value := . }}
{{- if kindIs "map" $value }}
{{- include "token-resource.wholeNumbers" $value }}
{{- else if and (kindIs "float64" $value) (eq $value (floor $value)) }}
{{- $_ := set $ $key (int64 $value) }}
{{- end }}
{{- end }}
{{- end }}

{{/* The configuration parsed, as JSON (templates return strings): what the chart derives
     the advertise modes, the DRA driver and the metrics port from. */}}
{{- define "token-resource.config" -}}
{{- $parsed := fromToml (include "token-resource.configText" .) }}
{{- if hasKey $parsed "Error" }}
{{- fail (printf "config: not valid TOML: %s" $parsed.Error) }}
{{- end }}
{{- toJson $parsed }}
{{- end }}

{{/* The names of the resources advertised one way (.mode: "dra", "node-status"), as a JSON
     list; called with (dict "root" $ "mode" ...). */}}
{{- define "token-resource.advertisedBy" -}}
{{- $config := fromJson (include "token-resource.config" .root) }}
{{- $names := list }}
{{- range $name, $spec := (get $config "resources" | default dict) }}
{{- if and (kindIs "map" $spec) (eq (get $spec "advertise" | toString) $.mode) }}
{{- $names = append $names $name }}
{{- end }}
{{- end }}
{{- toJson (sortAlpha $names) }}
{{- end }}

{{/* The names of the resources advertised through DRA, as a JSON list. */}}
{{- define "token-resource.draResources" -}}
{{- include "token-resource.advertisedBy" (dict "root" . "mode" "dra") }}
{{- end }}

{{/* Whether the agents may write their Nodes (node-status resources, or nodeStatus.enabled
     to keep the permission while the last of them leave): "true" or "". */}}
{{- define "token-resource.nodeStatus" -}}
{{- if or .Values.nodeStatus.enabled (fromJsonArray (include "token-resource.advertisedBy" (dict "root" . "mode" "node-status"))) }}true{{ end }}
{{- end }}

{{/* An overlay's RBAC and admission policies (.files: the chart's files/ that link to them),
     renamed for the release and holding its own ServiceAccounts: the overlays' names begin
     with token-resource (the agent's account, token-resource-publisher the publisher's), the
     release's with its fullname. Optional: .namespace, where the overlay's namespaced objects
     go (the release's namespace by default); .driver, the [dra] driver that replaces the
     overlays' tokens.example.com (in a policy's expressions, a Lease's name). Called with
     (dict "root" $ "files" (list ...)). */}}
{{- define "token-resource.overlayObjects" -}}
{{- $root := .root }}
{{- $fullname := include "token-resource.fullname" $root }}
{{- $namespace := .namespace | default $root.Release.Namespace }}
{{- $labels := fromYaml (include "token-resource.labels" $root) }}
{{- $texts := list }}
{{- range .files }}
{{- $texts = append $texts ($root.Files.Get .) }}
{{- end }}
{{- $text := join "\n---\n" $texts }}
{{- $text = regexReplaceAll "system:serviceaccount:token-resource:token-resource([-a-z0-9]*)" $text (printf "%s${1}" (include "token-resource.username" $root)) }}
{{- if .driver }}
{{- $text = replace "tokens.example.com" .driver $text }}
{{- end }}
{{- range $document := regexSplit "(?m)^---\\s*$" $text -1 }}
{{- $object := fromYaml $document }}
{{- if $object }}
{{- $_ := set $object.metadata "name" (regexReplaceAll "^token-resource" $object.metadata.name $fullname) }}
{{- $_ = set $object.metadata "labels" (merge (deepCopy $labels) (get $object.metadata "labels" | default dict)) }}
{{- if hasKey $object.metadata "namespace" }}
{{- $_ = set $object.metadata "namespace" $namespace }}
{{- end }}
{{- if hasKey $object "roleRef" }}
{{- $_ = set $object.roleRef "name" (regexReplaceAll "^token-resource" $object.roleRef.name $fullname) }}
{{- range $object.subjects }}
{{- $_ = set . "name" (regexReplaceAll "^token-resource" .name $fullname) }}
{{- $_ = set . "namespace" $root.Release.Namespace }}
{{- end }}
{{- end }}
{{- if eq $object.kind "ValidatingAdmissionPolicyBinding" }}
{{- $_ = set $object.spec "policyName" (regexReplaceAll "^token-resource" $object.spec.policyName $fullname) }}
{{- end }}
---
{{ toYaml $object }}
{{- end }}
{{- end }}
{{- end }}

{{/* A DeviceClass's name for a resource, as the agent's device_class_name
     (agent/token_resource/apiserver/slices.py): example.com/token -> token.example.com;
     a name that is no DNS label, lower-cased, gets a digest of the resource. */}}
{{- define "token-resource.deviceClassName" -}}
{{- $parts := splitn "/" 2 . }}
{{- $domain := $parts._0 }}
{{- $name := $parts._1 | default "" }}
{{- $readable := $name | lower | replace "_" "-" }}
{{- $valid := le (len $readable) 63 }}
{{- range splitList "." $readable }}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$" .) }}{{ $valid = false }}{{ end }}
{{- end }}
{{- if or (ne $readable $name) (not $valid) }}
{{- $trimmed := regexReplaceAll "[^a-z0-9-]" $readable "-" | trunc 50 | trimAll "-" }}
{{- $readable = regexReplaceAll "^[-.]+" (printf "%s-%s" $trimmed (sha256sum . | trunc 12)) "" }}
{{- end }}
{{- printf "%s.%s" $readable $domain | trunc 253 }}
{{- end }}

{{/* The metrics port, from [metrics] listen ("" without it). */}}
{{- define "token-resource.metricsPort" -}}
{{- $config := fromJson (include "token-resource.config" .) }}
{{- $listen := dig "metrics" "listen" "" $config }}
{{- if $listen }}{{ regexFind "[0-9]+$" $listen }}{{ end }}
{{- end }}

{{/* The DRA driver, [dra] driver (the agent's default: token-resource). */}}
{{- define "token-resource.driver" -}}
{{- dig "dra" "driver" "token-resource" (fromJson (include "token-resource.config" .)) }}
{{- end }}

{{/* The names of the resources with scope = "cluster" (cluster pools), as a JSON list. */}}
{{- define "token-resource.clusterResources" -}}
{{- $config := fromJson (include "token-resource.config" .) }}
{{- $names := list }}
{{- range $name, $spec := (get $config "resources" | default dict) }}
{{- if and (kindIs "map" $spec) (eq (get $spec "scope" | toString) "cluster") }}
{{- $names = append $names $name }}
{{- end }}
{{- end }}
{{- toJson (sortAlpha $names) }}
{{- end }}

{{/* Whether the cluster pools' publisher is installed: clusterPools.publisher.enabled, or,
     left null, whether a resource has scope = "cluster". "true" or "". */}}
{{- define "token-resource.publisher" -}}
{{- $enabled := .Values.clusterPools.publisher.enabled }}
{{- if kindIs "bool" $enabled }}{{ if $enabled }}true{{ end }}
{{- else if fromJsonArray (include "token-resource.clusterResources" .) }}true
{{- end }}
{{- end }}

{{/* The publisher's name: its Deployment, ServiceAccount and pods' instance label (its own, so
     that the DaemonSet's selector never takes its pods). */}}
{{- define "token-resource.publisherName" -}}
{{- printf "%s-publisher" (include "token-resource.fullname" .) }}
{{- end }}

{{- define "token-resource.publisherSelectorLabels" -}}
app.kubernetes.io/name: {{ include "token-resource.name" . }}
app.kubernetes.io/instance: {{ include "token-resource.publisherName" . }}
{{- end }}

{{- define "token-resource.publisherLabels" -}}
{{- $labels := fromYaml (include "token-resource.labels" .) }}
{{- $_ := set $labels "app.kubernetes.io/instance" (include "token-resource.publisherName" .) }}
{{- $_ = set $labels "app.kubernetes.io/component" "publisher" }}
{{- toYaml $labels }}
{{- end }}

{{/* Where the publishers' Lease is: [kubernetes] lease_namespace, else the pods' namespace. */}}
{{- define "token-resource.leaseNamespace" -}}
{{- dig "kubernetes" "lease_namespace" .Release.Namespace (fromJson (include "token-resource.config" .)) }}
{{- end }}

{{/* The settings the agent applies only when it starts (RESTART_ONLY in
     agent/token_resource/config/load.py; a reload that changes one is refused), as written in
     the configuration, as JSON. Their digest is the pods' checksum/restart-settings
     annotation: a `helm upgrade` that changes one rolls the pods, any other change reaches
     them live through the mounted ConfigMap. */}}
{{- define "token-resource.restartSettings" -}}
{{- $config := fromJson (include "token-resource.config" .) }}
{{- $settings := dict }}
{{- range $key := list "agent.device_plugin_dir" "metrics.textfile" "metrics.listen" "dra.driver" "dra.plugins_registry_dir" "dra.plugins_dir" "dra.cdi_dir" }}
{{- $table := get $config (splitList "." $key | first) }}
{{- $name := splitList "." $key | last }}
{{- if and (kindIs "map" $table) (hasKey $table $name) }}
{{- $_ := set $settings $key (get $table $name) }}
{{- end }}
{{- end }}
{{- toJson $settings }}
{{- end }}
