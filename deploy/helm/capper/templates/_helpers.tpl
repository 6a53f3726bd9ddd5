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

{{/* The segment-builder CronJob is deployed ("true") when it is enabled
and has an input: the default values name none, so a release never runs a
nightly build of a placeholder. */}}
{{- define "capper.builderOn" -}}
{{- and .Values.segmentBuilder.enabled (gt (len .Values.segmentBuilder.inputs) 0) -}}
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

{{/* Values derived from the capper config -------------------------------- */}}

{{/* capper's defaults (internal/config Default) of the keys the chart reads
or checks across keys, for when .Values.config leaves them out. Only these;
TestChartConfigDefaults keeps each equal to Default(). */}}
{{- define "capper.cfg.defaults" -}}
kafka:
  brokers: ["localhost:9092"]
  group_id: capper
  start_offset: earliest
  topics:
    input: send-intents
    deliveries: deliveries
    suppressed: suppressed
    dead_letter: send-intents-dlq
  session_timeout: 8s
  heartbeat_interval: 1s
redis:
  mode: single
  addrs: ["localhost:6379"]
  master_name: ""
  db: 0
capping:
  channels: [email, push, sms, inapp]
  categories: [marketing, transactional]
  default_category: marketing
  exempt_categories: [transactional]
policy:
  poll_interval: 10s
segments:
  source: file:///var/lib/capper/segments
  required: true
  poll_interval: 30s
worker:
  retry_initial: 100ms
  retry_max: 5s
  shutdown_timeout: 25s
http:
  address: ":9090"
{{- end -}}

{{/* Merges .src into .dst in place the way capper reads its file over the
defaults: maps key by key, anything else (lists too) replaced. (Sprig's
mergeOverwrite would keep a default over an empty value: suppressed: "",
required: false.) */}}
{{- define "capper.cfg.merge" -}}
{{- $dst := .dst -}}
{{- range $k, $v := .src -}}
{{- $d := get $dst $k -}}
{{- if and (kindIs "map" $v) (kindIs "map" $d) -}}
{{- include "capper.cfg.merge" (dict "dst" $d "src" $v) -}}
{{- else -}}
{{- $_ := set $dst $k $v -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The config capper will run with, as JSON (fromJson it): .Values.config
over capper.cfg.defaults. Numbers come back as float64. */}}
{{- define "capper.cfg.effective" -}}
{{- $c := include "capper.cfg.defaults" . | fromYaml -}}
{{- include "capper.cfg.merge" (dict "dst" $c "src" (.Values.config | default dict)) -}}
{{- toJson $c -}}
{{- end -}}

{{- define "capper.cfg.shutdownTimeout" -}}
{{- (include "capper.cfg.effective" . | fromJson).worker.shutdown_timeout -}}
{{- end -}}

{{- define "capper.cfg.httpAddress" -}}
{{- (include "capper.cfg.effective" . | fromJson).http.address -}}
{{- end -}}

{{/* The HTTP port from http.address ("host:port" or ":port"; the port is
the container's, so a number, not a service name). */}}
{{- define "capper.httpPort" -}}
{{- $addr := include "capper.cfg.httpAddress" . -}}
{{- if not (regexMatch `^(\[[^\[\]]*\]|[^:\[\]]*):[0-9]+$` $addr) -}}
{{- fail (printf "config.http.address %q: write host:port or :port" $addr) -}}
{{- end -}}
{{- regexFind "[0-9]+$" $addr -}}
{{- end -}}

{{- define "capper.cfg.segmentsSource" -}}
{{- (include "capper.cfg.effective" . | fromJson).segments.source -}}
{{- end -}}

