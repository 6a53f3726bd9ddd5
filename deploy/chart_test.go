package deploy

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/policy"
)

const configPath = "/etc/capper/capper.yaml"

func TestHelmLint(t *testing.T) {
	for _, files := range [][]string{nil, {allOnValues[0]}, {allOnValues[1]}} {
		args := []string{"lint", "--strict", chartDir}
		for _, f := range files {
			args = append(args, "-f", chartDir+"/"+f)
		}
		if out, err := runHelm(t, args...); err != nil {
			t.Errorf("%v\n%s", err, out)
		}
	}
}

// TestChartDefaults renders the default values: the worker StatefulSet, its
// ConfigMap and its policy's, metrics Service, ServiceAccount and
// PodDisruptionBudget, the test hook, the scale-in hook Job, and nothing
// optional: no segment-builder CronJob, since no
// input is set (a nightly build of a placeholder would fail, or publish
// what nobody meant). With an input, the CronJob.
func TestChartDefaults(t *testing.T) {
	m := mustRender(t, nil)
	want := map[string]int{"ConfigMap": 2, "StatefulSet": 1, "Service": 1, "ServiceAccount": 1,
		"PodDisruptionBudget": 1, "Pod": 1, "Job": 1}
	if got := m.kinds(); !reflect.DeepEqual(got, want) {
		t.Errorf("kinds = %v, want %v", got, want)
	}
	withInput := mustRender(t, nil, "segmentBuilder.inputs[0]=s3://capper-input/segments.csv.gz")
	want["CronJob"] = 1
	if got := withInput.kinds(); !reflect.DeepEqual(got, want) {
		t.Errorf("with an input: kinds = %v, want %v", got, want)
	}
	off := mustRender(t, nil, "segmentBuilder.inputs[0]=s3://capper-input/segments.csv.gz", "segmentBuilder.enabled=false")
	if n := off.kinds()["CronJob"]; n != 0 {
		t.Errorf("segmentBuilder.enabled=false: %d CronJobs", n)
	}
	checkRelease(t, m)
	d := one[appsv1.StatefulSet](t, m, "StatefulSet")
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 3 {
		t.Errorf("replicas = %v, want 3", d.Spec.Replicas)
	}
}

// TestChartLongNames: a long name is cut so that the CronJob's Jobs and
// Pods still get valid names.
func TestChartLongNames(t *testing.T) {
	m := mustRender(t, nil, "fullnameOverride="+strings.Repeat("capper-", 9), "segmentBuilder.inputs[0]=s3://capper-input/segments.csv.gz")
	checkRelease(t, m)
	for _, o := range m.all {
		if len(o.meta.Name) > 63 {
			t.Errorf("%s name %q is longer than 63", o.kind, o.meta.Name)
		}
	}
}

// TestChartAllOn renders each values file that turns every option on.
func TestChartAllOn(t *testing.T) {
	for _, f := range allOnValues {
		t.Run(f, func(t *testing.T) {
			m := mustRender(t, []string{f})
			checkRelease(t, m)
			k := m.kinds()
			for _, kind := range []string{"ConfigMap", "StatefulSet", "Service", "ServiceAccount", "PodDisruptionBudget",
				"CronJob", "Pod", "ServiceMonitor", "PrometheusRule"} {
				if k[kind] == 0 {
					t.Errorf("no %s rendered", kind)
				}
			}
			if k["HorizontalPodAutoscaler"]+k["ScaledObject"] != 1 {
				t.Errorf("want exactly one of HorizontalPodAutoscaler and ScaledObject, got %v", k)
			}
			d := one[appsv1.StatefulSet](t, m, "StatefulSet")
			pod := d.Spec.Template.Spec
			// Every secret reaches the pod from a Secret, never as a literal.
			var fromSecrets []string
			for _, e := range pod.Containers[0].Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					fromSecrets = append(fromSecrets, e.Name)
				}
			}
			if len(fromSecrets) < 2 {
				t.Errorf("env from Secrets = %v, want the Redis and Kafka SASL passwords", fromSecrets)
			}
			sas := m.ofKind("ServiceAccount")
			irsa := false
			for _, o := range sas {
				if strings.HasPrefix(o.meta.Annotations["eks.amazonaws.com/role-arn"], "arn:aws:iam::") {
					irsa = true
				}
			}
			if !irsa {
				t.Error("no ServiceAccount carries the IRSA annotation")
			}
			cfg := workerConfig(t, m)
			if !cfg.HTTP.Pprof {
				t.Error("http.pprof is off in the all-on values")
			}
		})
	}
}

