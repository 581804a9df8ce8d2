{{/* The release's full name: the release name, prefixed to the chart's unless it holds it. */}}
{{- define "sluice.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "sluice.headless" -}}
{{- printf "%s-headless" (include "sluice.fullname" .) -}}
{{- end -}}

{{- define "sluice.secretName" -}}
{{- default (include "sluice.fullname" .) .Values.secret.name -}}
{{- end -}}

{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "sluice.labels" -}}
{{ include "sluice.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The pod template of both modes: .mode is "cluster" or "client". */}}
{{- define "sluice.podTemplate" -}}
{{- $full := include "sluice.fullname" . -}}
{{- $secret := include "sluice.secretName" . -}}
{{- $cluster := eq .Values.mode "cluster" -}}
metadata:
  labels:
    {{- include "sluice.labels" . | nindent 4 }}
  annotations:
    checksum/config: {{ .Values.config | sha256sum }}
    prometheus.io/scrape: "true"
    prometheus.io/port: "8080"
    prometheus.io/path: /metrics
    {{- with .Values.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  automountServiceAccountToken: false
  # The app stops within 10 s; a SIGKILL after 30.
  terminationGracePeriodSeconds: 30
  securityContext:
    runAsNonRoot: true
    runAsUser: 65532
    runAsGroup: 65532
    fsGroup: 65532
    seccompProfile: {type: RuntimeDefault}
  {{- if $cluster }}
  affinity:
    podAntiAffinity:
      {{- if eq .Values.antiAffinity "hard" }}
      requiredDuringSchedulingIgnoredDuringExecution:
        - topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels:
              {{- include "sluice.selectorLabels" . | nindent 14 }}
      {{- else }}
      preferredDuringSchedulingIgnoredDuringExecution:
        - weight: 100
          podAffinityTerm:
            topologyKey: kubernetes.io/hostname
            labelSelector:
              matchLabels:
                {{- include "sluice.selectorLabels" . | nindent 16 }}
      {{- end }}
  {{- end }}
  {{- with .Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  containers:
    - name: sluice
      image: "{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}"
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      args:
        - --config=/etc/sluice/config/sluice.yaml
        - --data-dir=/data
        - --http-addr=0.0.0.0:8080
        - --log-format=json
        {{- if $cluster }}
        - --nats-listen={{ .Values.natsListen }}
        - --nats-config=/etc/sluice/config/nats.conf
        - --cluster-listen=0.0.0.0:6222
        {{- $routes := list }}
        {{- range $i := until (int .Values.cluster.replicas) }}
        {{- $routes = append $routes (printf "nats-route://%s-%d.%s.%s.svc.%s:6222" $full $i (include "sluice.headless" $) $.Release.Namespace $.Values.cluster.clusterDomain) }}
        {{- end }}
        - --routes={{ join "," $routes }}
        - --replicas={{ .Values.cluster.streamReplicas }}
        {{- else }}
        - --nats-url={{ required "client.natsURL: the NATS deployment's URL" .Values.client.natsURL }}
        - --replicas={{ .Values.client.streamReplicas }}
        {{- if .Values.secret.natsContextKey }}
        - --nats-context=/etc/sluice/nats/context.json
        {{- end }}
        {{- end }}
        {{- if .Values.secret.secretsKeyFileKey }}
        - --secrets-key-file=/etc/sluice/keys/secrets.keys
        {{- end }}
        {{- range .Values.extraArgs }}
        - {{ . | quote }}
        {{- end }}
      env:
        {{- if .Values.secret.adminTokenKey }}
        - name: SLUICE_ADMIN_TOKEN
          valueFrom:
            secretKeyRef: {name: {{ $secret }}, key: {{ .Values.secret.adminTokenKey }}}
        {{- end }}
        {{- if $cluster }}
        - name: NATS_CLUSTER_TOKEN
          valueFrom:
            secretKeyRef: {name: {{ $secret }}, key: {{ required "secret.clusterTokenKey: mode cluster needs a cluster token" .Values.secret.clusterTokenKey }}}
        {{- end }}
        {{- range .Values.secretEnv }}
        - name: {{ .name }}
          valueFrom:
            secretKeyRef: {name: {{ $secret }}, key: {{ .key }}}
        {{- end }}
      ports:
        - {name: http, containerPort: 8080}
        {{- if $cluster }}
        - {name: cluster, containerPort: 6222}
        {{- if not (hasPrefix "127." .Values.natsListen) }}
        - {name: nats, containerPort: {{ splitList ":" .Values.natsListen | last | int }}}
        {{- end }}
        {{- end }}
      # /healthz: the process serves HTTP; /readyz: NATS connected and
      # serving, the embedded JetStream able to write (503 otherwise).
      startupProbe:
        httpGet: {path: /healthz, port: http}
        periodSeconds: 2
        failureThreshold: 60
      livenessProbe:
        httpGet: {path: /healthz, port: http}
        periodSeconds: 10
        failureThreshold: 6
      readinessProbe:
        httpGet: {path: /readyz, port: http}
        periodSeconds: 5
        failureThreshold: 2
      securityContext:
        allowPrivilegeEscalation: false
        readOnlyRootFilesystem: true
        capabilities: {drop: [ALL]}
      {{- with .Values.resources }}
      resources:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      volumeMounts:
        - {name: data, mountPath: /data}
        - {name: config, mountPath: /etc/sluice/config, readOnly: true}
        {{- if .Values.secret.secretsKeyFileKey }}
        - {name: keys, mountPath: /etc/sluice/keys, readOnly: true}
        {{- end }}
        {{- if and (not $cluster) .Values.secret.natsContextKey }}
        - {name: nats-context, mountPath: /etc/sluice/nats, readOnly: true}
        {{- end }}
  volumes:
    - name: config
      configMap: {name: {{ $full }}}
    {{- if .Values.secret.secretsKeyFileKey }}
    - name: keys
      secret:
        secretName: {{ $secret }}
        defaultMode: 0400
        items: [{key: {{ .Values.secret.secretsKeyFileKey }}, path: secrets.keys}]
    {{- end }}
    {{- if and (not $cluster) .Values.secret.natsContextKey }}
    # The nats CLI context (--nats-context) and the credentials file it may
    # name as /etc/sluice/nats/nats.creds.
    - name: nats-context
      secret:
        secretName: {{ $secret }}
        defaultMode: 0400
        items:
          - {key: {{ .Values.secret.natsContextKey }}, path: context.json}
          {{- with .Values.secret.natsCredsKey }}
          - {key: {{ . }}, path: nats.creds}
          {{- end }}
    {{- end }}
    {{- if not $cluster }}
    # Client mode keeps no state: the data dir holds only its lock file.
    - name: data
      emptyDir: {}
    {{- end }}
{{- end -}}
