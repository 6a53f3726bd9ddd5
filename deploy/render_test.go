package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/capper-dev/capper/internal/testenv"
)

const (
	chartDir    = "helm/capper"
	testRelease = "capper"
	testNS      = "capper-test"
)

// allOnValues are the chart's values files that turn every optional feature
// on; the HPA and KEDA exclude each other, hence two.
var allOnValues = []string{"ci/all-on-hpa-values.yaml", "ci/all-on-keda-values.yaml"}

// helmBinary finds helm: $HELM, else ./.bin/helm (scripts/ensure-deps.sh
// --helm installs it there), else PATH. Missing, it skips the test on a
// developer machine and fails it under CI (testenv.RequireServers).
func helmBinary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("HELM"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("HELM=%s: %v", p, err)
		}
		return p
	}
	if p, err := filepath.Abs(filepath.Join("..", ".bin", "helm")); err == nil {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p
		}
	}
	p, err := exec.LookPath("helm")
	if err != nil {
		if testenv.RequireServers() {
			t.Fatalf("helm not found ($HELM, ./.bin/helm, PATH); install it with scripts/ensure-deps.sh --helm")
		}
		t.Skip("helm not found; run scripts/ensure-deps.sh --helm")
	}
	return p
}

// runHelm runs helm with args from the deploy directory and returns stdout,
// or an error carrying stderr.
func runHelm(t testing.TB, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(helmBinary(t), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	// Keep helm away from the user's repositories and plugins.
	home := t.TempDir()
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"))
	if err := cmd.Run(); err != nil {
		return out.String(), &helmError{args: args, err: err, stderr: errb.String()}
	}
	return out.String(), nil
}

// helmError is a failed helm run; stderr holds helm's own message.
type helmError struct {
	args   []string
	err    error
	stderr string
}

func (e *helmError) Error() string {
	return fmt.Sprintf("helm %s: %v\n%s", strings.Join(e.args, " "), e.err, e.stderr)
}

// render runs helm template with the given values files and --set flags
// ("json:key=value" is a --set-json flag).
func render(t testing.TB, files []string, sets ...string) (string, error) {
	t.Helper()
	args := []string{"template", testRelease, chartDir, "--namespace", testNS}
	for _, f := range files {
		args = append(args, "-f", filepath.Join(chartDir, f))
	}
	for _, s := range sets {
		if js, ok := strings.CutPrefix(s, "json:"); ok {
			args = append(args, "--set-json", js)
		} else {
			args = append(args, "--set", s)
		}
	}
	return runHelm(t, args...)
}

// mustRender renders and decodes, failing the test on any error.
func mustRender(t testing.TB, files []string, sets ...string) *manifests {
	t.Helper()
	out, err := render(t, files, sets...)
	if err != nil {
		t.Fatal(err)
	}
	m, err := decodeManifests(out)
	if err != nil {
		t.Fatalf("render %v %v: %v", files, sets, err)
	}
	return m
}

// The CRDs the chart renders, mirrored with only the fields the chart uses:
// decoding is strict, so any other field fails the test. (Their Go modules,
// prometheus-operator and KEDA, are far heavier than these few lines.)

type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port          string `json:"port"`
			Path          string `json:"path"`
			Interval      string `json:"interval"`
			ScrapeTimeout string `json:"scrapeTimeout"`
		} `json:"endpoints"`
	} `json:"spec"`
}

type prometheusRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert,omitempty"`
				Record      string            `json:"record,omitempty"`
				Expr        string            `json:"expr"`
				For         string            `json:"for,omitempty"`
				Labels      map[string]string `json:"labels,omitempty"`
				Annotations map[string]string `json:"annotations,omitempty"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

type scaledObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		ScaleTargetRef struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Name       string `json:"name"`
		} `json:"scaleTargetRef"`
		PollingInterval *int32 `json:"pollingInterval"`
		CooldownPeriod  *int32 `json:"cooldownPeriod"`
		MinReplicaCount *int32 `json:"minReplicaCount"`
		MaxReplicaCount *int32 `json:"maxReplicaCount"`
		Triggers        []struct {
			Type string `json:"type"`
			// KEDA wants every metadata value as a string.
			Metadata          map[string]string `json:"metadata"`
			AuthenticationRef *struct {
				Name string `json:"name"`
				Kind string `json:"kind"`
			} `json:"authenticationRef,omitempty"`
		} `json:"triggers"`
	} `json:"spec"`
}

// object is one decoded manifest.
type object struct {
	source string // the template it came from
	kind   string
	meta   *metav1.ObjectMeta
	value  any
}

// manifests is a decoded helm template output.
type manifests struct {
	all []object
}

func (m *manifests) ofKind(kind string) []object {
	var out []object
	for _, o := range m.all {
		if o.kind == kind {
			out = append(out, o)
		}
	}
	return out
}

func (m *manifests) kinds() map[string]int {
	k := map[string]int{}
	for _, o := range m.all {
		k[o.kind]++
	}
	return k
}

// one returns the only object of a kind, failing the test unless there is
// exactly one.
func one[T any](t testing.TB, m *manifests, kind string) *T {
	t.Helper()
	objs := m.ofKind(kind)
	if kind == "ConfigMap" {
		// The policy's ConfigMap has tests of its own
		// (TestChartPolicyConfigMap); "the ConfigMap" is the config's.
		objs = slices.DeleteFunc(objs, func(o object) bool { return strings.HasSuffix(o.meta.Name, "-policy") })
	}
	if len(objs) != 1 {
		t.Fatalf("want exactly one %s, got %d", kind, len(objs))
	}
	return objs[0].value.(*T)
}

var (
	docSep    = regexp.MustCompile(`(?m)^---\s*$`)
	sourceRE  = regexp.MustCompile(`(?m)^# Source: (\S+)`)
	newObject = map[string]func() (any, *metav1.ObjectMeta){
		"v1/ConfigMap": func() (any, *metav1.ObjectMeta) { o := &corev1.ConfigMap{}; return o, &o.ObjectMeta },
		"v1/Service":   func() (any, *metav1.ObjectMeta) { o := &corev1.Service{}; return o, &o.ObjectMeta },
		"v1/ServiceAccount": func() (any, *metav1.ObjectMeta) {
			o := &corev1.ServiceAccount{}
			return o, &o.ObjectMeta
		},
		"v1/Pod":              func() (any, *metav1.ObjectMeta) { o := &corev1.Pod{}; return o, &o.ObjectMeta },
		"apps/v1/StatefulSet": func() (any, *metav1.ObjectMeta) { o := &appsv1.StatefulSet{}; return o, &o.ObjectMeta },
		"batch/v1/CronJob":    func() (any, *metav1.ObjectMeta) { o := &batchv1.CronJob{}; return o, &o.ObjectMeta },
		"batch/v1/Job":        func() (any, *metav1.ObjectMeta) { o := &batchv1.Job{}; return o, &o.ObjectMeta },
		"policy/v1/PodDisruptionBudget": func() (any, *metav1.ObjectMeta) {
			o := &policyv1.PodDisruptionBudget{}
			return o, &o.ObjectMeta
		},
		"autoscaling/v2/HorizontalPodAutoscaler": func() (any, *metav1.ObjectMeta) {
			o := &autoscalingv2.HorizontalPodAutoscaler{}
			return o, &o.ObjectMeta
		},
		"monitoring.coreos.com/v1/ServiceMonitor": func() (any, *metav1.ObjectMeta) {
			o := &serviceMonitor{}
			return o, &o.ObjectMeta
		},
		"monitoring.coreos.com/v1/PrometheusRule": func() (any, *metav1.ObjectMeta) {
			o := &prometheusRule{}
			return o, &o.ObjectMeta
		},
		"keda.sh/v1alpha1/ScaledObject": func() (any, *metav1.ObjectMeta) {
			o := &scaledObject{}
			return o, &o.ObjectMeta
		},
	}
)

// decodeManifests splits helm's output into documents and decodes each
// strictly (unknown or duplicate fields, case-insensitive matches and wrong
// types all fail) into the Go type of its apiVersion and kind.
func decodeManifests(out string) (*manifests, error) {
	var m manifests
	var errs []error
	for _, doc := range docSep.Split(out, -1) {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		source := "?"
		if g := sourceRE.FindStringSubmatch(doc); g != nil {
			source = g[1]
		}
		js, err := yaml.YAMLToJSONStrict([]byte(doc))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", source, err))
			continue
		}
		var tm metav1.TypeMeta
		if _, err := sigsjson.UnmarshalStrict(js, &tm, sigsjson.DisallowDuplicateFields); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", source, err))
			continue
		}
		gvk := tm.APIVersion + "/" + tm.Kind
		mk, ok := newObject[gvk]
		if !ok {
			errs = append(errs, fmt.Errorf("%s: no Go type for %s (add it to newObject)", source, gvk))
			continue
		}
		v, meta := mk()
		strict, err := sigsjson.UnmarshalStrict(js, v)
		if err == nil {
			err = errors.Join(strict...)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s (%s): %w", source, gvk, err))
			continue
		}
		m.all = append(m.all, object{source: source, kind: tm.Kind, meta: meta, value: v})
	}
	return &m, errors.Join(errs...)
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	return b.String()
}