// checkRelease checks what every rendering must satisfy, whatever the values.
func checkRelease(t *testing.T, m *manifests) {
	t.Helper()
	for _, o := range m.all {
		checkLabels(t, o)
	}
	cm := one[corev1.ConfigMap](t, m, "ConfigMap")
	d := one[appsv1.StatefulSet](t, m, "StatefulSet")
	svc := one[corev1.Service](t, m, "Service")
	cfg := workerConfig(t, m)
	podLabels := d.Spec.Template.Labels

	// StatefulSet.
	if d.Spec.Selector == nil || !selects(d.Spec.Selector.MatchLabels, podLabels) {
		t.Errorf("StatefulSet selector %v does not select its pods %v", d.Spec.Selector, podLabels)
	}
	if sum := d.Spec.Template.Annotations["checksum/config"]; !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(sum) {
		t.Errorf("checksum/config annotation = %q, want a sha256", sum)
	}
	pod := d.Spec.Template.Spec
	checkPod(t, "StatefulSet", pod, cm.Name)
	if len(pod.Containers) != 1 {
		t.Fatalf("worker pod has %d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	if want := []string{"run", "--config", configPath}; !slices.Equal(c.Args, want) {
		t.Errorf("worker args = %v, want %v", c.Args, want)
	}
	grace := time.Duration(derefInt64(pod.TerminationGracePeriodSeconds)) * time.Second
	if grace <= cfg.Worker.ShutdownTimeout.D() {
		t.Errorf("terminationGracePeriodSeconds %s is not above worker.shutdown_timeout %s", grace, cfg.Worker.ShutdownTimeout.D())
	}
	port := httpPort(t, cfg)
	var httpPortFound bool
	for _, p := range c.Ports {
		if p.Name == "http" && p.ContainerPort == port {
			httpPortFound = true
		}
	}
	if !httpPortFound {
		t.Errorf("worker ports %v have no http port %d (http.address %q)", c.Ports, port, cfg.HTTP.Address)
	}
	for name, probe := range map[string]struct {
		p    *corev1.Probe
		path string
	}{"startup": {c.StartupProbe, "/healthz"}, "liveness": {c.LivenessProbe, "/healthz"}, "readiness": {c.ReadinessProbe, "/readyz"}} {
		if probe.p == nil || probe.p.HTTPGet == nil {
			t.Errorf("%s probe missing or not HTTP", name)
			continue
		}
		if probe.p.HTTPGet.Path != probe.path || probe.p.HTTPGet.Port != intstr.FromString("http") {
			t.Errorf("%s probe = %s on %s, want %s on the http port", name, probe.p.HTTPGet.Path, probe.p.HTTPGet.Port.String(), probe.path)
		}
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Errorf("worker resources %v: want cpu and memory requests", c.Resources)
	}
	if len(pod.TopologySpreadConstraints) == 0 {
		t.Error("no topologySpreadConstraints")
	}
	for _, tsc := range pod.TopologySpreadConstraints {
		if tsc.LabelSelector == nil || !selects(tsc.LabelSelector.MatchLabels, podLabels) {
			t.Errorf("topology spread on %s does not select the worker pods", tsc.TopologyKey)
		}
	}
	if sa := pod.ServiceAccountName; sa == "" {
		t.Error("worker has no serviceAccountName")
	} else if len(m.ofKind("ServiceAccount")) > 0 && !hasObject(m, "ServiceAccount", sa) {
		t.Errorf("worker ServiceAccount %q is not rendered", sa)
	}
	autoscaled := len(m.ofKind("HorizontalPodAutoscaler"))+len(m.ofKind("ScaledObject")) > 0
	if autoscaled != (d.Spec.Replicas == nil) {
		t.Errorf("autoscaled=%v but StatefulSet replicas=%v: the autoscaler must own replicas alone", autoscaled, d.Spec.Replicas)
	}

	// The Service exposes the metrics port of the worker pods.
	if !selects(svc.Spec.Selector, podLabels) {
		t.Errorf("Service selector %v does not select the worker pods", svc.Spec.Selector)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != port || svc.Spec.Ports[0].TargetPort != intstr.FromString("http") {
		t.Errorf("Service ports = %+v, want %d -> http", svc.Spec.Ports, port)
	}

	for _, o := range m.ofKind("ServiceAccount") {
		sa := o.value.(*corev1.ServiceAccount)
		if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
			t.Errorf("ServiceAccount %s mounts its API token; capper never calls the Kubernetes API", sa.Name)
		}
	}
	for _, o := range m.ofKind("PodDisruptionBudget") {
		pdb := o.value.(*policyv1.PodDisruptionBudget)
		if pdb.Spec.Selector == nil || !selects(pdb.Spec.Selector.MatchLabels, podLabels) {
			t.Errorf("PodDisruptionBudget does not select the worker pods")
		}
		if (pdb.Spec.MinAvailable == nil) == (pdb.Spec.MaxUnavailable == nil) {
			t.Errorf("PodDisruptionBudget: want exactly one of minAvailable and maxUnavailable")
		}
	}
	for _, o := range m.ofKind("CronJob") {
		checkCronJob(t, m, o.value.(*batchv1.CronJob), cm.Name, cfg)
	}
	for _, o := range m.ofKind("Pod") {
		checkTestPod(t, o.value.(*corev1.Pod), cm, c)
	}
	for _, o := range m.ofKind("HorizontalPodAutoscaler") {
		h := o.value.(*autoscalingv2.HorizontalPodAutoscaler)
		ref := h.Spec.ScaleTargetRef
		if ref.APIVersion != "apps/v1" || ref.Kind != "StatefulSet" || ref.Name != d.Name {
			t.Errorf("HPA targets %+v, want StatefulSet %s", ref, d.Name)
		}
		if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas > h.Spec.MaxReplicas {
			t.Errorf("HPA replicas %v..%d", h.Spec.MinReplicas, h.Spec.MaxReplicas)
		}
	}
	for _, o := range m.ofKind("ScaledObject") {
		checkScaledObject(t, o.value.(*scaledObject), d.Name, cfg)
	}
	for _, o := range m.ofKind("ServiceMonitor") {
		sm := o.value.(*serviceMonitor)
		if !selects(sm.Spec.Selector.MatchLabels, svc.Labels) {
			t.Errorf("ServiceMonitor selector %v does not select Service %s", sm.Spec.Selector.MatchLabels, svc.Name)
		}
		for _, ep := range sm.Spec.Endpoints {
			if ep.Port != svc.Spec.Ports[0].Name || ep.Path != "/metrics" {
				t.Errorf("ServiceMonitor endpoint %s%s, want port %s /metrics", ep.Port, ep.Path, svc.Spec.Ports[0].Name)
			}
		}
	}
	for _, o := range m.ofKind("PrometheusRule") {
		checkRuleShape(t, o.value.(*prometheusRule))
	}
}

func checkLabels(t *testing.T, o object) {
	t.Helper()
	for _, k := range []string{"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version",
		"app.kubernetes.io/component", "app.kubernetes.io/managed-by", "app.kubernetes.io/part-of", "helm.sh/chart"} {
		if o.meta.Labels[k] == "" {
			t.Errorf("%s %s (%s): no label %s", o.kind, o.meta.Name, o.source, k)
		}
	}
	if o.meta.Labels["app.kubernetes.io/instance"] != testRelease || o.meta.Namespace != testNS {
		t.Errorf("%s %s: instance %q namespace %q, want %q %q", o.kind, o.meta.Name,
			o.meta.Labels["app.kubernetes.io/instance"], o.meta.Namespace, testRelease, testNS)
	}
}

// checkPod checks the pod-level settings every capper pod shares: non-root,
// read-only, no capabilities, RuntimeDefault seccomp, no service links, and
// the config mounted read-only from the release's ConfigMap.
func checkPod(t *testing.T, what string, pod corev1.PodSpec, configMap string) {
	t.Helper()
	psc := pod.SecurityContext
	if psc == nil || !derefBool(psc.RunAsNonRoot) || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: pod securityContext %+v, want runAsNonRoot and seccomp RuntimeDefault", what, psc)
	}
	if pod.EnableServiceLinks == nil || *pod.EnableServiceLinks {
		t.Errorf("%s: enableServiceLinks is not false (Kubernetes would inject CAPPER_SERVICE_* variables)", what)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Errorf("%s: the pod mounts a Kubernetes API token", what)
	}
	var cmVolume string
	for _, v := range pod.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == configMap {
			cmVolume = v.Name
		}
	}
	if cmVolume == "" {
		t.Errorf("%s: no volume from ConfigMap %s", what, configMap)
	}
	for _, c := range pod.Containers {
		sc := c.SecurityContext
		if sc == nil || !derefBool(sc.RunAsNonRoot) || !derefBool(sc.ReadOnlyRootFilesystem) ||
			sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") ||
			sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s container %s: securityContext %+v, want non-root, read-only root, no privilege escalation, all capabilities dropped, RuntimeDefault", what, c.Name, sc)
		}
		mounted := false
		for _, vm := range c.VolumeMounts {
			if vm.Name == cmVolume && vm.MountPath == "/etc/capper" && vm.ReadOnly {
				mounted = true
			}
		}
		if !mounted {
			t.Errorf("%s container %s: the config volume is not mounted read-only at /etc/capper", what, c.Name)
		}
		if c.Image == "" || (!strings.Contains(c.Image, ":") && !strings.Contains(c.Image, "@sha256:")) {
			t.Errorf("%s container %s: image %q has no tag or digest", what, c.Name, c.Image)
		}
	}
}

