{{/* Names ------------------------------------------------------------- */}}

{{- define "capper.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's full name; 52 characters at most, so that the CronJob's
names (which Kubernetes extends) stay within their limit. */}}
{{- define "capper.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 36 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 36 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 36 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "capper.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "capper.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "capper.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "capper.builderServiceAccountName" -}}
{{- $sa := .Values.segmentBuilder.serviceAccount -}}
{{- if $sa.create -}}
{{- default (printf "%s-segment-builder" (include "capper.fullname" .)) $sa.name -}}
{{- else if $sa.name -}}
{{- $sa.name -}}
{{- else -}}
{{- include "capper.serviceAccountName" . -}}
{{- end -}}
{{- end -}}

{{- define "capper.image" -}}
{{- $img := .Values.image -}}
{{- if $img.digest -}}
{{- printf "%s@%s" $img.repository $img.digest -}}
{{- else -}}
{{- printf "%s:%s" $img.repository (default .Chart.AppVersion $img.tag) -}}
{{- end -}}
{{- end -}}

{{/* Labels ------------------------------------------------------------ */}}

{{/* Common labels; call with (dict "ctx" $ "component" "worker"). */}}
{{- define "capper.labels" -}}
helm.sh/chart: {{ include "capper.chart" .ctx }}
{{ include "capper.selectorLabels" . }}
app.kubernetes.io/version: {{ default .ctx.Chart.AppVersion .ctx.Values.image.tag | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: capper
{{- end -}}

{{- define "capper.selectorLabels" -}}
app.kubernetes.io/name: {{ include "capper.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Values derived from the capper config -------------------------------
Each falls back to capper's own default (internal/config Default) when the
key is not in .Values.config. */}}

{{- define "capper.cfg.shutdownTimeout" -}}
{{- dig "worker" "shutdown_timeout" "25s" .Values.config -}}
{{- end -}}

{{- define "capper.cfg.httpAddress" -}}
{{- dig "http" "address" ":9090" .Values.config -}}
{{- end -}}

{{/* The HTTP port from http.address ("host:port" or ":port"). */}}
{{- define "capper.httpPort" -}}
{{- $addr := include "capper.cfg.httpAddress" . -}}
{{- $port := regexFind "[0-9]+$" $addr -}}
{{- if not (regexMatch ":[0-9]+$" $addr) -}}
{{- fail (printf "config.http.address %q: write host:port or :port" $addr) -}}
{{- end -}}
{{- $port -}}
{{- end -}}

{{- define "capper.cfg.segmentsSource" -}}
{{- dig "segments" "source" "file:///var/lib/capper/segments" .Values.config -}}
{{- end -}}

{{/* Milliseconds in a capper (Prometheus-style) duration: 25s, 1m30s, 500ms. */}}
{{- define "capper.durationMillis" -}}
{{- $s := toString . -}}
{{- if not (regexMatch "^([0-9]+(ms|s|m|h|d|w|y))+$" $s) -}}
{{- fail (printf "%q is not a duration (write e.g. 25s, 1m30s)" $s) -}}
{{- end -}}
{{- $unit := dict "ms" 1 "s" 1000 "m" 60000 "h" 3600000 "d" 86400000 "w" 604800000 "y" 31536000000 -}}
{{- $total := 0 -}}
{{- range regexFindAll "[0-9]+(ms|s|m|h|d|w|y)" $s -1 -}}
{{- $n := regexFind "^[0-9]+" . | atoi -}}
{{- $u := regexFind "[a-z]+$" . -}}
{{- $total = add $total (mul $n (get $unit $u)) -}}
{{- end -}}
{{- $total -}}
{{- end -}}

{{/* Render-time checks -------------------------------------------------- */}}

{{- define "capper.validate" -}}
{{- $cfg := .Values.config -}}
{{- range $path := list "redis.password" "redis.sentinel_password" "kafka.sasl.password" -}}
{{- $keys := splitList "." $path -}}
{{- $v := "" -}}
{{- if eq (len $keys) 2 -}}
{{- $v = dig (index $keys 0) (index $keys 1) "" $cfg -}}
{{- else -}}
{{- $v = dig (index $keys 0) (index $keys 1) (index $keys 2) "" $cfg -}}
{{- end -}}
{{- if $v -}}
{{- fail (printf "config.%s: secrets never go into the ConfigMap; put it in a Secret and name it in redis.existingSecret, redis.sentinelExistingSecret or kafka.sasl.existingSecret" $path) -}}
{{- end -}}
{{- end -}}
{{- $shutdownMs := include "capper.durationMillis" (include "capper.cfg.shutdownTimeout" .) | atoi -}}
{{- $graceMs := mul (int .Values.terminationGracePeriodSeconds) 1000 -}}
{{- if le $graceMs $shutdownMs -}}
{{- fail (printf "terminationGracePeriodSeconds (%ds) must be longer than config.worker.shutdown_timeout (%s): Kubernetes would kill the worker before it commits its last batch" (int .Values.terminationGracePeriodSeconds) (include "capper.cfg.shutdownTimeout" .)) -}}
{{- end -}}
{{- $addr := include "capper.cfg.httpAddress" . -}}
{{- $host := regexReplaceAll ":[0-9]+$" $addr "" | trimPrefix "[" | trimSuffix "]" -}}
{{- if has $host (list "127.0.0.1" "localhost" "::1") -}}
{{- fail (printf "config.http.address %q listens on loopback only; the kubelet probes and Prometheus scrape the pod IP (use \":%s\")" $addr (include "capper.httpPort" .)) -}}
{{- end -}}
{{- range concat .Values.extraEnv .Values.segmentBuilder.extraEnv -}}
{{- if has .name (list "CAPPER_WORKER_SHUTDOWN_TIMEOUT" "CAPPER_HTTP_ADDRESS") -}}
{{- fail (printf "extraEnv %s: set it in config instead; the chart derives the grace period, ports and probes from config" .name) -}}
{{- end -}}
{{- end -}}
{{- if and .Values.autoscaling.enabled .Values.keda.enabled -}}
{{- fail "autoscaling.enabled and keda.enabled are both true: choose one (KEDA creates its own HorizontalPodAutoscaler)" -}}
{{- end -}}
{{- if and .Values.autoscaling.enabled (not (dig "requests" "cpu" "" (.Values.resources | default dict))) -}}
{{- fail "autoscaling.enabled scales on CPU utilization, which needs resources.requests.cpu" -}}
{{- end -}}
{{- if and .Values.segmentBuilder.enabled (not .Values.segmentBuilder.inputs) -}}
{{- fail "segmentBuilder.inputs: at least one input is required (or set segmentBuilder.enabled: false)" -}}
{{- end -}}
{{- end -}}

{{/* Pod parts shared by the worker, the CronJob and the test hook --------- */}}

{{/* Secrets as CAPPER_* variables; call with (dict "ctx" $ "redis" BOOL):
segment-builder reads no Redis, but validating the config needs the Kafka
SASL password when a mechanism is set. */}}
{{- define "capper.secretEnv" -}}
{{- if .redis }}
{{- with .ctx.Values.redis.existingSecret }}{{ if .name }}
- name: CAPPER_REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .name | quote }}
      key: {{ .key | default "password" | quote }}
{{- end }}{{ end }}
{{- with .ctx.Values.redis.sentinelExistingSecret }}{{ if .name }}
- name: CAPPER_REDIS_SENTINEL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .name | quote }}
      key: {{ .key | default "password" | quote }}
{{- end }}{{ end }}
{{- end }}
{{- with .ctx.Values.kafka.sasl.existingSecret }}{{ if .name }}
- name: CAPPER_KAFKA_SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .name | quote }}
      key: {{ .key | default "password" | quote }}
{{- if .usernameKey }}
- name: CAPPER_KAFKA_SASL_USERNAME
  valueFrom:
    secretKeyRef:
      name: {{ .name | quote }}
      key: {{ .usernameKey | quote }}
{{- end }}
{{- end }}{{ end }}
{{- end -}}

