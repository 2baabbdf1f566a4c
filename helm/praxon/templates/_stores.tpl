{{/*
A bundled single-replica store (dev clusters): StatefulSet + Service.
praxon.store (dict "root" $ "store" "postgresql" "values" .Values.postgresql "port" 5432 "uid" 999
              "env" list "args" list "probe" map(liveness) "readiness" map "mounts" list(extra emptyDir paths) "dataPath" "/data")
*/}}
{{- define "praxon.store" -}}
{{- $root := .root -}}
{{- $name := include "praxon.componentName" (dict "root" $root "name" .store) -}}
{{- $v := .values -}}
apiVersion: v1
kind: Service
metadata:
  name: {{ $name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "praxon.componentLabels" (dict "root" $root "component" .store) | nindent 4 }}
  {{- with (include "praxon.annotations" $root) }}{{ . | nindent 2 }}{{ end }}
spec:
  type: ClusterIP
  selector:
    {{- include "praxon.componentSelectorLabels" (dict "root" $root "component" .store) | nindent 4 }}
  ports:
    - name: {{ .store }}
      port: {{ .port }}
      targetPort: {{ .store }}
      protocol: TCP
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: {{ $name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "praxon.componentLabels" (dict "root" $root "component" .store) | nindent 4 }}
  {{- with (include "praxon.annotations" $root) }}{{ . | nindent 2 }}{{ end }}
spec:
  replicas: 1
  serviceName: {{ $name }}
  selector:
    matchLabels:
      {{- include "praxon.componentSelectorLabels" (dict "root" $root "component" .store) | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "praxon.componentLabels" (dict "root" $root "component" .store) | nindent 8 }}
    spec:
      automountServiceAccountToken: false
      {{- with (include "praxon.imagePullSecrets" $root) }}{{ . | nindent 6 }}{{ end }}
      securityContext:
        runAsNonRoot: true
        runAsUser: {{ .uid }}
        runAsGroup: {{ .uid }}
        fsGroup: {{ .uid }}
        seccompProfile:
          type: RuntimeDefault
      containers:
        - name: {{ .store }}
          image: {{ include "praxon.storeImage" (dict "root" $root "image" $v.image) }}
          imagePullPolicy: IfNotPresent
          {{- with .args }}
          args:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          env:
            {{- toYaml .env | nindent 12 }}
          ports:
            - name: {{ .store }}
              containerPort: {{ .port }}
              protocol: TCP
          livenessProbe:
            {{- toYaml .liveness | nindent 12 }}
            periodSeconds: 10
            timeoutSeconds: 5
            failureThreshold: 6
          readinessProbe:
            {{- toYaml .readiness | nindent 12 }}
            periodSeconds: 5
            timeoutSeconds: 5
            failureThreshold: 3
          resources:
            {{- toYaml $v.resources | nindent 12 }}
          securityContext:
            runAsNonRoot: true
            runAsUser: {{ .uid }}
            runAsGroup: {{ .uid }}
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            privileged: false
            capabilities:
              drop: [ALL]
          volumeMounts:
            - name: data
              mountPath: {{ .dataPath }}
            {{- range $i, $path := .mounts }}
            - name: {{ printf "scratch-%d" $i }}
              mountPath: {{ $path }}
            {{- end }}
      volumes:
        {{- range $i, $path := .mounts }}
        - name: {{ printf "scratch-%d" $i }}
          emptyDir: {}
        {{- end }}
        {{- if not $v.persistence.enabled }}
        - name: data
          emptyDir: {}
        {{- end }}
  {{- if $v.persistence.enabled }}
  volumeClaimTemplates:
    - metadata:
        name: data
        labels:
          {{- include "praxon.componentSelectorLabels" (dict "root" $root "component" .store) | nindent 10 }}
      spec:
        accessModes: [ReadWriteOnce]
        {{- with $v.persistence.storageClass }}
        storageClassName: {{ . }}
        {{- end }}
        resources:
          requests:
            storage: {{ $v.persistence.size }}
  {{- end }}
{{- end -}}