func checkCronJob(t *testing.T, m *manifests, cj *batchv1.CronJob, configMap string, cfg *config.Config) {
	t.Helper()
	if cj.Spec.ConcurrencyPolicy != batchv1.ForbidConcurrent {
		t.Errorf("CronJob concurrencyPolicy = %q, want Forbid", cj.Spec.ConcurrencyPolicy)
	}
	if cj.Spec.Schedule == "" || cj.Spec.JobTemplate.Spec.BackoffLimit == nil {
		t.Errorf("CronJob schedule %q backoffLimit %v", cj.Spec.Schedule, cj.Spec.JobTemplate.Spec.BackoffLimit)
	}
	if n := len(cj.Name) + 11; n > 63 {
		t.Errorf("CronJob name %q is too long for its Jobs' names", cj.Name)
	}
	pod := cj.Spec.JobTemplate.Spec.Template.Spec
	checkPod(t, "CronJob", pod, configMap)
	if pod.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("CronJob restartPolicy = %q, want Never (backoffLimit retries)", pod.RestartPolicy)
	}
	if len(m.ofKind("ServiceAccount")) > 0 && !hasObject(m, "ServiceAccount", pod.ServiceAccountName) {
		t.Errorf("CronJob ServiceAccount %q is not rendered", pod.ServiceAccountName)
	}
	c := pod.Containers[0]
	if !slices.Equal(c.Command, []string{"/segment-builder"}) {
		t.Errorf("CronJob command = %v, want /segment-builder", c.Command)
	}
	if c.Resources.Requests.Memory().IsZero() {
		t.Error("CronJob has no memory request")
	}
	flags := segmentBuilderFlags(t)
	args := map[string][]string{}
	for i := 0; i < len(c.Args); i++ {
		a := c.Args[i]
		name, value, inline := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !flags[name] {
			t.Errorf("CronJob arg %q is not a segment-builder flag (%v)", a, flags)
			continue
		}
		if !inline && i+1 < len(c.Args) && !strings.HasPrefix(c.Args[i+1], "--") {
			value = c.Args[i+1]
			i++
		}
		args[name] = append(args[name], value)
	}
	if len(args["input"]) == 0 || slices.Contains(args["input"], "") {
		t.Errorf("CronJob inputs = %q", args["input"])
	}
	if !slices.Equal(args["config"], []string{configPath}) {
		t.Errorf("CronJob --config = %q, want %s", args["config"], configPath)
	}
	if out := args["out"]; len(out) != 1 || (out[0] != cfg.Segments.Source && !sameDir(out[0], cfg.Segments.Source)) {
		t.Errorf("CronJob --out = %q, want segments.source %q (where the workers load from)", out, cfg.Segments.Source)
	}
	// segment-builder loads --config whole: it must validate in this pod.
	parseConfig(t, "CronJob", cm(t, m), c.Env)
}

