{{/* ------------------------------------------------------------------ names and labels */}}

{{- define "praxon.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "praxon.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A component's resource name: praxon.componentName (dict "root" $ "name" "worker-training") */}}
{{- define "praxon.componentName" -}}
{{- printf "%s-%s" (include "praxon.fullname" .root) .name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "praxon.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "praxon.selectorLabels" -}}
app.kubernetes.io/name: {{ include "praxon.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "praxon.labels" -}}
helm.sh/chart: {{ include "praxon.chart" . }}
{{ include "praxon.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: praxon
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Labels of one component: praxon.componentLabels (dict "root" $ "component" "worker" "extra" (dict ...)) */}}
{{- define "praxon.componentSelectorLabels" -}}
{{ include "praxon.selectorLabels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- range $k, $v := (.extra | default dict) }}
{{ $k }}: {{ $v | quote }}
{{- end }}
{{- end -}}

{{- define "praxon.componentLabels" -}}
{{ include "praxon.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- range $k, $v := (.extra | default dict) }}
{{ $k }}: {{ $v | quote }}
{{- end }}
{{- end -}}

{{- define "praxon.annotations" -}}
{{- with .Values.commonAnnotations -}}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end -}}
{{- end -}}

{{/* The label that lets a praxon pod through the bundled stores' NetworkPolicies */}}
{{- define "praxon.datastoreClientLabel" -}}
praxon.dev/datastore-client: "true"
{{- end -}}

{{/* ------------------------------------------------------------------ images */}}

{{/* praxon.image (dict "root" $ "gpu" true|false) */}}
{{- define "praxon.image" -}}
{{- $img := .root.Values.image -}}
{{- $registry := .root.Values.global.imageRegistry | default $img.registry -}}
{{- $repo := ternary (printf "%s/%s" $registry $img.repository) $img.repository (ne $registry "") -}}
{{- if $img.digest -}}
{{- printf "%s@%s" $repo $img.digest -}}
{{- else -}}
{{- $tag := $img.tag | default .root.Chart.AppVersion | toString -}}
{{- if eq $tag "latest" -}}
{{- fail "image.tag must not be \"latest\": pin a version (or set image.digest)" -}}
{{- end -}}
{{- if .gpu -}}{{- $tag = printf "%s%s" $tag $img.cudaTagSuffix -}}{{- end -}}
{{- printf "%s:%s" $repo $tag -}}
{{- end -}}
{{- end -}}

{{/* praxon.storeImage (dict "root" $ "image" .Values.postgresql.image) */}}
{{- define "praxon.storeImage" -}}
{{- $registry := .root.Values.global.imageRegistry | default .image.registry -}}
{{- if eq (toString .image.tag) "latest" -}}
{{- fail (printf "%s: the image tag must not be \"latest\"" .image.repository) -}}
{{- end -}}
{{- printf "%s/%s:%s" $registry .image.repository (toString .image.tag) -}}
{{- end -}}

{{- define "praxon.imagePullSecrets" -}}
{{- with .Values.global.imagePullSecrets -}}
imagePullSecrets:
{{- range . }}
  - name: {{ . }}
{{- end }}
{{- end -}}
{{- end -}}

{{- define "praxon.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "praxon.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* ------------------------------------------------------------------ connections */}}

{{- define "praxon.credentialsSecret" -}}
{{- printf "%s-credentials" (include "praxon.fullname" .) -}}
{{- end -}}

{{- define "praxon.configMapName" -}}
{{- printf "%s-config" (include "praxon.fullname" .) -}}
{{- end -}}

{{/* Fail early, with the value to set, when a connection is missing or given twice. */}}
{{- define "praxon.validateConnections" -}}
{{- $v := .Values -}}
{{- if and $v.postgresql.enabled (or $v.database.url $v.database.existingSecret) -}}
{{- fail "database: set either postgresql.enabled (bundled) or database.url/database.existingSecret (external), not both" -}}
{{- end -}}
{{- if not (or $v.postgresql.enabled $v.database.url $v.database.existingSecret) -}}
{{- fail "database: set database.url or database.existingSecret (external PostgreSQL), or postgresql.enabled=true (bundled, dev only)" -}}
{{- end -}}
{{- if and $v.redis.enabled (or $v.broker.url $v.broker.existingSecret) -}}
{{- fail "broker: set either redis.enabled (bundled) or broker.url/broker.existingSecret (external Redis or RabbitMQ), not both" -}}
{{- end -}}
{{- if not (or $v.redis.enabled $v.broker.url $v.broker.existingSecret) -}}
{{- fail "broker: set broker.url or broker.existingSecret (external Redis or RabbitMQ), or redis.enabled=true (bundled, dev only)" -}}
{{- end -}}
{{- if and $v.minio.enabled (or $v.objectStorage.endpoint $v.objectStorage.existingSecret $v.objectStorage.accessKey) -}}
{{- fail "objectStorage: set either minio.enabled (bundled) or objectStorage.endpoint with credentials (external), not both" -}}
{{- end -}}
{{- if not $v.minio.enabled -}}
{{- if not $v.objectStorage.endpoint -}}
{{- fail "objectStorage: set objectStorage.endpoint (host:port of the S3 server), or minio.enabled=true (bundled, dev only)" -}}
{{- end -}}
{{- if not (or $v.objectStorage.existingSecret (and $v.objectStorage.accessKey $v.objectStorage.secretKey)) -}}
{{- fail "objectStorage: set objectStorage.existingSecret, or both objectStorage.accessKey and objectStorage.secretKey" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* True ("true") when the chart itself renders the credentials Secret. */}}
{{- define "praxon.needsCredentialsSecret" -}}
{{- $v := .Values -}}
{{- if or (not $v.database.existingSecret) (not $v.broker.existingSecret) (not $v.objectStorage.existingSecret) -}}true{{- end -}}
{{- end -}}

{{- define "praxon.usesBundledStore" -}}
{{- if or .Values.postgresql.enabled .Values.redis.enabled .Values.minio.enabled -}}true{{- end -}}
{{- end -}}

{{- define "praxon.s3Endpoint" -}}
{{- if .Values.minio.enabled -}}
{{- printf "%s:9000" (include "praxon.componentName" (dict "root" . "name" "minio")) -}}
{{- else -}}
{{- .Values.objectStorage.endpoint -}}
{{- end -}}
{{- end -}}

{{/*
Non-secret settings as PRAXON_* name -> value (a YAML map). Names are Settings fields of
services/common/settings.py (prefix PRAXON_, nested with __); tests/deploy checks every name against the code.
*/}}
{{- define "praxon.configEnv" -}}
{{- $c := .Values.config -}}
{{- $s3 := .Values.objectStorage -}}
PRAXON_LOG_LEVEL: {{ $c.logLevel | quote }}
PRAXON_DATABASE_POOL_MAX: {{ $c.databasePoolMax | int64 | quote }}
PRAXON_METRICS_PORT: {{ $c.metricsPort | int64 | quote }}
PRAXON_GRPC__HOST: "0.0.0.0"
PRAXON_GRPC__PORT: {{ $c.grpc.port | int64 | quote }}
PRAXON_GRPC__MAX_MESSAGE_BYTES: {{ $c.grpc.maxMessageBytes | int64 | quote }}
PRAXON_GRPC__GRACE_SECONDS: {{ $c.grpc.graceSeconds | toString | quote }}
PRAXON_GRPC__DEFAULT_DEADLINE_SECONDS: {{ $c.grpc.defaultDeadlineSeconds | toString | quote }}
PRAXON_JOBS__LEASE_SECONDS: {{ $c.jobs.leaseSeconds | toString | quote }}
PRAXON_JOBS__HEARTBEAT_SECONDS: {{ $c.jobs.heartbeatSeconds | toString | quote }}
PRAXON_JOBS__REAPER_INTERVAL_SECONDS: {{ $c.jobs.reaperIntervalSeconds | toString | quote }}
PRAXON_GRPC__REQUESTS_PER_SECOND_PER_TOKEN: {{ $c.grpc.requestsPerSecondPerToken | toString | quote }}
PRAXON_GRPC__REQUEST_BURST_PER_TOKEN: {{ $c.grpc.requestBurstPerToken | int64 | quote }}
PRAXON_GRPC__AUTH_CACHE_SECONDS: {{ $c.grpc.authCacheSeconds | toString | quote }}
PRAXON_GRPC__AUTH_NEGATIVE_CACHE_SECONDS: {{ $c.grpc.authNegativeCacheSeconds | toString | quote }}
PRAXON_JOBS__MAX_ATTEMPTS: {{ $c.jobs.maxAttempts | int64 | quote }}
PRAXON_JOBS__MAX_ACTIVE_PER_TENANT: {{ $c.jobs.maxActivePerTenant | int64 | quote }}
PRAXON_JOBS__MAX_ACTIVE_PER_TENANT_KIND: {{ $c.jobs.maxActivePerTenantKind | int64 | quote }}
{{- range $name, $serving := $c.serving }}
PRAXON_{{ upper $name }}__MAX_QUEUED: {{ $serving.maxQueued | int64 | quote }}
{{- end }}
PRAXON_S3__ENDPOINT: {{ include "praxon.s3Endpoint" . | quote }}
PRAXON_S3__BUCKET: {{ $s3.bucket | quote }}
PRAXON_S3__SECURE: {{ ternary "true" "false" (and (not .Values.minio.enabled) $s3.secure) | quote }}
PRAXON_S3__REGION: {{ $s3.region | quote }}
PRAXON_S3__PRESIGN_SECONDS: {{ $s3.presignSeconds | int64 | quote }}
PRAXON_S3__MULTIPART_BYTES: {{ $s3.multipartBytes | int64 | quote }}
{{- end -}}

{{/* Secret settings as env entries with secretKeyRef (never plain values). */}}
{{- define "praxon.secretEnv" -}}
{{- $v := .Values -}}
{{- $chartSecret := include "praxon.credentialsSecret" . -}}
- name: PRAXON_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ $v.database.existingSecret | default $chartSecret }}
      key: {{ ternary $v.database.existingSecretKey "database-url" (ne $v.database.existingSecret "") }}
- name: PRAXON_BROKER_URL
  valueFrom:
    secretKeyRef:
      name: {{ $v.broker.existingSecret | default $chartSecret }}
      key: {{ ternary $v.broker.existingSecretKey "broker-url" (ne $v.broker.existingSecret "") }}
- name: PRAXON_S3__ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ $v.objectStorage.existingSecret | default $chartSecret }}
      key: {{ ternary $v.objectStorage.existingSecretAccessKeyKey "s3-access-key" (ne $v.objectStorage.existingSecret "") }}
- name: PRAXON_S3__SECRET_KEY
  valueFrom:
    secretKeyRef:
      name: {{ $v.objectStorage.existingSecret | default $chartSecret }}
      key: {{ ternary $v.objectStorage.existingSecretSecretKeyKey "s3-secret-key" (ne $v.objectStorage.existingSecret "") }}
{{- end -}}

{{/* The env and envFrom of a praxon container: praxon.containerEnv (dict "root" $ "extra" list "inline" bool
"grpcTls" bool: a gRPC server, which gets config.grpc.tls) */}}
{{- define "praxon.containerEnv" -}}
{{- $root := .root -}}
env:
{{- include "praxon.secretEnv" $root | nindent 2 }}
{{- if .grpcTls }}
{{- with (include "praxon.grpcTlsEnv" $root) }}{{ . | nindent 2 }}{{ end }}
{{- end }}
{{- if .inline }}
{{- range $k, $val := (include "praxon.configEnv" $root | fromYaml) }}
  - name: {{ $k }}
    value: {{ $val | quote }}
{{- end }}
{{- end }}
{{- with $root.Values.extraEnvVars }}
{{- toYaml . | nindent 2 }}
{{- end }}
{{- with .extra }}
{{- toYaml . | nindent 2 }}
{{- end }}
{{- if or (not .inline) $root.Values.extraEnvVarsCM $root.Values.extraEnvVarsSecret }}
envFrom:
{{- if not .inline }}
  - configMapRef:
      name: {{ include "praxon.configMapName" $root }}
{{- end }}
{{- with $root.Values.extraEnvVarsCM }}
  - configMapRef:
      name: {{ . }}
{{- end }}
{{- with $root.Values.extraEnvVarsSecret }}
  - secretRef:
      name: {{ . }}
{{- end }}
{{- end }}
{{- end -}}

{{/* ------------------------------------------------------------------ pod pieces */}}

{{/* Checksums that roll pods when the configuration or the chart's credentials change. */}}
{{- define "praxon.configChecksums" -}}
checksum/config: {{ include "praxon.configEnv" . | sha256sum }}
{{- end -}}

{{- define "praxon.podCommon" -}}
serviceAccountName: {{ include "praxon.serviceAccountName" . }}
automountServiceAccountToken: {{ .Values.serviceAccount.automountServiceAccountToken }}
{{- with (include "praxon.imagePullSecrets" .) }}{{ . | nindent 0 }}{{ end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- end -}}

{{- define "praxon.tmpVolume" -}}
- name: tmp
  emptyDir:
    sizeLimit: {{ .Values.tmpVolume.sizeLimit }}
{{- end -}}

{{- define "praxon.tmpVolumeMount" -}}
- name: tmp
  mountPath: /tmp
{{- end -}}

{{- define "praxon.grpcTlsDir" -}}/etc/praxon/grpc-tls{{- end -}}

{{/* gRPC TLS of a service container (config.grpc.tls): the Secret's files as PRAXON_GRPC__TLS_* env entries. */}}
{{- define "praxon.grpcTlsEnv" -}}
{{- $tls := .Values.config.grpc.tls -}}
{{- if $tls.enabled -}}
{{- $dir := include "praxon.grpcTlsDir" . -}}
- name: PRAXON_GRPC__TLS_CERT_FILE
  value: {{ printf "%s/tls.crt" $dir | quote }}
- name: PRAXON_GRPC__TLS_KEY_FILE
  value: {{ printf "%s/tls.key" $dir | quote }}
{{- if $tls.clientAuth }}
- name: PRAXON_GRPC__TLS_CLIENT_CA_FILE
  value: {{ printf "%s/ca.crt" $dir | quote }}
{{- end }}
{{- end -}}
{{- end -}}

{{- define "praxon.grpcTlsVolumeMount" -}}
{{- if .Values.config.grpc.tls.enabled -}}
- name: grpc-tls
  mountPath: {{ include "praxon.grpcTlsDir" . }}
  readOnly: true
{{- end -}}
{{- end -}}

{{- define "praxon.grpcTlsVolume" -}}
{{- $tls := .Values.config.grpc.tls -}}
{{- if $tls.enabled -}}
{{- if not $tls.existingSecret -}}
{{- fail "config.grpc.tls.enabled: set config.grpc.tls.existingSecret to a kubernetes.io/tls Secret (tls.crt, tls.key; ca.crt with clientAuth)" -}}
{{- end -}}
- name: grpc-tls
  secret:
    secretName: {{ $tls.existingSecret }}
    defaultMode: 0440
{{- end -}}
{{- end -}}

{{/* A service's probe target: native gRPC health, or the TCP port under TLS (kubelet gRPC probes are plaintext). */}}
{{- define "praxon.grpcProbeTarget" -}}
{{- if .Values.config.grpc.tls.enabled -}}
tcpSocket:
  port: grpc
{{- else -}}
grpc:
  port: {{ .Values.config.grpc.port }}
{{- end -}}
{{- end -}}

{{/* Resources with the GPU request added: praxon.resources (dict "resources" map "gpu" map) */}}
{{- define "praxon.resources" -}}
{{- $res := deepCopy (.resources | default dict) -}}
{{- if and .gpu .gpu.enabled -}}
{{- $limits := get $res "limits" | default dict -}}
{{- $_ := set $limits .gpu.resourceName (.gpu.count | int64) -}}
{{- $_ := set $res "limits" $limits -}}
{{- end -}}
{{- toYaml $res -}}
{{- end -}}

{{/* The migration hook's events: before install only when nothing it needs is created by the install. */}}
{{- define "praxon.migrationHookEvents" -}}
{{- if or (include "praxon.needsCredentialsSecret" .) (include "praxon.usesBundledStore" .) -}}
post-install,pre-upgrade
{{- else -}}
pre-install,pre-upgrade
{{- end -}}
{{- end -}}