{{/* A container's env list (without the env: key): the secrets, GOMEMLIMIT
for the worker, then the extra variables. Call with (dict "ctx" $ "extra"
LIST "container" NAME "memLimit" BOOL "redis" BOOL). */}}
{{- define "capper.containerEnv" -}}
{{- include "capper.secretEnv" (dict "ctx" .ctx "redis" .redis) | trim }}
{{- if and .memLimit .ctx.Values.goMemLimitFromResources (dig "limits" "memory" "" (.ctx.Values.resources | default dict)) }}
- name: GOMEMLIMIT
  valueFrom:
    resourceFieldRef:
      containerName: {{ .container }}
      resource: limits.memory
{{- end }}
{{- with .extra }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "capper.volumeMounts" -}}
- name: config
  mountPath: /etc/capper
  readOnly: true
{{- if .Values.kafka.tls.existingSecret }}
- name: kafka-tls
  mountPath: /var/run/secrets/capper/kafka-tls
  readOnly: true
{{- end }}
{{- if .Values.redis.tls.existingSecret }}
- name: redis-tls
  mountPath: /var/run/secrets/capper/redis-tls
  readOnly: true
{{- end }}
{{- end -}}

{{- define "capper.volumes" -}}
- name: config
  configMap:
    name: {{ include "capper.fullname" . }}
{{- with .Values.kafka.tls.existingSecret }}
- name: kafka-tls
  secret:
    secretName: {{ . | quote }}
{{- end }}
{{- with .Values.redis.tls.existingSecret }}
- name: redis-tls
  secret:
    secretName: {{ . | quote }}
{{- end }}
{{- end -}}

{{/* The ConfigMap's checksum: a config change rolls the pods. */}}
{{- define "capper.configChecksum" -}}
{{- include (print $.Template.BasePath "/configmap.yaml") . | sha256sum -}}
{{- end -}}