// sameDir reports whether a plain path and a file:// URL name one directory.
func sameDir(a, b string) bool {
	return strings.TrimPrefix(a, "file://") == strings.TrimPrefix(b, "file://")
}

func checkTestPod(t *testing.T, p *corev1.Pod, cmap *corev1.ConfigMap, worker corev1.Container) {
	t.Helper()
	if p.Annotations["helm.sh/hook"] != "test" {
		t.Errorf("Pod %s is not a helm test hook", p.Name)
	}
	checkPod(t, "test hook", p.Spec, cmap.Name)
	if p.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("test hook restartPolicy = %q", p.Spec.RestartPolicy)
	}
	c := p.Spec.Containers[0]
	if want := []string{"check-config", "--config", configPath}; !slices.Equal(c.Args, want) {
		t.Errorf("test hook args = %v, want %v", c.Args, want)
	}
	// It checks what the worker sees: the same CAPPER_* variables.
	if got, want := capperEnvNames(c.Env), capperEnvNames(worker.Env); !slices.Equal(got, want) {
		t.Errorf("test hook CAPPER_* env %v, worker %v", got, want)
	}
}

func checkScaledObject(t *testing.T, so *scaledObject, deployment string, cfg *config.Config) {
	t.Helper()
	ref := so.Spec.ScaleTargetRef
	if ref.Name != deployment || ref.Kind != "StatefulSet" {
		t.Errorf("ScaledObject targets %+v, want StatefulSet %s", ref, deployment)
	}
	if len(so.Spec.Triggers) != 1 || so.Spec.Triggers[0].Type != "kafka" {
		t.Fatalf("ScaledObject triggers %+v, want one kafka trigger", so.Spec.Triggers)
	}
	md := so.Spec.Triggers[0].Metadata
	want := map[string]string{
		"bootstrapServers":  strings.Join(cfg.Kafka.Brokers, ","),
		"consumerGroup":     cfg.Kafka.GroupID,
		"topic":             cfg.Kafka.Topics.Input,
		"offsetResetPolicy": cfg.Kafka.StartOffset,
	}
	for k, v := range want {
		if md[k] != v {
			t.Errorf("ScaledObject %s = %q, want %q (from the capper config)", k, md[k], v)
		}
	}
	if n, err := strconv.Atoi(md["lagThreshold"]); err != nil || n < 1 {
		t.Errorf("ScaledObject lagThreshold = %q", md["lagThreshold"])
	}
	if so.Spec.MinReplicaCount == nil || so.Spec.MaxReplicaCount == nil || *so.Spec.MinReplicaCount > *so.Spec.MaxReplicaCount {
		t.Errorf("ScaledObject replicas %v..%v", so.Spec.MinReplicaCount, so.Spec.MaxReplicaCount)
	}
}

