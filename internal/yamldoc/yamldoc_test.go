package yamldoc

import (
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

type doc struct {
	Window Duration `yaml:"window"`
	Name   string   `yaml:"name"`
}

func TestDecode(t *testing.T) {
	d := doc{Window: Duration(time.Hour), Name: "default"}
	if err := Decode([]byte("window: 7d\n"), &d); err != nil {
		t.Fatal(err)
	}
	if d.Window.D() != 7*24*time.Hour || d.Name != "default" {
		t.Errorf("got %+v: a key left out must keep its value", d)
	}
	if err := Decode(nil, &d); err != nil || d.Window.D() != 7*24*time.Hour {
		t.Errorf("an empty document changed %+v (%v)", d, err)
	}
	for in, want := range map[string]string{
		"name: a\nwindw: 1d\n":    `line 2: windw: unknown key; did you mean window?`,
		"window: 1.5h\n":          `line 1: window: "1.5h" is not a duration (write e.g. 50ms, 30s, 24h, 7d)`,
		"window: [1h]\n":          `line 1: window: a list is not a duration`,
		"name: a\n---\nname: b\n": "more than one YAML document; capper reads exactly one",
	} {
		err := Decode([]byte(in), &doc{})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want it to contain %q", in, err, want)
		}
	}
}

func TestDurationRoundTrip(t *testing.T) {
	for _, s := range []string{"50ms", "30s", "1m30s", "1d", "1w", "0s"} {
		var d Duration
		if err := yaml.Unmarshal([]byte(s), &d); err != nil {
			t.Fatal(err)
		}
		out, err := yaml.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(string(out)); got != s || d.String() != s {
			t.Errorf("%s: written back as %s (String %s)", s, got, d.String())
		}
	}
}
