{{/* The KubeSchedulerConfiguration of vramgate-scheduler. */}}
{{- define "vramgate.schedulerConfig" -}}
{{- $v := .Values.scheduler }}
{{- $ext := $v.extender -}}
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: {{ $v.leaderElection.enabled }}
  resourceLock: leases
  resourceName: {{ $v.leaderElection.resourceName }}
  resourceNamespace: {{ .Release.Namespace }}
  leaseDuration: {{ $v.leaderElection.leaseDuration }}
  renewDeadline: {{ $v.leaderElection.renewDeadline }}
  retryPeriod: {{ $v.leaderElection.retryPeriod }}
profiles:
  - schedulerName: {{ $v.name }}
extenders:
  - urlPrefix: {{ printf "https://127.0.0.1:%d/scheduler" (int $ext.port) }}
    filterVerb: filter
    {{- if $ext.prioritize }}
    prioritizeVerb: prioritize
    weight: {{ $ext.weight }}
    {{- end }}
    enableHTTPS: true
    tlsConfig:
      {{- if $ext.verifyTLS }}
      # The sidecar serves the webhook's certificate; verify it against the chart's CA by name.
      caFile: /certs/ca.crt
      serverName: {{ include "vramgate.serviceHost" . }}
      {{- else }}
      # kube-scheduler calls the sidecar in its own pod over loopback: TLS stays on, certificate
      # checks are off, so a CA rotation never needs a scheduler restart.
      # scheduler.extender.verifyTLS=true verifies against the chart's CA instead.
      insecure: true
      {{- end }}
    nodeCacheCapable: true
    managedResources:
      {{- range include "vramgate.gpuResources" . | fromJsonArray }}
      - name: {{ . }}
        ignoredByScheduler: false
      {{- end }}
    ignorable: {{ $ext.ignorable }}
    httpTimeout: {{ $ext.httpTimeout }}
{{- end }}
