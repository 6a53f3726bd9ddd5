package soak

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestSchedule: every schedule starts with a Redis outage, swaps the
// policy, stops or pauses a campaign, keeps outages long enough for a
// failed attempt to be counted, draws both control faults (a compaction
// with a foreign record, a stop in a stall) when the traffic is long
// enough, and ends its faults within the traffic; the same seed draws the
// same schedule (a failing seed replays).
func TestSchedule(t *testing.T) {
	for _, traffic := range []time.Duration{30 * time.Second, 60 * time.Second} {
		for seed := uint64(1); seed <= 20; seed++ {
			draw := func() (bool, []fault) {
				rng := rand.New(rand.NewPCG(seed, 0xfa17))
				cluster := rng.IntN(2) == 0
				return cluster, schedule(rng, cluster, traffic)
			}
			cluster, fs := draw()
			if _, again := draw(); len(again) != len(fs) || again[0] != fs[0] || again[len(fs)-1] != fs[len(fs)-1] {
				t.Fatalf("seed %d: two draws differ", seed)
			}
			swap, control := false, false
			drawn := map[string]bool{}
			for i, f := range fs {
				if i == 0 && !outages[f.kind] {
					t.Errorf("seed %d: the first fault is %s, not a Redis outage", seed, f.kind)
				}
				if (outages[f.kind] || f.kind == "stop-in-stall") && f.length < 4*time.Second {
					t.Errorf("seed %d: outage %s lasts %s", seed, f.kind, f.length)
				}
				if f.at+f.length > traffic+10*time.Second {
					t.Errorf("seed %d: %s ends past the traffic", seed, f)
				}
				swap = swap || f.kind == "policy-swap"
				control = control || f.kind == "campaign-stop" || f.kind == "campaign-pause"
				drawn[f.kind] = true
			}
			if !swap || !control {
				t.Errorf("seed %d: a policy swap %v, a campaign stopped or paused %v: want both", seed, swap, control)
			}
			if traffic >= 50*time.Second && (!drawn["control-compaction"] || !drawn["stop-in-stall"]) {
				t.Errorf("seed %d, %s: control-compaction %v, stop-in-stall %v: want both", seed, traffic, drawn["control-compaction"], drawn["stop-in-stall"])
			}
			if testing.Verbose() {
				t.Logf("seed %d, %s (cluster %v, persist %v): %v", seed, traffic, cluster, persists(seed), fs)
			}
		}
	}
}