// checkRuleShape checks each alert's fields; its expressions are checked
// against the worker's metrics in TestExpressionsUseExportedMetrics.
func checkRuleShape(t *testing.T, pr *prometheusRule) {
	t.Helper()
	n := 0
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			n++
			if r.Alert == "" || strings.TrimSpace(r.Expr) == "" || r.Labels["severity"] == "" {
				t.Errorf("rule %+v: want alert, expr and a severity label", r)
			}
			if _, err := model.ParseDuration(r.For); err != nil {
				t.Errorf("alert %s: for %q: %v", r.Alert, r.For, err)
			}
			if err := balanced(r.Expr); err != nil {
				t.Errorf("alert %s: %v in %s", r.Alert, err, r.Expr)
			}
		}
	}
	if n == 0 {
		t.Error("PrometheusRule has no rules")
	}
}

// TestChartFailsOnBadValues: values that cannot work fail the render with a
// message that says why.
func TestChartFailsOnBadValues(t *testing.T) {
	for _, tc := range []struct {
		name string
		sets []string
		want string
	}{
		{"grace equal to shutdown", []string{"terminationGracePeriodSeconds=25"}, "must be longer than config.worker.shutdown_timeout"},
		{"shutdown above grace", []string{"config.worker.shutdown_timeout=1m"}, "must be longer than config.worker.shutdown_timeout (1m)"},
		{"bad duration", []string{"config.worker.shutdown_timeout=25 seconds"}, "at '/config/worker/shutdown_timeout': '25 seconds' does not match pattern"},
		{"batch size", []string{"config.worker.batch_size=0"}, "at '/config/worker/batch_size': minimum: got 0, want 1"},
		{"retry_max below retry_initial", []string{"config.worker.retry_initial=10s"}, "config.worker.retry_max: 5s must be at least worker.retry_initial (10s)"},
		{"hpa and keda", []string{"autoscaling.enabled=true", "keda.enabled=true"}, "choose one"},
		{"hpa without cpu request", []string{"autoscaling.enabled=true", "resources.requests=null"}, "needs resources.requests.cpu"},
		{"inline redis password", []string{"config.redis.password=hunter2"}, "config.redis.password: secrets never go into the ConfigMap"},
		{"inline sasl password", []string{"config.kafka.sasl.password=hunter2"}, "config.kafka.sasl.password: secrets never go into the ConfigMap"},
		{"loopback http", []string{"config.http.address=127.0.0.1:9090"}, "loopback"},
		{"no port", []string{"config.http.address=metrics"}, "write host:port"},
		{"env override of the grace period", []string{"extraEnv[0].name=CAPPER_WORKER_SHUTDOWN_TIMEOUT", "extraEnv[0].value=10m"}, "set it in config instead"},
		{"schema: builder inputs missing", []string{"segmentBuilder.inputs=null"}, "missing property 'inputs'"},
		{"schema: replicas type", []string{"replicas=many"}, "at '/replicas'"},
		{"schema: unknown value", []string{"replica=3"}, "additional properties 'replica' not allowed"},
		{"schema: unknown config section", []string{"config.kafak.brokers={a:9092}"}, "additional properties 'kafak' not allowed"},
		{"schema: conflict policy", []string{"segmentBuilder.onConflict=newest"}, "at '/segmentBuilder/onConflict'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := render(t, nil, tc.sets...)
			var he *helmError
			if !errors.As(err, &he) {
				t.Fatalf("render with %v: error %v, want helm to fail saying %q\n%s", tc.sets, err, tc.want, out)
			}
			if !strings.Contains(he.stderr, tc.want) {
				t.Errorf("helm's error does not mention %q:\n%s", tc.want, he.stderr)
			}
		})
	}
}

