{{/* Names, labels and shared fragments. */}}

{{- define "vramgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "vramgate.fullname" -}}
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

{{- define "vramgate.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Standard labels; call with (dict "ctx" $ "component" "webhook"). */}}
{{- define "vramgate.labels" -}}
helm.sh/chart: {{ include "vramgate.chart" .ctx }}
{{ include "vramgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: vramgate
{{- with .ctx.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "vramgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "vramgate.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
{{- with .component }}
app.kubernetes.io/component: {{ . }}
{{- end }}
{{- end }}

{{- define "vramgate.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/* Object names. */}}
{{- define "vramgate.webhookName" -}}{{ include "vramgate.fullname" . }}-webhook{{- end }}
{{- define "vramgate.schedulerName" -}}{{ include "vramgate.fullname" . }}-scheduler{{- end }}
{{- define "vramgate.extenderName" -}}{{ include "vramgate.fullname" . }}-extender{{- end }}
{{- define "vramgate.controllerName" -}}{{ include "vramgate.fullname" . }}-controller{{- end }}
{{- define "vramgate.certsJobName" -}}{{ include "vramgate.fullname" . }}-certs{{- end }}
{{- define "vramgate.configMapName" -}}{{ include "vramgate.fullname" . }}-config{{- end }}
{{- define "vramgate.mutatingName" -}}{{ include "vramgate.fullname" . }}{{- end }}
{{- define "vramgate.validatingName" -}}{{ include "vramgate.fullname" . }}{{- end }}
{{- define "vramgate.leaseName" -}}
{{- $c := .Values.config.controller | default dict }}
{{- default (printf "%s-controller" (include "vramgate.fullname" .)) $c.lease_name }}
{{- end }}

{{/* The Secret every pod mounts (tls.crt, tls.key, ca.crt). */}}
{{- define "vramgate.tlsSecretName" -}}
{{- if eq .Values.certs.mode "provided" }}
{{- required "certs.secretName is required in certs.mode=provided (an existing kubernetes.io/tls Secret)" .Values.certs.secretName }}
{{- else }}
{{- default (printf "%s-tls" (include "vramgate.fullname" .)) .Values.certs.secretName }}
{{- end }}
{{- end }}

{{/* The DNS name the serving cert is issued for and clients verify. */}}
{{- define "vramgate.serviceHost" -}}
{{- printf "%s.%s.svc" (include "vramgate.webhookName" .) .Release.Namespace }}
{{- end }}

{{/* Namespaces the webhooks never see: kube-system, the release namespace, webhook.excludedNamespaces. */}}
{{- define "vramgate.excludedNamespaces" -}}
{{- $ns := list "kube-system" .Release.Namespace }}
{{- range .Values.webhook.excludedNamespaces }}{{- $ns = append $ns . }}{{- end }}
{{- toJson ($ns | uniq) }}
{{- end }}

{{/*
The caBundle to render into the webhook configurations, or "" when something else owns it: url and
provided modes take certs.caBundle; in selfSigned mode the certs hook Jobs patch it in, and in
certManager mode cainjector does. Helm never renders it then, so upgrades never overwrite it.
*/}}
{{- define "vramgate.caBundle" -}}
{{- if or (eq .Values.webhook.clientConfig "url") (eq .Values.certs.mode "provided") }}
{{- .Values.certs.caBundle }}
{{- end }}
{{- end }}

{{/*
A webhook's failure policy. In selfSigned+service mode before the first install's post-install hook
has run (no TLS Secret yet, or `helm template`) it is Ignore, so that nothing is blocked by a
webhook whose CA kube-apiserver does not know yet; the post-install hook patches in the caBundle
and the configured policy together. Upgrades find the Secret and render the configured policy.
*/}}
{{- define "vramgate.failurePolicy" -}}
{{- $ctx := .ctx }}
{{- if and (eq $ctx.Values.certs.mode "selfSigned") (eq $ctx.Values.webhook.clientConfig "service") (not (lookup "v1" "Secret" $ctx.Release.Namespace (include "vramgate.tlsSecretName" $ctx))) }}
{{- "Ignore" }}
{{- else }}
{{- .policy }}
{{- end }}
{{- end }}

{{- define "vramgate.clientConfig" -}}
{{- $ctx := .ctx }}
{{- if eq $ctx.Values.webhook.clientConfig "url" -}}
url: {{ printf "%s%s" (required "webhook.url is required when webhook.clientConfig=url" $ctx.Values.webhook.url | trimSuffix "/") .path | quote }}
{{- else -}}
service:
  name: {{ include "vramgate.webhookName" $ctx }}
  namespace: {{ $ctx.Release.Namespace }}
  path: {{ .path }}
  port: 443
{{- end }}
{{- with include "vramgate.caBundle" $ctx }}
caBundle: {{ . }}
{{- end }}
{{- end }}

{{- define "vramgate.webhookSelectors" -}}
namespaceSelector:
  matchExpressions:
    - key: kubernetes.io/metadata.name
      operator: NotIn
      values: {{ include "vramgate.excludedNamespaces" . }}
    - key: vramgate.io/enforcement
      operator: NotIn
      values: ["off"]
objectSelector:
  matchExpressions:
    - key: vramgate.io/skip
      operator: NotIn
      values: ["true"]
{{- end }}

{{/*
The resources a GPU pod asks: the config's (labels.gpu_resource, NVIDIA's by default) and the other vendors' of
webhook/data/accelerators.yaml (webhook.acceleratorResources: amd.com/gpu), as a JSON list.
*/}}
{{/* Prefixes of per-profile slice resources (MIG mixed, AMD partitions), config's MIG prefix first. */}}
{{- define "vramgate.gpuResourcePrefixes" -}}
{{- $m := dig "labels" "mig_resource_prefix" "nvidia.com/mig-" (.Values.config | default dict) }}
{{- prepend (.Values.webhook.acceleratorResourcePrefixes | default list) $m | uniq | toJson }}
{{- end }}

{{- define "vramgate.gpuResources" -}}
{{- $r := dig "labels" "gpu_resource" "nvidia.com/gpu" (.Values.config | default dict) }}
{{- prepend (.Values.webhook.acceleratorResources | default list) $r | uniq | toJson }}
{{- end }}

{{/*
CEL: does the PodSpec at .path ask for a GPU (any of .resources, a name starting with one of .prefixes, a share
annotation of .annotations on the pod metadata at .meta: KAI's gpu-fraction), or tolerate a GPU taint (the
non-GPU-pod rule's case)? Everything else is none of vramgate's business, and kube-apiserver need not call it for it.
*/}}
{{- define "vramgate.celWantsGPU" -}}
{{- $p := .path -}}
{{- $lim := list -}}{{- $req := list -}}{{- $key := list -}}
{{- range .resources -}}
{{- $lim = append $lim (printf "'%s' in c.resources.limits" .) -}}
{{- $req = append $req (printf "'%s' in c.resources.requests" .) -}}
{{- $key = append $key (printf "t.key == '%s'" .) -}}
{{- end -}}
{{- $pre := list -}}
{{- range .prefixes -}}
{{- $pre = append $pre (printf "k.startsWith('%s')" .) -}}
{{- end -}}
{{- if $pre -}}
{{- $lim = append $lim (printf "c.resources.limits.exists(k, %s)" (join " || " $pre)) -}}
{{- $req = append $req (printf "c.resources.requests.exists(k, %s)" (join " || " $pre)) -}}
{{- end -}}
{{- $c := printf "has(c.resources) && ((has(c.resources.limits) && (%s)) || (has(c.resources.requests) && (%s)))" (join " || " $lim) (join " || " $req) -}}
{{- $ann := list -}}
{{- range .annotations -}}
{{- $ann = append $ann (printf "'%s' in %s.annotations" . $.meta) -}}
{{- end -}}
((has({{ $p }}.resourceClaims) && size({{ $p }}.resourceClaims) > 0) ||{{ if $ann }} (has({{ .meta }}) && has({{ .meta }}.annotations) && ({{ join " || " $ann }})) ||{{ end }} (has({{ $p }}.containers) && {{ $p }}.containers.exists(c, {{ $c }})) || (has({{ $p }}.initContainers) && {{ $p }}.initContainers.exists(c, {{ $c }})) || (has({{ $p }}.tolerations) && {{ $p }}.tolerations.exists(t, (has(t.key) && ({{ join " || " $key }})) || (!has(t.key) && has(t.operator) && t.operator == 'Exists'))))
{{- end }}

{{/* matchConditions limiting both webhooks to GPU workloads (webhook.gpuWorkloadsOnly). */}}
{{- define "vramgate.matchConditions" -}}
{{- if .Values.webhook.gpuWorkloadsOnly }}
{{- $r := include "vramgate.gpuResources" . | fromJsonArray }}
{{- $x := include "vramgate.gpuResourcePrefixes" . | fromJsonArray }}
{{- $a := .Values.webhook.shareAnnotations | default list }}
matchConditions:
  - name: gpu-workloads-only
    expression: >-
      request.kind.kind == 'Pod' ? {{ include "vramgate.celWantsGPU" (dict "path" "object.spec" "meta" "object.metadata" "annotations" $a "resources" $r "prefixes" $x) }}
      : request.kind.kind == 'CronJob' ? {{ include "vramgate.celWantsGPU" (dict "path" "object.spec.jobTemplate.spec.template.spec" "meta" "object.spec.jobTemplate.spec.template.metadata" "annotations" $a "resources" $r "prefixes" $x) }}
      : {{ include "vramgate.celWantsGPU" (dict "path" "object.spec.template.spec" "meta" "object.spec.template.metadata" "annotations" $a "resources" $r "prefixes" $x) }}
{{- end }}
{{- end }}

{{/* The config file: values.config plus the keys the chart owns. */}}
{{/* Where the webhook keeps the models config.hub resolved (it creates and updates it). */}}
{{- define "vramgate.hubConfigMapName" -}}
{{- printf "%s-hub-models" (include "vramgate.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "vramgate.config" -}}
{{- $cfg := deepCopy (.Values.config | default dict) }}
{{- if and (hasKey $cfg "namespace") (ne (toString $cfg.namespace) .Release.Namespace) }}
{{- fail (printf "config.namespace (%v) must be the release namespace (%s): the chart grants Lease access there" $cfg.namespace .Release.Namespace) }}
{{- end }}
{{- $_ := set $cfg "namespace" .Release.Namespace }}
{{- $adm := $cfg.admission | default dict }}
{{- if not (hasKey $adm "excluded_namespaces") }}
{{- $_ := set $adm "excluded_namespaces" (include "vramgate.excludedNamespaces" . | fromJsonArray) }}
{{- end }}
{{- if and (include "vramgate.extenderScheduler" $) (not (hasKey $adm "scheduler_name")) }}
{{- $_ := set $adm "scheduler_name" .Values.scheduler.name }}
{{- end }}
{{- $_ := set $cfg "admission" $adm }}
{{- $ctl := $cfg.controller | default dict }}
{{- $_ := set $ctl "lease_name" (include "vramgate.leaseName" .) }}
{{- $rem := $ctl.remediation | default dict }}
{{- if and (hasKey $rem "enabled") (ne $rem.enabled .Values.controller.remediation.enabled) }}
{{- fail "config.controller.remediation.enabled disagrees with controller.remediation.enabled: set only controller.remediation.enabled (it also grants pods/eviction)" }}
{{- end }}
{{- $_ := set $rem "enabled" .Values.controller.remediation.enabled }}
{{- $_ := set $ctl "remediation" $rem }}
{{- $_ := set $cfg "controller" $ctl }}
{{- $aud := $cfg.audit | default dict }}
{{- $auditOn := and .Values.controller.enabled .Values.controller.audit.enabled }}
{{- if and (hasKey $aud "enabled") (ne $aud.enabled $auditOn) }}
{{- fail "config.audit.enabled disagrees with controller.audit.enabled: set only controller.audit.enabled (it also grants the RBAC)" }}
{{- end }}
{{- if and (hasKey $aud "reports") (ne $aud.reports .Values.reports.kind) }}
{{- fail "config.audit.reports disagrees with reports.kind: set only reports.kind (it also grants the RBAC)" }}
{{- end }}
{{- $_ := set $aud "enabled" $auditOn }}
{{- $_ := set $aud "reports" .Values.reports.kind }}
{{- $_ := set $cfg "audit" $aud }}
{{- $srv := $cfg.server | default dict }}
{{- $mp := int .Values.metrics.port }}
{{- range $name, $port := dict "webhook.port" .Values.webhook.port "controller.port" .Values.controller.port "standaloneExtender.port" .Values.standaloneExtender.port "scheduler.extender.port" .Values.scheduler.extender.port }}
{{- if eq (int $port) $mp }}
{{- fail (printf "metrics.port (%d) must differ from %s: it is a second port in the same pod" $mp $name) }}
{{- end }}
{{- end }}
{{- if and (hasKey $srv "metrics_port") (ne (toString $srv.metrics_port) (toString .Values.metrics.port)) }}
{{- fail "config.server.metrics_port disagrees with metrics.port: set only metrics.port (it also sets the pods' and Services' ports)" }}
{{- end }}
{{- if and (hasKey $srv "metrics_auth") (ne $srv.metrics_auth .Values.metrics.auth) }}
{{- fail "config.server.metrics_auth disagrees with metrics.auth: set only metrics.auth (it also grants the RBAC)" }}
{{- end }}
{{- $_ := set $srv "metrics_port" (int .Values.metrics.port) }}
{{- $_ := set $srv "metrics_auth" .Values.metrics.auth }}
{{- $_ := set $cfg "server" $srv }}
{{- if not (hasKey $cfg "models_file") }}
{{- $_ := set $cfg "models_file" "/etc/vramgate-models/models.yaml" }}
{{- end }}
{{- $hub := $cfg.hub | default dict }}
{{- if and $hub.enabled (not (hasKey $hub "configmap")) }}
{{- $_ := set $hub "configmap" (include "vramgate.hubConfigMapName" .) }}
{{- $_ := set $cfg "hub" $hub }}
{{- end }}
{{- if and $hub.enabled .Values.hubToken.secretName (not (hasKey $hub "token_file")) }}
{{- $_ := set $hub "token_file" "/etc/vramgate-hub/token" }}
{{- $_ := set $cfg "hub" $hub }}
{{- end }}
{{- $srv := $cfg.server | default dict }}
{{- if and .Values.clientAuth.caConfigMap (not (hasKey $srv "client_ca_file")) }}
{{- $_ := set $srv "client_ca_file" "/etc/vramgate-client-ca/ca.crt" }}
{{- if and .Values.clientAuth.names (not (hasKey $srv "client_names")) }}
{{- $_ := set $srv "client_names" .Values.clientAuth.names }}
{{- end }}
{{- $_ := set $cfg "server" $srv }}
{{- end }}
{{- toYaml $cfg }}
{{- end }}

{{/* Default spread for a component: one replica per node where possible, then per zone. */}}
{{- define "vramgate.spread" -}}
{{- $v := .values }}
{{- if $v.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml $v.topologySpreadConstraints | nindent 2 }}
{{- else }}
topologySpreadConstraints:
  - maxSkew: 1
    topologyKey: kubernetes.io/hostname
    whenUnsatisfiable: ScheduleAnyway
    nodeTaintsPolicy: Honor
    labelSelector:
      matchLabels:
        {{- include "vramgate.selectorLabels" (dict "ctx" .ctx "component" .component) | nindent 8 }}
  - maxSkew: 1
    topologyKey: topology.kubernetes.io/zone
    whenUnsatisfiable: ScheduleAnyway
    nodeTaintsPolicy: Honor
    labelSelector:
      matchLabels:
        {{- include "vramgate.selectorLabels" (dict "ctx" .ctx "component" .component) | nindent 8 }}
{{- end }}
affinity:
{{- if $v.affinity }}
  {{- toYaml $v.affinity | nindent 2 }}
{{- else }}
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels:
              {{- include "vramgate.selectorLabels" (dict "ctx" .ctx "component" .component) | nindent 14 }}
{{- end }}
{{- with $v.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{- define "vramgate.podSecurityContext" -}}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{- define "vramgate.containerSecurityContext" -}}
securityContext:
  {{- toYaml .Values.containerSecurityContext | nindent 2 }}
{{- end }}

{{/* Environment every vramgate container gets. */}}
{{- define "vramgate.env" -}}
env:
  - name: POD_NAME
    valueFrom:
      fieldRef:
        fieldPath: metadata.name
  - name: POD_NAMESPACE
    valueFrom:
      fieldRef:
        fieldPath: metadata.namespace
  # The extender sizes its body limit to this (webhook/serve/limits.py); the cgroup says the same where readable.
  - name: VRAMGATE_MEMORY_LIMIT_BYTES
    valueFrom:
      resourceFieldRef:
        resource: limits.memory
{{- end }}

{{/* HTTPS probes on a vramgate container's port. */}}
{{- define "vramgate.httpsProbes" -}}
livenessProbe:
  httpGet:
    path: /healthz
    port: {{ . }}
    scheme: HTTPS
  initialDelaySeconds: 5
  periodSeconds: 10
  timeoutSeconds: 3
  failureThreshold: 3
readinessProbe:
  httpGet:
    path: /readyz
    port: {{ . }}
    scheme: HTTPS
  periodSeconds: 5
  timeoutSeconds: 3
  failureThreshold: 2
{{- end }}

{{/* The metrics port of a Service (port "metrics"). */}}
{{- define "vramgate.metricsServicePort" -}}
- name: metrics
  port: {{ .Values.metrics.port }}
  targetPort: metrics
  protocol: TCP
{{- end }}

{{/* The metrics port of a container. */}}
{{- define "vramgate.metricsContainerPort" -}}
- name: metrics
  containerPort: {{ .Values.metrics.port }}
  protocol: TCP
{{- end }}

{{/* RBAC for the metrics port's guard (metrics.auth): ask kube-apiserver who a token is and what it may do. */}}
{{- define "vramgate.accessReviewRules" -}}
{{- if .Values.metrics.auth }}
- apiGroups: ["authentication.k8s.io"]
  resources: ["tokenreviews"]
  verbs: ["create"]
- apiGroups: ["authorization.k8s.io"]
  resources: ["subjectaccessreviews"]
  verbs: ["create"]
{{- end }}
{{- end }}

{{/* The args of `vramgate serve` for a role; call with (dict "ctx" $ "role" "webhook" "port" 8443 "host" "0.0.0.0"). */}}
{{- define "vramgate.serveArgs" -}}
command: ["vramgate"]
args:
  - serve
  - --role
  - {{ .role }}
  - --config
  - /etc/vramgate/config.yaml
  - --tls-cert
  - /certs/tls.crt
  - --tls-key
  - /certs/tls.key
  - --host
  - {{ .host | quote }}
  - --port
  - {{ .port | quote }}
{{- end }}

{{- define "vramgate.volumeMounts" -}}
volumeMounts:
  - name: config
    mountPath: /etc/vramgate
    readOnly: true
  - name: models
    mountPath: /etc/vramgate-models
    readOnly: true
  - name: certs
    mountPath: /certs
    readOnly: true
  - name: tmp
    mountPath: /tmp
{{- if .Values.hubToken.secretName }}
  - name: hub-token
    mountPath: /etc/vramgate-hub
    readOnly: true
{{- end }}
{{- if .Values.clientAuth.caConfigMap }}
  - name: client-ca
    mountPath: /etc/vramgate-client-ca
    readOnly: true
{{- end }}
{{- end }}

{{- define "vramgate.volumes" -}}
volumes:
  - name: config
    configMap:
      name: {{ include "vramgate.configMapName" . }}
  - name: models
    configMap:
      name: {{ include "vramgate.fullname" . }}-models
  - name: certs
    secret:
      secretName: {{ include "vramgate.tlsSecretName" . }}
  - name: tmp
    emptyDir:
      sizeLimit: 64Mi
{{- if .Values.hubToken.secretName }}
  - name: hub-token
    secret:
      secretName: {{ .Values.hubToken.secretName }}
      items:
        - key: {{ .Values.hubToken.key }}
          path: token
{{- end }}
{{- if .Values.clientAuth.caConfigMap }}
  - name: client-ca
    configMap:
      name: {{ .Values.clientAuth.caConfigMap }}
      items:
        - key: {{ .Values.clientAuth.key }}
          path: ca.crt
{{- end }}
{{- end }}

{{/* Pod annotations that roll pods when the config changes. */}}
{{- define "vramgate.podAnnotations" -}}
checksum/config: {{ include "vramgate.config" .ctx | sha256sum }}
{{- with .values.podAnnotations }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "vramgate.pdb" -}}
{{- if and .values.pdb.enabled (gt (int .values.replicas) 1) }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ .name }}
  namespace: {{ .ctx.Release.Namespace }}
  labels:
    {{- include "vramgate.labels" (dict "ctx" .ctx "component" .component) | nindent 4 }}
spec:
  minAvailable: {{ .values.pdb.minAvailable }}
  selector:
    matchLabels:
      {{- include "vramgate.selectorLabels" (dict "ctx" .ctx "component" .component) | nindent 6 }}
{{- end }}
{{- end }}

{{/* Admission rules for the kinds LLMs ship in (webhook.extraKinds), one per enabled API group; with
    onlyInstalledGroups, only the groups the cluster serves (.Capabilities.APIVersions). */}}
{{- define "vramgate.extraKindRules" -}}
{{- $k := .Values.webhook.extraKinds }}
{{- $groups := list
  (list "leaderWorkerSet" "leaderworkerset.x-k8s.io" (list "leaderworkersets") "Namespaced")
  (list "kserve" "serving.kserve.io" (list "inferenceservices" "llminferenceservices") "Namespaced")
  (list "ray" "ray.io" (list "rayclusters" "rayjobs" "rayservices") "Namespaced")
  (list "kubeflowTrainer" "trainer.kubeflow.org" (list "trainjobs" "trainingruntimes" "clustertrainingruntimes") "*")
  (list "pytorchJob" "kubeflow.org" (list "pytorchjobs") "Namespaced")
  (list "jobSet" "jobset.x-k8s.io" (list "jobsets") "Namespaced")
  (list "kubeai" "kubeai.org" (list "models") "Namespaced")
  (list "nimService" "apps.nvidia.com" (list "nimservices") "Namespaced")
  (list "volcano" "batch.volcano.sh" (list "jobs") "Namespaced")
  (list "dynamo" "nvidia.com" (list "dynamographdeployments" "dynamocomponentdeployments") "Namespaced")
  (list "roleBasedGroup" "workloads.x-k8s.io" (list "rolebasedgroups") "Namespaced")
  (list "argoWorkflows" "argoproj.io" (list "workflows" "cronworkflows") "Namespaced")
  (list "kaito" "kaito.sh" (list "workspaces" "inferencesets" "multiroleinferences") "Namespaced")
  (list "knative" "serving.knative.dev" (list "services" "configurations") "Namespaced")
  (list "ome" "ome.io" (list "inferenceservices") "Namespaced")
  (list "grove" "grove.io" (list "podcliquesets") "Namespaced")
  (list "llmaz" "inference.llmaz.io" (list "playgrounds") "Namespaced") }}
{{- $installed := dict }}
{{- range $v := .Capabilities.APIVersions }}
{{- $_ := set $installed (index (splitList "/" $v) 0) true }}
{{- end }}
{{- $out := list }}
{{- range $g := $groups }}
{{- if and (index $k (index $g 0)) (or (not $k.onlyInstalledGroups) (hasKey $installed (index $g 1))) }}
{{- $out = append $out (dict "apiGroups" (list (index $g 1)) "apiVersions" (list "*") "operations" (list "CREATE" "UPDATE") "resources" (index $g 2) "scope" (index $g 3)) }}
{{- end }}
{{- end }}
{{- toYaml $out }}
{{- end }}

{{/* DRA claim kinds: only those that declare a workload (a vramgate.io/* annotation, or on a template's claim metadata). */}}
{{- define "vramgate.claimWebhook" -}}
{{- $ctx := .ctx }}
- name: {{ .name }}
  admissionReviewVersions: ["v1"]
  sideEffects: None
  timeoutSeconds: {{ $ctx.Values.webhook.timeoutSeconds }}
  failurePolicy: {{ include "vramgate.failurePolicy" (dict "ctx" $ctx "policy" $ctx.Values.webhook.dra.failurePolicy) }}
  matchPolicy: Equivalent
  {{- if .reinvoke }}
  reinvocationPolicy: IfNeeded
  {{- end }}
  clientConfig:
    {{- include "vramgate.clientConfig" (dict "ctx" $ctx "path" .path) | nindent 4 }}
  rules:
    - apiGroups: ["resource.k8s.io"]
      apiVersions: ["*"]
      operations: ["CREATE"]
      resources: ["resourceclaimtemplates", "resourceclaims"]
      scope: Namespaced
  {{- include "vramgate.webhookSelectors" $ctx | nindent 2 }}
  matchConditions:
    - name: declares-a-workload
      expression: >-
        (has(object.metadata.annotations) && object.metadata.annotations.exists(k, k.startsWith('vramgate.io/')))
        || (request.kind.kind == 'ResourceClaimTemplate' && has(object.spec.metadata)
        && has(object.spec.metadata.annotations)
        && object.spec.metadata.annotations.exists(k, k.startsWith('vramgate.io/')))
{{- end }}

{{/*
"true" when the extender and its kube-scheduler run: extender.enabled, or the older scheduler.enabled.
Native placement (neither) is the default: the webhook's VRAM affinity and the health taints place pods.
*/}}
{{- define "vramgate.extenderScheduler" -}}
{{- if or (dig "enabled" false (.Values.extender | default dict)) (dig "enabled" false (.Values.scheduler | default dict)) -}}true{{- end -}}
{{- end }}
