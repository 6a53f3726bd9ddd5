package capping

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/testenv"
)

// TestLargestScriptRuns: rules with as many scopes as the compiler allows,
// every one per campaign (the most pieces per scope in the script's
// record), with calendars, reserves and users' limits, make a script that
// Redis loads (Lua limits a function's registers and locals) and that
// decides: allowed, then capped.
func TestLargestScriptRuns(t *testing.T) {
	r := testRules()
	r.Users = userRules().Users
	for i := 0; ; i++ {
		next := r
		next.Segments = append([]Segment{}, r.Segments...)
		seg := &next.Segments[i%len(next.Segments)]
		seg.Limits = append(append([]Limit{}, seg.Limits...),
			Limit{Name: fmt.Sprint("camp", i), Window: time.Duration(i+1) * time.Hour, Max: 1, Per: PerCampaign, Where: Where{Tags: []string{fmt.Sprint("t", i)}}})
		if _, err := compileRules(next, time.Hour); err != nil {
			if !strings.Contains(err.Error(), "distinct scopes") {
				t.Fatalf("compile: %v", err)
			}
			break
		}
		r = next
	}
	set, err := compileRules(r, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(set.scopes); n != MaxScopes {
		t.Fatalf("%d scopes, want %d", n, MaxScopes)
	}
	e := newEngine(t, testenv.StartRedis(t, testenv.RedisOptions{}).Client(), Options{Rules: r})
	at := time.Now().Truncate(time.Second)
	for k, want := range []Outcome{Allowed, Capped} {
		ds, err := e.Decide(context.Background(), []Request{{UserID: 9, Segment: "new", IntentID: fmt.Sprint("i", k), Channel: "push",
			Category: "marketing", Campaign: "c", At: at.Add(time.Duration(k) * time.Second)}})
		if err != nil || ds[0].Err != nil || ds[0].Outcome != want {
			t.Fatalf("decision %d: %+v %v, want %s", k, ds, err, want)
		}
	}
}