{{/* Milliseconds in a capper duration as model.ParseDuration reads it:
units y w d h m s ms, largest first, each at most once, or "0"; at most
time.Duration's range. Call with (list KEY VALUE); errors name config.KEY. */}}
{{- define "capper.durationMillis" -}}
{{- $key := index . 0 -}}
{{- $s := toString (index . 1) -}}
{{- if or (eq $s "") (not (regexMatch "^(0|([0-9]+y)?([0-9]+w)?([0-9]+d)?([0-9]+h)?([0-9]+m)?([0-9]+s)?([0-9]+ms)?)$" $s)) -}}
{{- fail (printf "config.%s: %q is not a duration (write e.g. 50ms, 30s, 24h, 7d)" $key $s) -}}
{{- end -}}
{{- $unit := dict "ms" 1 "s" 1000 "m" 60000 "h" 3600000 "d" 86400000 "w" 604800000 "y" 31536000000 -}}
{{- /* (2^63-1) ns in whole ms; also keeps the arithmetic below in int64. */ -}}
{{- $maxMs := 9223372036854 -}}
{{- $total := 0 -}}
{{- range regexFindAll "[0-9]+(ms|s|m|h|d|w|y)" $s -1 -}}
{{- $digits := regexReplaceAll "^0+" (regexFind "^[0-9]+" .) "" | default "0" -}}
{{- $u := get $unit (regexFind "[a-z]+$" .) -}}
{{- if or (gt (len $digits) 13) (gt (atoi $digits) (div $maxMs $u)) -}}
{{- fail (printf "config.%s: %q is out of range (at most about 292y)" $key $s) -}}
{{- end -}}
{{- $total = add $total (mul (atoi $digits) $u) -}}
{{- end -}}
{{- if gt $total $maxMs -}}
{{- fail (printf "config.%s: %q is out of range (at most about 292y)" $key $s) -}}
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
{{- include "capper.validateConfig" . -}}
{{- $shutdownMs := include "capper.durationMillis" (list "worker.shutdown_timeout" (include "capper.cfg.shutdownTimeout" .)) | atoi -}}
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
{{- end -}}

{{/* The capper config's rules that span keys or need values.schema.json
cannot express (durations are strings there): the same rules, with the same
keys, as internal/config Validate, on the effective config (the values over
capper's defaults), so a config that capper would refuse fails the render.
values.schema.json checks each key on its own. */}}
{{- define "capper.validateConfig" -}}
{{- $c := include "capper.cfg.effective" . | fromJson -}}
{{- $envNames := list -}}
{{- range .Values.extraEnv -}}
{{- $envNames = append $envNames .name -}}
{{- end -}}
{{- /* extraEnvFrom may set any CAPPER_* variable: the chart cannot see which. */ -}}
{{- $envFrom := not (empty .Values.extraEnvFrom) -}}

{{- /* Durations that must be above 0 (the others have their own bounds
below); durationMillis also refuses one out of time.Duration's range. */ -}}
{{- range $path := list "kafka.fetch_max_wait" "kafka.session_timeout" "kafka.rebalance_timeout" "kafka.heartbeat_interval" "kafka.write_timeout" "kafka.lag_interval" "redis.dial_timeout" "redis.read_timeout" "redis.write_timeout" "redis.wait_timeout" "capping.idempotency_window" "capping.clock_skew_warn" "worker.batch_wait" "worker.retry_initial" "worker.shutdown_timeout" -}}
{{- $k := splitList "." $path -}}
{{- $v := dig (index $k 0) (index $k 1) "" $c -}}
{{- if and $v (eq (include "capper.durationMillis" (list $path $v)) "0") -}}
{{- fail (printf "config.%s: must be above 0, got %s" $path $v) -}}
{{- end -}}
{{- end -}}

