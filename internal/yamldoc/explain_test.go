package yamldoc

import (
	"slices"
	"strings"
	"testing"

	"github.com/capper-dev/capper/internal/problems"
)

type lane struct {
	Name        string `yaml:"name"`
	MinPriority string `yaml:"min_priority"`
}

type budget struct {
	Name  string  `yaml:"name"`
	Rate  float64 `yaml:"rate"`
	Burst int     `yaml:"burst"`
	Lanes []lane  `yaml:"lanes"`
}

type common struct {
	TimeZone string `yaml:"time_zone"`
}

type policyDoc struct {
	common  `yaml:",inline"`
	Budgets []budget          `yaml:"budgets"`
	Labels  map[string]string `yaml:"labels"`
}

const budgets = `budgets:
  - name: push-fcm
    rate: 50
    burst: 5
    lanes:
      - {name: urgent, min_priority: high}
      - {name: bulk}
`

// TestExplain: every decode problem is at its field's path (a named list
// item shown by its name) and line, an unknown key with the key it is
// likely a typo of, a value of the wrong kind with the kind wanted.
func TestExplain(t *testing.T) {
	for _, tc := range []struct{ old, new, want string }{
		{"burst: 5", "brust: 5", `line 4: budgets[0] (budget "push-fcm").brust: unknown key; did you mean burst?`},
		{"rate: 50", "rate: 50/s", `line 3: budgets[0] (budget "push-fcm").rate: "50/s" is not a number (write the number alone: 50)`},
		{"burst: 5", "burst: [5]", `line 4: budgets[0] (budget "push-fcm").burst: a list is not a whole number`},
		{"min_priority: high}", "minPriority: high}", `line 6: budgets[0] (budget "push-fcm").lanes[0] (lane "urgent").minPriority: unknown key; did you mean min_priority?`},
		{"{name: bulk}", "{name: bulk, speed: 3}", `line 7: budgets[0] (budget "push-fcm").lanes[1] (lane "bulk").speed: unknown key; the keys here: name, min_priority`},
		{"budgets:", "time_zon: UTC\nbudgets:", `line 1: time_zon: unknown key; did you mean time_zone?`},
		{"budgets:", "labels: [a]\nbudgets:", `line 1: labels: a list is not a mapping (key: value)`},
	} {
		doc := replaceOnce(t, budgets, tc.old, tc.new)
		err := Decode([]byte(doc), &policyDoc{})
		ps := problems.From(err)
		if len(ps) != 1 || ps[0].Error() != tc.want {
			t.Errorf("%s:\ngot  %v (%d problems)\nwant %s", tc.new, err, len(ps), tc.want)
		}
	}
	// Two at once, both found.
	doc := replaceOnce(t, replaceOnce(t, budgets, "burst: 5", "brust: 5"), "rate: 50", "rate: fast")
	if ps := problems.From(Decode([]byte(doc), &policyDoc{})); len(ps) != 2 || ps[0].Line != 3 || ps[1].Line != 4 {
		t.Errorf("two problems: %v", ps)
	}
}

// TestLocate: a problem found after decoding gets the line of its key, or
// of the nearest enclosing one the document has.
func TestLocate(t *testing.T) {
	bud := problems.Key("budgets").Named(0, "budget", "push-fcm")
	ps := problems.List{
		{Path: bud.Key("lanes").Named(0, "lane", "urgent").Key("min_priority"), Msg: "out of range"},
		{Path: bud.Key("lanes").Index(1).Key("min_priority"), Msg: "left out"},
		{Path: bud.Key("rate"), Msg: "too high"},
		{Path: problems.Key("time_zone"), Msg: "is required"},
		{Path: bud, Msg: "is shadowed"},
	}
	got := Locate([]byte(budgets), ps)
	lines := make([]int, len(got))
	for i, p := range got {
		lines[i] = p.Line
	}
	if want := []int{6, 7, 3, 0, 2}; !slices.Equal(lines, want) {
		t.Errorf("lines %v, want %v", lines, want)
	}
	if got[0].Error() != `line 6: budgets[0] (budget "push-fcm").lanes[0] (lane "urgent").min_priority: out of range` || ps[0].Line != 0 {
		t.Errorf("got %q; the list given must not change (%d)", got[0].Error(), ps[0].Line)
	}
}

func TestSuggest(t *testing.T) {
	known := []string{"name", "rate", "burst", "channels", "routes", "lanes"}
	for name, want := range map[string]string{
		"brust":   "; did you mean burst?",
		"Rate":    "; did you mean rate?",
		"channel": "; did you mean channels?",
		"lane":    "; did you mean lanes?",
		"x":       "; the keys here: name, rate, burst, channels, routes, lanes",
		"burts":   "; did you mean burst?",
		"rote":    "; did you mean rate?",
	} {
		if got := suggest(name, known); got != want {
			t.Errorf("suggest(%q) = %q, want %q", name, got, want)
		}
	}
}

func replaceOnce(t *testing.T, s, old, new string) string {
	t.Helper()
	if !strings.Contains(s, old) {
		t.Fatalf("%q not in the document", old)
	}
	return strings.Replace(s, old, new, 1)
}
