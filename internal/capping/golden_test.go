package capping_test

// The generated scripts of the example policies, checked in: a change of
// the generator's output fails here until testdata/*.golden.lua is
// rewritten (go test ./internal/capping -run TestGoldenScripts -update), so
// a review shows the Lua diff.

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/policy"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.lua from the generator")

func TestGoldenScripts(t *testing.T) {
	for _, c := range []struct{ name, policy string }{
		{"policy", "../../configs/policy.yaml"}, // the documented example
		{"every-feature", "testdata/every-feature.yaml"},
	} {
		t.Run(c.name, func(t *testing.T) {
			data, err := os.ReadFile(c.policy)
			if err != nil {
				t.Fatal(err)
			}
			doc, err := policy.Parse(data)
			if err != nil {
				t.Fatal(err)
			}
			rules, ps := doc.Rules()
			if err := ps.Err(); err != nil {
				t.Fatal(err)
			}
			src, err := capping.ScriptSource(rules, 24*time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", c.name+".golden.lua")
			if *update {
				if err := os.WriteFile(golden, []byte(src), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to write it)", err)
			}
			if src != string(want) {
				t.Fatalf("the script generated for %s differs from %s: review the change, then run go test ./internal/capping -run TestGoldenScripts -update", c.policy, golden)
			}
		})
	}
}