{{- /* kafka */ -}}
{{- $kafka := $c.kafka -}}
{{- $topics := $kafka.topics -}}
{{- $seen := dict -}}
{{- range $key := list "deliveries" "suppressed" "dead_letter" -}}
{{- $name := get $topics $key -}}
{{- if $name -}}
{{- if eq $name $topics.input -}}
{{- fail (printf "config.kafka.topics.%s: %q is also the input topic; capper would consume its own output" $key $name) -}}
{{- end -}}
{{- if hasKey $seen $name -}}
{{- fail (printf "config.kafka.topics.%s: %q is also %s; every outcome needs its own topic" $key $name (get $seen $name)) -}}
{{- end -}}
{{- $_ := set $seen $name (printf "kafka.topics.%s" $key) -}}
{{- end -}}
{{- end -}}
{{- include "capper.validateTLS" (dict "key" "kafka.tls" "tls" (dig "tls" dict $kafka)) -}}
{{- $mech := dig "sasl" "mechanism" "" $kafka -}}
{{- $saslSecret := dig "sasl" "existingSecret" dict (.Values.kafka | default dict) -}}
{{- $saslFile := dig "sasl" "password_file" "" $kafka -}}
{{- if has $mech (list "plain" "scram-sha-256" "scram-sha-512") -}}
{{- if not (or (dig "sasl" "username" "" $kafka) (and $saslSecret.name $saslSecret.usernameKey) (has "CAPPER_KAFKA_SASL_USERNAME" $envNames) $envFrom) -}}
{{- fail (printf "config.kafka.sasl.username: is required with mechanism %s (or set kafka.sasl.existingSecret.usernameKey)" $mech) -}}
{{- end -}}
{{- if not (or $saslSecret.name $saslFile (has "CAPPER_KAFKA_SASL_PASSWORD" $envNames) $envFrom) -}}
{{- fail (printf "config.kafka.sasl.password: is required with mechanism %s: name its Secret in kafka.sasl.existingSecret, or set config.kafka.sasl.password_file" $mech) -}}
{{- end -}}
{{- end -}}
{{- if and $saslFile (or $saslSecret.name (has "CAPPER_KAFKA_SASL_PASSWORD" $envNames)) -}}
{{- fail "config.kafka.sasl.password: set either kafka.sasl.existingSecret (CAPPER_KAFKA_SASL_PASSWORD) or config.kafka.sasl.password_file, not both" -}}
{{- end -}}
{{- $session := include "capper.durationMillis" (list "kafka.session_timeout" $kafka.session_timeout) | atoi -}}
{{- $heartbeat := include "capper.durationMillis" (list "kafka.heartbeat_interval" $kafka.heartbeat_interval) | atoi -}}
{{- if and (ge $heartbeat $session) (gt $session 0) -}}
{{- fail (printf "config.kafka.heartbeat_interval: %s must be below kafka.session_timeout (%s)" $kafka.heartbeat_interval $kafka.session_timeout) -}}
{{- end -}}

{{- /* redis: the deployment modes (capping.ClientOptions.Validate) */ -}}
{{- $redis := $c.redis -}}
{{- $addrs := $redis.addrs | default list -}}
{{- if not $addrs -}}
{{- fail "config.redis.addrs: at least one address is required" -}}
{{- end -}}
{{- if and (eq $redis.mode "single") (gt (len $addrs) 1) -}}
{{- fail (printf "config.redis.addrs: mode single takes one address, got %d (use mode cluster or sentinel)" (len $addrs)) -}}
{{- end -}}
{{- if and (eq $redis.mode "cluster") (ne (int $redis.db) 0) -}}
{{- fail "config.redis.db: Redis Cluster has only database 0" -}}
{{- end -}}
{{- if and (eq $redis.mode "sentinel") (not $redis.master_name) -}}
{{- fail "config.redis.master_name: is required with mode sentinel" -}}
{{- end -}}
{{- if and (ne $redis.mode "sentinel") $redis.master_name -}}
{{- fail "config.redis.master_name: is only used with mode sentinel" -}}
{{- end -}}
{{- if and (dig "password_file" "" $redis) (or (dig "existingSecret" "name" "" (.Values.redis | default dict)) (has "CAPPER_REDIS_PASSWORD" $envNames)) -}}
{{- fail "config.redis.password: set either redis.existingSecret (CAPPER_REDIS_PASSWORD) or config.redis.password_file, not both" -}}
{{- end -}}
{{- include "capper.validateTLS" (dict "key" "redis.tls" "tls" (dig "tls" dict $redis)) -}}

