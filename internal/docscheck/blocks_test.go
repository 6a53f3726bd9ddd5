package docscheck

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/dispatch"
	"github.com/capper-dev/capper/internal/plans"
	"github.com/capper-dev/capper/internal/policy"
	"github.com/capper-dev/capper/internal/userlimits"
)

// root is the repository, from this package's directory.
const root = "../.."

func loadPages(t *testing.T) []*Page {
	t.Helper()
	pages, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) < 10 {
		t.Fatalf("found %d pages: is docs/ there?", len(pages))
	}
	return pages
}

// langs are the languages a fenced block may have.
var langs = []string{"yaml", "json", "sh", "console", "text", "mermaid"}

// checkers load a block as what its marker says it is; each returns the
// loader's error.
var checkers = map[string]func(text string) error{
	"policy": checkPolicy,
	"limits": func(text string) error {
		var b strings.Builder
		b.WriteString("default_policy:\n  limits:\n")
		for _, l := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
			b.WriteString("    " + l + "\n")
		}
		return checkPolicy(b.String())
	},
	"config": func(text string) error {
		_, err := config.Parse([]byte(text), nil)
		return err
	},
	"plan": func(text string) error {
		spec, err := plans.ParseSpec([]byte(text))
		if err != nil {
			return err
		}
		def := policy.Default()
		rules, ps := def.Rules()
		if len(ps) > 0 {
			return ps.Err()
		}
		_, ps = spec.Check(rules)
		return ps.Err()
	},
	"intent": func(text string) error {
		_, err := decoder().DecodeValue([]byte(text))
		return err
	},
	"status": func(text string) error {
		_, err := decoder().DecodeStatus([]byte(text))
		return err
	},
	"userlimits": func(text string) error {
		_, err := userlimits.DecodeValue([]byte(text))
		return err
	},
}

func checkPolicy(text string) error {
	d, err := policy.Parse([]byte(text))
	if err != nil {
		return err
	}
	return d.Problems().Err()
}

// decoder is the worker's intent decoder with the default policy's
// vocabulary and the default size limit.
func decoder() *dispatch.Decoder {
	p := policy.Default()
	d, err := dispatch.NewDecoder(dispatch.DecoderOptions{Channels: p.Channels, Categories: p.Categories,
		DefaultCategory: p.DefaultCategory, MaxBytes: config.Default().Kafka.MaxIntentBytes})
	if err != nil {
		panic(err) // the defaults are valid: TestDefaultsAreValid (config)
	}
	return d
}

// checkBlock checks one fenced block against its marker; nil when it is
// what the marker says.
func checkBlock(b Block) error {
	data := b.Lang == "yaml" || b.Lang == "json"
	if !slices.Contains(langs, b.Lang) {
		return fmt.Errorf("a %q block: give every fenced block one of the languages %s", b.Lang, strings.Join(langs, ", "))
	}
	if b.Marker == "" {
		if data {
			return errors.New("a " + b.Lang + " block without a check marker: say what it is (<!-- check: KIND -->) or why it is not checked (<!-- check: none (WHY) -->); see CONTRIBUTING.md")
		}
		return nil
	}
	if !data {
		return fmt.Errorf("a check marker on a %s block: only yaml and json blocks are checked this way", b.Lang)
	}
	m, err := ParseMarker(b.Marker)
	if err != nil {
		return err
	}
	if m.Kind == "none" {
		return nil
	}
	check, ok := checkers[m.Kind]
	if !ok {
		return fmt.Errorf("check marker: %q is not one of policy, limits, config, plan, intent, status, none", m.Kind)
	}
	err = check(b.Text)
	switch {
	case m.Invalid == "" && err != nil:
		return fmt.Errorf("the %s example does not load: %w", m.Kind, err)
	case m.Invalid != "" && err == nil:
		return fmt.Errorf("the %s example is marked invalid (%q) but loads", m.Kind, m.Invalid)
	case m.Invalid != "" && !strings.Contains(err.Error(), m.Invalid):
		return fmt.Errorf("the invalid %s example fails with %q, not with the error shown (%q)", m.Kind, err, m.Invalid)
	}
	return nil
}

// TestExamples loads every yaml and json block of the docs with capper's
// own loader for what its marker says it is, and checks that every fenced
// block has a known language.
func TestExamples(t *testing.T) {
	kinds := map[string]int{}
	for _, p := range loadPages(t) {
		for _, b := range p.Blocks {
			if err := checkBlock(b); err != nil {
				t.Errorf("%s: %v", p.Where(b.Line), err)
			}
			if m, err := ParseMarker(b.Marker); err == nil && b.Marker != "" {
				kinds[m.Kind]++
			}
		}
	}
	t.Logf("checked blocks by kind: %v", kinds)
	// The check must have something to check: every kind is used.
	for kind := range checkers {
		if kinds[kind] == 0 {
			t.Errorf("no block of the docs is checked as %s", kind)
		}
	}
}

// TestExamplesCanFail: a broken example of each kind, an unmarked yaml
// block, a wrong error text and an unknown language are reported.
func TestExamplesCanFail(t *testing.T) {
	for _, c := range []struct {
		name string
		page string
		want string
	}{
		{"policy without max", "<!-- check: policy -->\n```yaml\ndefault_policy: {limits: [{name: d, window: 24h}]}\n```\n", `max: is required`},
		{"limits with an unknown key", "<!-- check: limits -->\n```yaml\n- {name: d, window: 24h, max: 1, slot: 2}\n```\n", `(limit "d").slot: unknown key; the keys here: name, window`},
		{"config", "<!-- check: config -->\n```yaml\nworker: {batch_size: 0}\n```\n", "worker.batch_size"},
		{"plan", "<!-- check: plan -->\n```yaml\ncampaign: c\npriority: urgent\n```\n", "priority"},
		{"intent", "<!-- check: intent -->\n```json\n{\"id\": \"a\", \"user_id\": 1, \"campaign_id\": \"c\", \"channel\": \"fax\"}\n```\n", "channel"},
		{"userlimits", "<!-- check: userlimits -->\n```json\n{\"user_id\": 1, \"tier\": \"\"}\n```\n", "tier"},
		{"status", "<!-- check: status -->\n```json\n{\"id\": \"a\", \"user_id\": 1, \"status\": \"failed\"}\n```\n", "at"},
		{"invalid but loads", "<!-- check: config, invalid: nope -->\n```yaml\nworker: {batch_size: 1}\n```\n", "but loads"},
		{"another error", "<!-- check: config, invalid: log.level -->\n```yaml\nworker: {batch_size: 0}\n```\n", "not with the error shown"},
		{"unmarked", "```yaml\na: 1\n```\n", "without a check marker"},
		{"none without a reason", "<!-- check: none -->\n```json\n{}\n```\n", "check marker"},
		{"unknown kind", "<!-- check: helm -->\n```yaml\na: 1\n```\n", `"helm" is not one of`},
		{"no language", "```\nx\n```\n", "languages"},
		{"marker on a shell block", "<!-- check: config -->\n```sh\ncapper version\n```\n", "only yaml and json"},
	} {
		p := Parse("test.md", c.page)
		if len(p.Blocks) != 1 {
			t.Fatalf("%s: %d blocks", c.name, len(p.Blocks))
		}
		err := checkBlock(p.Blocks[0])
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
		}
	}
	ok := Parse("test.md", "<!-- check: none (a Helm values file: the chart's schema checks it) -->\n\n```yaml\nreplicas: 3\n```\n")
	if err := checkBlock(ok.Blocks[0]); err != nil {
		t.Errorf("a block marked none: %v", err)
	}
}