// TestChartGracePeriodFollowsDurations: the chart's own duration parsing
// (for the grace period check) agrees with capper's, on either side of the
// boundary.
func TestChartGracePeriodFollowsDurations(t *testing.T) {
	for _, d := range []string{"1500ms", "25s", "1m30s", "2m", "1h1s"} {
		cfg, err := config.Parse([]byte("worker: {shutdown_timeout: "+d+"}\n"), nil)
		if err != nil {
			t.Fatal(err)
		}
		// The longest whole-second grace period that is not above it.
		secs := int(cfg.Worker.ShutdownTimeout.D() / time.Second)
		_, err = render(t, nil, "config.worker.shutdown_timeout="+d, fmt.Sprintf("terminationGracePeriodSeconds=%d", secs))
		var he *helmError
		if !errors.As(err, &he) || !strings.Contains(he.stderr, "must be longer than config.worker.shutdown_timeout") {
			t.Errorf("shutdown_timeout %s with a %ds grace period: %v, want the render to fail", d, secs, err)
		}
		m := mustRender(t, nil, "config.worker.shutdown_timeout="+d, fmt.Sprintf("terminationGracePeriodSeconds=%d", secs+1))
		if got := workerConfig(t, m).Worker.ShutdownTimeout; got != cfg.Worker.ShutdownTimeout {
			t.Errorf("rendered shutdown_timeout %s, want %s", got, cfg.Worker.ShutdownTimeout)
		}
	}
}

// TestChartConfigChecksum: a config change changes the pods' checksum (so
// they roll); another value does not.
func TestChartConfigChecksum(t *testing.T) {
	sum := func(sets ...string) (worker, builder string) {
		m := mustRender(t, nil, append(sets, "segmentBuilder.inputs[0]=s3://capper-input/segments.csv.gz")...)
		d := one[appsv1.StatefulSet](t, m, "StatefulSet")
		cj := one[batchv1.CronJob](t, m, "CronJob")
		return d.Spec.Template.Annotations["checksum/config"], cj.Spec.JobTemplate.Spec.Template.Annotations["checksum/config"]
	}
	base, baseB := sum()
	if base == "" || base != baseB {
		t.Fatalf("checksums worker %q builder %q", base, baseB)
	}
	if changed, _ := sum("config.log.level=debug"); changed == base {
		t.Error("changing config.log.level left checksum/config unchanged")
	}
	if same, _ := sum("replicas=5"); same != base {
		t.Error("changing replicas changed checksum/config")
	}
}

// TestChartValuesUseConfigKeys: the chart's config values are capper config
// keys (the schema refuses any other, as capper's strict parse would), and
// the ConfigMap carries them unchanged.
func TestChartValuesUseConfigKeys(t *testing.T) {
	m := mustRender(t, nil, "config.kafka.max_intent_bytes=1048576", "config.capping.channels={email,push,sms}",
		"config.worker.enforce=false", "config.segments.poll_interval=45s")
	cfg := workerConfig(t, m)
	if cfg.Kafka.MaxIntentBytes != 1048576 || !slices.Equal(cfg.Capping.Channels, []string{"email", "push", "sms"}) ||
		cfg.Worker.Enforce || cfg.Segments.PollInterval.D() != 45*time.Second {
		t.Errorf("rendered config lost values: max_intent_bytes %d channels %v enforce %v poll %s",
			cfg.Kafka.MaxIntentBytes, cfg.Capping.Channels, cfg.Worker.Enforce, cfg.Segments.PollInterval)
	}
	_, err := render(t, nil, "config.kafka.max_intent_byte=10")
	var he *helmError
	if !errors.As(err, &he) || !strings.Contains(he.stderr, "at '/config/kafka': additional properties 'max_intent_byte' not allowed") {
		t.Errorf("a misspelt config key: %v, want the render to refuse it", err)
	}
}