{{- /* capping: names are bytes in Redis keys (the schema counts characters);
the lists that must name channels or categories (package policy and
capping.Rules.Problems) */ -}}
{{- $capping := $c.capping -}}
{{- with $capping.refusal_cache -}}
{{- if .ttl -}}
{{- $ttl := include "capper.durationMillis" (list "capping.refusal_cache.ttl" .ttl) | atoi -}}
{{- if or (lt $ttl 1000) (gt $ttl 600000) -}}
{{- fail (printf "config.capping.refusal_cache.ttl: %s out of range [1s, 10m]" .ttl) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $channels := $capping.channels | default list -}}
{{- range $i, $ch := $channels -}}
{{- if gt (len $ch) 64 -}}
{{- fail (printf "config.capping.channels[%d]: %q must be non-empty, at most 64 bytes, without spaces, braces or colons" $i $ch) -}}
{{- end -}}
{{- end -}}
{{- $categories := $capping.categories | default list -}}
{{- range $i, $cat := $categories -}}
{{- if gt (len $cat) 64 -}}
{{- fail (printf "config.capping.categories[%d]: %q must be non-empty, at most 64 bytes, without spaces, braces or colons" $i $cat) -}}
{{- end -}}
{{- end -}}
{{- /* A policy under capping that defers needs delay tiers (capper's own check). */ -}}
{{- $policySource := "" -}}
{{- with $c.policy -}}{{- $policySource = .source | default "" -}}{{- end -}}
{{- $tiers := list -}}
{{- with $c.kafka -}}{{- $tiers = .delay_tiers | default list -}}{{- end -}}
{{- if and (not $policySource) (not $tiers) -}}
{{- $defers := false -}}
{{- $pols := list -}}
{{- with $capping.default_policy -}}{{- $pols = append $pols . -}}{{- end -}}
{{- range ($capping.segments | default list) -}}{{- $pols = append $pols . -}}{{- end -}}
{{- range $p := $pols -}}
{{- if $p.quiet_hours -}}{{- $defers = true -}}{{- end -}}
{{- range $l := ($p.limits | default list) -}}
{{- if eq ($l.on_cap | default $p.on_cap | default "suppress") "defer" -}}{{- $defers = true -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- if $defers -}}
{{- fail "config.kafka.delay_tiers: the policy under capping defers intents (on_cap: defer or quiet_hours), so at least one delay tier is required" -}}
{{- end -}}
{{- end -}}
{{- /* Campaign control: paused intents wait in the first delay tier. */ -}}
{{- with $c.kafka.topics.control -}}
{{- if not $tiers -}}
{{- fail "config.kafka.topics.control: needs kafka.delay_tiers: a paused campaign's intents wait in the first tier" -}}
{{- end -}}
{{- range $key := list "input" "deliveries" "suppressed" "dead_letter" "delivery_status" -}}
{{- if eq (get $c.kafka.topics $key) $c.kafka.topics.control -}}
{{- fail (printf "config.kafka.topics.control: %q is also kafka.topics.%s" $c.kafka.topics.control $key) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* Parking: needs campaign control, and a topic of its own. */ -}}
{{- with $c.kafka.topics.parked -}}
{{- if not $c.kafka.topics.control -}}
{{- fail "config.kafka.topics.parked: needs kafka.topics.control: a campaign is paused there" -}}
{{- end -}}
{{- range $key := list "input" "deliveries" "suppressed" "dead_letter" "delivery_status" "control" -}}
{{- if eq (get $c.kafka.topics $key) $c.kafka.topics.parked -}}
{{- fail (printf "config.kafka.topics.parked: %q is also kafka.topics.%s" $c.kafka.topics.parked $key) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* Users' own limits: a topic of its own. */ -}}
{{- with $c.kafka.topics.user_limits -}}
{{- range $key := list "input" "deliveries" "suppressed" "dead_letter" "delivery_status" "control" "parked" -}}
{{- if eq (get $c.kafka.topics $key) $c.kafka.topics.user_limits -}}
{{- fail (printf "config.kafka.topics.user_limits: %q is also kafka.topics.%s" $c.kafka.topics.user_limits $key) -}}
{{- end -}}
{{- end -}}
{{- range $i, $t := $tiers -}}
{{- if eq $t.topic $c.kafka.topics.user_limits -}}
{{- fail (printf "config.kafka.topics.user_limits: %q is also kafka.delay_tiers[%d].topic" $c.kafka.topics.user_limits $i) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* Send pacing: the lane topics' prefix takes no other topic; the
delay group is the tiers' and the lanes'. */ -}}
{{- with $c.kafka.topics.lanes -}}
{{- $lanes := . -}}
{{- $others := dict -}}
{{- range $key := list "input" "deliveries" "suppressed" "dead_letter" "delivery_status" "control" "parked" "user_limits" -}}
{{- with get $c.kafka.topics $key -}}{{- $_ := set $others . (printf "kafka.topics.%s" $key) -}}{{- end -}}
{{- end -}}
{{- range $i, $t := $tiers -}}
{{- with $t.topic -}}{{- $_ := set $others . (printf "kafka.delay_tiers[%d].topic" $i) -}}{{- end -}}
{{- end -}}
{{- range $name, $key := $others -}}
{{- if hasPrefix (printf "%s." $lanes) $name -}}
{{- fail (printf "config.kafka.topics.lanes: %q would take %s (%q) for a lane" $lanes $key $name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $delayGroup := dig "delay_group_id" "" $c.kafka -}}
{{- if and (or $tiers $c.kafka.topics.lanes $c.kafka.topics.parked) $delayGroup (eq $delayGroup $c.kafka.group_id) -}}
{{- fail (printf "config.kafka.delay_group_id: %q is also kafka.group_id: the delay tiers, lanes and parked topic need a group of their own" $delayGroup) -}}
{{- end -}}
{{- with $c.control -}}{{- with .max_pause -}}
{{- $ms := include "capper.durationMillis" (list "control.max_pause" .) | atoi -}}
{{- if or (lt $ms 60000) (gt $ms 604800000) -}}
{{- fail (printf "config.control.max_pause: %s out of range [1m, 168h0m0s]" .) -}}
{{- end -}}
{{- end -}}{{- end -}}
{{- if not (has $capping.default_category $categories) -}}
{{- fail (printf "config.capping.default_category: %q is not one of the categories (%s)" $capping.default_category (join ", " $categories)) -}}
{{- end -}}
{{- range $i, $cat := $capping.exempt_categories | default list -}}
{{- if not (has $cat $categories) -}}
{{- fail (printf "config.capping.exempt_categories[%d]: %q is not one of the categories (%s)" $i $cat (join ", " $categories)) -}}
{{- end -}}
{{- end -}}
{{- range $i, $cat := dig "overrides" "categories" list $capping -}}
{{- if not (has $cat $categories) -}}
{{- fail (printf "config.capping.overrides.categories[%d]: %q is not one of the categories (%s)" $i $cat (join ", " $categories)) -}}
{{- end -}}
{{- end -}}
{{- range $i, $camp := dig "overrides" "campaigns" list $capping -}}
{{- if gt (len $camp) 64 -}}
{{- fail (printf "config.capping.overrides.campaigns[%d]: %q must be non-empty, at most 64 bytes, without spaces, braces or colons" $i $camp) -}}
{{- end -}}
{{- end -}}
{{- $segments := dict -}}
{{- range $i, $s := $capping.segments | default list -}}
{{- $key := printf "capping.segments[%d]" $i -}}
{{- if eq $s.name "none" -}}
{{- fail (printf "config.%s.name: \"none\" is reserved for users in no segment (they get capping.default_policy)" $key) -}}
{{- end -}}
{{- if hasKey $segments $s.name -}}
{{- fail (printf "config.%s.name: segment %q is listed twice" $key $s.name) -}}
{{- end -}}
{{- $_ := set $segments $s.name true -}}
{{- include "capper.validateLimits" (dict "key" (printf "%s.limits" $key) "owner" (printf "segment %q" $s.name) "limits" $s.limits "channels" $channels "categories" $categories) -}}
{{- end -}}
{{- with $capping.default_policy -}}
{{- include "capper.validateLimits" (dict "key" "capping.default_policy.limits" "owner" "default policy" "limits" (.limits | default list) "channels" $channels "categories" $categories) -}}
{{- end -}}
{{- include "capper.validateBudgets" (dict "budgets" ($capping.budgets | default list) "channels" $channels) -}}

{{- /* segments */ -}}
{{- $seg := $c.segments -}}
{{- if and $seg.required (not $seg.source) -}}
{{- fail "config.segments.source: is required when segments.required is true" -}}
{{- end -}}
{{- if lt (include "capper.durationMillis" (list "segments.poll_interval" $seg.poll_interval) | atoi) 1000 -}}
{{- fail (printf "config.segments.poll_interval: must be at least 1s, got %s" $seg.poll_interval) -}}
{{- end -}}

{{- /* policy: where it comes from (its own value is checked by the schema
and, with the pods' mounts, by helm test's capper policy check). */ -}}
{{- $pol := .Values.config.policy | default dict -}}
{{- $src := $pol.source | default "" -}}
{{- with $pol.poll_interval -}}
{{- if le (include "capper.durationMillis" (list "policy.poll_interval" .) | atoi) 0 -}}
{{- fail (printf "config.policy.poll_interval: must be above 0, got %s" .) -}}
{{- end -}}
{{- end -}}
{{- if $src -}}
{{- if not (or (hasPrefix "s3://" $src) (hasPrefix "file://" $src) (not (contains "://" $src))) -}}
{{- fail (printf "config.policy.source: %q: want file:///path/policy.yaml, a directory or s3://bucket/prefix" $src) -}}
{{- end -}}
{{- if and (hasPrefix "s3://" $src) (or (hasSuffix ".yaml" $src) (hasSuffix ".yml" $src)) -}}
{{- fail (printf "config.policy.source: %q: an S3 source is a policy store (s3://bucket/prefix, see capper policy publish), not one file" $src) -}}
{{- end -}}
{{- range $k, $_ := omit (default dict .Values.config.capping) "key_prefix" "idempotency_window" "clock_skew_warn" "refusal_cache" "algorithm" "sub_intervals" -}}
{{- fail (printf "config.capping.%s: the policy comes from policy.source (%s); remove the policy from the worker config" $k $src) -}}
{{- end -}}
{{- end -}}

{{- /* worker */ -}}
{{- $w := $c.worker -}}
{{- if lt (include "capper.durationMillis" (list "worker.retry_max" $w.retry_max) | atoi) (include "capper.durationMillis" (list "worker.retry_initial" $w.retry_initial) | atoi) -}}
{{- fail (printf "config.worker.retry_max: %s must be at least worker.retry_initial (%s)" $w.retry_max $w.retry_initial) -}}
{{- end -}}
{{- end -}}

{{/* One client TLS section; call with (dict "key" "kafka.tls" "tls" MAP). */}}
{{- define "capper.validateTLS" -}}
{{- $t := .tls -}}
{{- if ne (empty (dig "cert_file" "" $t)) (empty (dig "key_file" "" $t)) -}}
{{- fail (printf "config.%s.cert_file: cert_file and key_file go together" .key) -}}
{{- end -}}
{{- if and (not (dig "enabled" false $t)) (or (dig "ca_file" "" $t) (dig "cert_file" "" $t) (dig "server_name" "" $t) (dig "insecure_skip_verify" false $t)) -}}
{{- fail (printf "config.%s.enabled: is false but other TLS keys are set; set enabled: true" .key) -}}
{{- end -}}
{{- end -}}

{{/* One list of limits (package policy's and capping.Rules.Problems' rules
beyond the schema); call with (dict "key" KEY "owner" WHAT "limits" LIST
"channels" LIST "categories" LIST). */}}
{{- define "capper.validateLimits" -}}
{{- $names := dict -}}
{{- range $i, $l := .limits -}}
{{- $key := printf "%s[%d]" $.key $i -}}
{{- $name := toString $l.name -}}
{{- $what := printf "(%s, limit %q)" $.owner $name -}}
{{- if gt (len $name) 64 -}}
{{- fail (printf "config.%s.name: %q must be non-empty, at most 64 bytes, without spaces, braces or colons" $key $name) -}}
{{- end -}}
{{- if hasKey $names $name -}}
{{- fail (printf "config.%s.name: duplicate limit name %s" $key $what) -}}
{{- end -}}
{{- $_ := set $names $name true -}}
{{- /* A rolling window or a calendar period, not both; a window of 0 is
none, as in capper. */ -}}
{{- $window := 0 -}}
{{- if hasKey $l "window" -}}
{{- $window = include "capper.durationMillis" (list (printf "%s.window" $key) $l.window) | atoi -}}
{{- end -}}
{{- $calendar := dig "calendar" "" $l -}}
{{- if and $calendar $window -}}
{{- fail (printf "config.%s: has both window and calendar: a limit is rolling or calendar, not both %s" $key $what) -}}
{{- else if not $calendar -}}
{{- if eq $window 0 -}}
{{- fail (printf "config.%s.window: is required: a limit counts in a rolling window (e.g. 24h) or per calendar period (calendar: day, week or month) %s" $key $what) -}}
{{- end -}}
{{- if or (lt $window 60000) (gt $window 2678400000) -}}
{{- fail (printf "config.%s.window: %s out of range [1m, 31d] %s" $key $l.window $what) -}}
{{- end -}}
{{- if ne (mod $window 1000) 0 -}}
{{- fail (printf "config.%s.window: %s is not a whole number of seconds %s" $key $l.window $what) -}}
{{- end -}}
{{- end -}}
{{- with $l.reserve -}}
{{- if and (hasKey . "slots") (ge (int .slots) (int $l.max)) -}}
{{- fail (printf "config.%s.reserve.slots: %d must be from 1 to max-1 (%d): reserved slots leave at least one for everyone %s" $key (int .slots) (sub (int $l.max) 1) $what) -}}
{{- end -}}
{{- end -}}
{{- $where := $l.where | default dict -}}
{{- if $l.channel -}}
{{- if $where.channels -}}
{{- fail (printf "config.%s.channel: and where.channels are the same filter: keep where.channels %s" $key $what) -}}
{{- end -}}
{{- if not (has $l.channel $.channels) -}}
{{- fail (printf "config.%s.channel: %q is not one of the channels (%s) %s" $key $l.channel (join ", " $.channels) $what) -}}
{{- end -}}
{{- end -}}
{{- range $j, $ch := $where.channels | default list -}}
{{- if not (has $ch $.channels) -}}
{{- fail (printf "config.%s.where.channels[%d]: %q is not one of the channels (%s) %s" $key $j $ch (join ", " $.channels) $what) -}}
{{- end -}}
{{- end -}}
{{- range $j, $cat := $where.categories | default list -}}
{{- if not (has $cat $.categories) -}}
{{- fail (printf "config.%s.where.categories[%d]: %q is not one of the categories (%s) %s" $key $j $cat (join ", " $.categories) $what) -}}
{{- end -}}
{{- end -}}
{{- range $j, $tag := $where.tags | default list -}}
{{- if gt (len $tag) 64 -}}
{{- fail (printf "config.%s.where.tags[%d]: %q must be 1 to 64 bytes of printable characters %s" $key $j $tag $what) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The budgets of a policy under capping (send pacing; package policy's
budgets.go), what the schema cannot see of each key alone: names listed
twice, channels of the policy, the lanes' min_priority, a budget after one
that covers every intent it covers. Call with (dict "budgets" LIST
"channels" LIST). */}}
{{- define "capper.validateBudgets" -}}
{{- $names := dict -}}
{{- $priorities := dict "low" 25 "normal" 50 "high" 75 -}}
{{- range $i, $b := .budgets -}}
{{- $key := printf "capping.budgets[%d]" $i -}}
{{- $name := toString $b.name -}}
{{- if hasKey $names $name -}}
{{- fail (printf "config.%s.name: budget %q is listed twice" $key $name) -}}
{{- end -}}
{{- $_ := set $names $name true -}}
{{- range $j, $ch := $b.channels | default list -}}
{{- if not (has $ch $.channels) -}}
{{- fail (printf "config.%s.channels[%d]: %q is not one of the channels (%s)" $key $j $ch (join ", " $.channels)) -}}
{{- end -}}
{{- end -}}
{{- $lanes := $b.lanes | default list -}}
{{- $laneNames := dict -}}
{{- $prev := 0 -}}
{{- range $j, $l := $lanes -}}
{{- $lane := printf "%s.lanes[%d]" $key $j -}}
{{- $laneName := toString $l.name -}}
{{- if hasKey $laneNames $laneName -}}
{{- fail (printf "config.%s.name: lane %q is listed twice" $lane $laneName) -}}
{{- end -}}
{{- $_ := set $laneNames $laneName true -}}
{{- $min := toString (dig "min_priority" "" $l) -}}
{{- if eq $j (sub (len $lanes) 1) -}}
{{- if $min -}}
{{- fail (printf "config.%s.min_priority: the last lane takes every priority the lanes before leave: leave min_priority out" $lane) -}}
{{- end -}}
{{- else if not $min -}}
{{- fail (printf "config.%s.min_priority: is required on every lane but the last: the lowest priority the lane takes (low, normal, high or 1-100)" $lane) -}}
{{- else -}}
{{- $p := get $priorities $min | default (atoi $min) | int -}}
{{- if and $prev (ge $p $prev) -}}
{{- fail (printf "config.%s.min_priority: %s must be below the lane before's: lanes go from the highest priority down" $lane $min) -}}
{{- end -}}
{{- $prev = $p -}}
{{- end -}}
{{- end -}}
{{- /* Shadowed: an earlier budget covers its channels (every channel of
the policy when it lists none) and its routes (any route when it lists
none). */ -}}
{{- $chans := $b.channels | default $.channels -}}
{{- $routes := $b.routes | default list -}}
{{- range $j, $e := slice $.budgets 0 $i -}}
{{- $covers := true -}}
{{- with $e.channels -}}
{{- range $ch := $chans -}}{{- if not (has $ch $e.channels) -}}{{- $covers = false -}}{{- end -}}{{- end -}}
{{- end -}}
{{- with $e.routes -}}
{{- if not $routes -}}{{- $covers = false -}}{{- end -}}
{{- range $r := $routes -}}{{- if not (has $r $e.routes) -}}{{- $covers = false -}}{{- end -}}{{- end -}}
{{- end -}}
{{- if $covers -}}
{{- fail (printf "config.%s: can never pace an intent: budget %q (budgets[%d]) comes first and covers every intent it covers" $key (toString $e.name) $j) -}}
{{- end -}}
{{- end -}}
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
{{- if .instance }}
# The pod's name: a static member of the consumer groups.
- name: CAPPER_KAFKA_GROUP_INSTANCE_ID
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
{{- end }}
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
{{- if eq (include "capper.policyMounted" .) "true" }}
# A directory, not a subPath: the kubelet updates it when the ConfigMap
# changes, and the worker follows without a restart.
- name: policy
  mountPath: /etc/capper-policy
  readOnly: true
{{- end }}
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
{{- if eq (include "capper.policyMounted" .) "true" }}
- name: policy
  configMap:
    name: {{ include "capper.fullname" . }}-policy
{{- end }}
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


{{/* The chart's policy value is mounted ("true") unless config.policy.source
names another source or config.capping holds the (deprecated) inline
policy. */}}
{{- define "capper.policyMounted" -}}
{{- $src := dig "policy" "source" "" .Values.config -}}
{{- $inline := omit (default dict .Values.config.capping) "key_prefix" "idempotency_window" "clock_skew_warn" "refusal_cache" "algorithm" "sub_intervals" -}}
{{- and .Values.policy (not $src) (not $inline) -}}
{{- end -}}

{{/* The worker's config: .Values.config, with policy.source pointing at the
mounted policy when there is one. */}}
{{- define "capper.config" -}}
{{- $cfg := deepCopy .Values.config -}}
{{- if eq (include "capper.policyMounted" .) "true" -}}
{{- $_ := set $cfg "policy" (merge (dict "source" "file:///etc/capper-policy/policy.yaml") (default dict $cfg.policy)) -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}