// TestChartNotes renders NOTES.txt (helm template leaves it out of its
// output) through a copy of the chart that wraps it in a ConfigMap.
func TestChartNotes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "capper")
	if err := os.CopyFS(dir, os.DirFS(chartDir)); err != nil {
		t.Fatal(err)
	}
	notes, err := os.ReadFile(filepath.Join(chartDir, "templates", "NOTES.txt"))
	if err != nil {
		t.Fatal(err)
	}
	wrap := map[string]string{
		"_notes_test.tpl": `{{- define "notes.test" -}}` + string(notes) + `{{- end -}}`,
		"notes-test.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\n  labels: {{ include \"capper.labels\" (dict \"ctx\" . \"component\" \"test\") | fromYaml | toJson }}\n" +
			"  namespace: {{ .Release.Namespace }}\ndata:\n  notes: {{ include \"notes.test\" . | toJson }}\n",
	}
	for name, text := range wrap {
		if err := os.WriteFile(filepath.Join(dir, "templates", name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	notesFor := func(sets ...string) string {
		t.Helper()
		args := []string{"template", testRelease, dir, "--namespace", testNS, "--show-only", "templates/notes-test.yaml"}
		for _, s := range sets {
			args = append(args, "--set", s)
		}
		out, err := runHelm(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		m, err := decodeManifests(out)
		if err != nil {
			t.Fatal(err)
		}
		return one[corev1.ConfigMap](t, m, "ConfigMap").Data["notes"]
	}
	if n := notesFor("inputPartitions=2"); !strings.Contains(n, "1 replica(s) would be idle") || !strings.Contains(n, "helm test capper") {
		t.Errorf("NOTES with 3 replicas on 2 partitions:\n%s", n)
	}
	if n := notesFor("inputPartitions=12"); strings.Contains(n, "idle.") && strings.Contains(n, "WARNING") {
		t.Errorf("NOTES warns with enough partitions:\n%s", n)
	}
	if n := notesFor("keda.enabled=true", "keda.maxReplicaCount=8", "inputPartitions=6", "config.segments.source=/data"); !strings.Contains(n, "2 replica(s) would be idle") ||
		!strings.Contains(n, "segments.source is not s3://") {
		t.Errorf("NOTES with KEDA up to 8 on 6 partitions and a directory source:\n%s", n)
	}
}

// workerConfig parses the rendered ConfigMap with the worker container's
// environment, as capper run would in the pod.
func workerConfig(t *testing.T, m *manifests) *config.Config {
	t.Helper()
	d := one[appsv1.StatefulSet](t, m, "StatefulSet")
	return parseConfig(t, "StatefulSet", cm(t, m), d.Spec.Template.Spec.Containers[0].Env)
}

func cm(t *testing.T, m *manifests) *corev1.ConfigMap {
	t.Helper()
	c := one[corev1.ConfigMap](t, m, "ConfigMap")
	if _, ok := c.Data["capper.yaml"]; !ok || len(c.Data) != 1 {
		t.Fatalf("ConfigMap data keys %v, want capper.yaml", reflect.ValueOf(c.Data).MapKeys())
	}
	return c
}

// parseConfig runs capper's own loader (config.Parse: strict keys, env
// overrides, Validate) on the rendered file, with the container's CAPPER_*
// variables; a variable from a Secret gets a stand-in value.
func parseConfig(t *testing.T, what string, c *corev1.ConfigMap, env []corev1.EnvVar) *config.Config {
	t.Helper()
	var environ []string
	for _, e := range env {
		if !strings.HasPrefix(e.Name, config.EnvPrefix) {
			continue
		}
		v := e.Value
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			v = "capper-0" // the pod's name: its instance id
		case e.ValueFrom != nil:
			if e.ValueFrom.SecretKeyRef == nil {
				t.Errorf("%s: %s comes from %+v, want a secretKeyRef", what, e.Name, e.ValueFrom)
				continue
			}
			v = "secret-from-" + e.ValueFrom.SecretKeyRef.Name
		case strings.HasSuffix(e.Name, "PASSWORD"):
			t.Errorf("%s: %s is a literal value, want a secretKeyRef", what, e.Name)
		}
		environ = append(environ, e.Name+"="+v)
	}
	cfg, err := config.Parse([]byte(c.Data["capper.yaml"]), environ)
	if err != nil {
		t.Fatalf("%s: the rendered capper.yaml fails capper's validation: %v\n%s", what, err, c.Data["capper.yaml"])
	}
	if len(cfg.IgnoredEnv) > 0 {
		t.Errorf("%s: CAPPER_* variables that match no config key: %v", what, cfg.IgnoredEnv)
	}
	return cfg
}

func httpPort(t *testing.T, cfg *config.Config) int32 {
	t.Helper()
	_, p, err := net.SplitHostPort(cfg.HTTP.Address)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(p, 10, 32)
	if err != nil {
		t.Fatal(err)
	}
	return int32(n)
}

// segmentBuilderFlags reads the flag names of segment-builder's command line
// from its source, so that the CronJob cannot drift from the binary.
func segmentBuilderFlags(t *testing.T) map[string]bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "../cmd/segment-builder/main.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	flags := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok || ts.Name.Name != "flags" {
			return true
		}
		for _, field := range ts.Type.(*ast.StructType).Fields.List {
			if field.Tag == nil {
				continue
			}
			tag, _ := strconv.Unquote(field.Tag.Value)
			if name := reflect.StructTag(tag).Get("name"); name != "" {
				flags[name] = true
			}
		}
		return false
	})
	if !flags["input"] || !flags["out"] || !flags["config"] {
		t.Fatalf("could not read segment-builder's flags from its source: %v", flags)
	}
	return flags
}

func capperEnvNames(env []corev1.EnvVar) []string {
	var names []string
	for _, e := range env {
		if strings.HasPrefix(e.Name, config.EnvPrefix) {
			names = append(names, e.Name)
		}
	}
	slices.Sort(names)
	return names
}

func hasObject(m *manifests, kind, name string) bool {
	for _, o := range m.ofKind(kind) {
		if o.meta.Name == name {
			return true
		}
	}
	return false
}

// selects reports whether a non-empty selector matches labels.
func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func derefBool(b *bool) bool { return b != nil && *b }

func derefInt64(i *int64) int64 {
	if i == nil {
		return 30 // Kubernetes' default
	}
	return *i
}

// TestChartPolicyConfigMap: the policy value is its own ConfigMap, mounted
// as a directory (so the kubelet updates it) where config.policy.source
// points; a policy change leaves the config's checksum, so no pod restarts;
// helm test checks it with capper policy check. With a store as the source,
// neither the ConfigMap nor the mount nor the check exist.
func TestChartPolicyConfigMap(t *testing.T) {
	m := mustRender(t, nil)
	var pcm *corev1.ConfigMap
	for _, o := range m.ofKind("ConfigMap") {
		if strings.HasSuffix(o.meta.Name, "-policy") {
			pcm = o.value.(*corev1.ConfigMap)
		}
	}
	if pcm == nil {
		t.Fatal("no policy ConfigMap")
	}
	d, err := policy.Parse([]byte(pcm.Data["policy.yaml"]))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Problems().Err(); err != nil || !reflect.DeepEqual(d.SegmentNames(), []string{"new", "active", "dormant"}) {
		t.Fatalf("policy.yaml: %v, segments %v", err, d.SegmentNames())
	}
	if cfg := workerConfig(t, m); cfg.Policy.Source != "file:///etc/capper-policy/policy.yaml" || len(cfg.Capping.InlinePolicy) > 0 {
		t.Fatalf("policy.source %q, inline %v", cfg.Policy.Source, cfg.Capping.InlinePolicy)
	}
	dep := one[appsv1.StatefulSet](t, m, "StatefulSet")
	mounted := false
	for _, v := range dep.Spec.Template.Spec.Containers[0].VolumeMounts {
		mounted = mounted || v.MountPath == "/etc/capper-policy" && v.SubPath == ""
	}
	if !mounted {
		t.Fatalf("the worker does not mount the policy directory: %v", dep.Spec.Template.Spec.Containers[0].VolumeMounts)
	}
	pod := one[corev1.Pod](t, m, "Pod")
	var checks []string
	for _, c := range pod.Spec.Containers {
		checks = append(checks, strings.Join(c.Args, " "))
	}
	if !slices.Contains(checks, "policy check /etc/capper/capper.yaml") {
		t.Fatalf("helm test does not check the policy: %v", checks)
	}

	// A policy change only: same config checksum, so the pods stay.
	stricter := mustRender(t, nil, "policy.default_policy.limits[0].name=daily",
		"policy.default_policy.limits[0].window=24h", "policy.default_policy.limits[0].max=0")
	sum := func(m *manifests) string {
		return one[appsv1.StatefulSet](t, m, "StatefulSet").Spec.Template.Annotations["checksum/config"]
	}
	if sum(m) == "" || sum(m) != sum(stricter) {
		t.Fatalf("checksum/config %q -> %q: a policy change would restart the pods", sum(m), sum(stricter))
	}
	if cfg := workerConfig(t, stricter); cfg.Policy.Source == "" {
		t.Fatal("no policy source")
	}

	// A store as the source: no ConfigMap, no mount, no check.
	st := mustRender(t, nil, "config.policy.source=s3://capper-policies/prod", "policy=null")
	if k := st.kinds(); k["ConfigMap"] != 1 {
		t.Fatalf("kinds with a policy store: %v", k)
	}
	if cfg := workerConfig(t, st); cfg.Policy.Source != "s3://capper-policies/prod" {
		t.Fatalf("policy.source %q", cfg.Policy.Source)
	}
	if p := one[corev1.Pod](t, st, "Pod"); len(p.Spec.Containers) != 1 {
		t.Fatalf("helm test with a policy store runs %d containers", len(p.Spec.Containers))
	}
}
