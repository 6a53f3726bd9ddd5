package capping

import (
	"errors"
	"testing"
	"time"
)

// TestHealthByMaster: a failure is kept per master; a round that reaches
// only other masters does not clear it; its own master's success does; a
// failure follows its key's slot to the master that holds it after a
// failover; the clock check clears only what failed before its view of the
// replicas.
func TestHealthByMaster(t *testing.T) {
	owner := map[string]string{"k1": "m1", "k2": "m2"}
	nodeOf := func(k string) string { return owner[k] }
	boom := errors.New("WAIT saw 0 of 1 replicas")
	h := newHealth(0)
	h.settle(time.Now(), []callResult{{key: "k1", err: boom}, {key: "k2"}}, nodeOf)
	if h.ready() == nil {
		t.Fatal("ready after a failed call on m1")
	}
	h.settle(time.Now(), []callResult{{key: "k2"}}, nodeOf)
	if h.ready() == nil {
		t.Fatal("ready after a round that reached only m2")
	}
	owner["k1"] = "m3" // a failover: m3 holds k1's slot now
	h.settle(time.Now(), []callResult{{key: "k2"}}, nodeOf)
	if h.ready() == nil {
		t.Fatal("ready after a failover, before the new master answered")
	}
	h.settle(time.Now(), []callResult{{key: "k1"}}, nodeOf)
	if err := h.ready(); err != nil {
		t.Fatalf("not ready once k1's master answered: %v", err)
	}
	h.settle(time.Now(), []callResult{{key: "k1", err: boom}}, nodeOf)
	h.ok(time.Now().Add(-2 * time.Second))
	if h.ready() == nil {
		t.Fatal("ready after a clock check whose view of the replicas is older than the failure")
	}
	h.ok(time.Now())
	if err := h.ready(); err != nil {
		t.Fatalf("not ready after a clock check that came after the failure: %v", err)
	}
}

// TestHealthOrdersByAnswer: rounds settle in any order; a success answered
// before a failure (a round on m1 answered just before its replica stopped,
// settling after one that failed) does not clear it, a later one does.
func TestHealthOrdersByAnswer(t *testing.T) {
	nodeOf := func(string) string { return "m1" }
	boom := errors.New("WAIT saw 0 of 1 replicas")
	h := newHealth(0)
	t0 := time.Now()
	h.settle(t0.Add(time.Millisecond), []callResult{{key: "k1", err: boom}}, nodeOf)
	h.settle(t0, []callResult{{key: "k1"}}, nodeOf)
	if h.ready() == nil {
		t.Fatal("ready after a success answered before the failure")
	}
	h.settle(t0.Add(2*time.Millisecond), []callResult{{key: "k1"}}, nodeOf)
	if err := h.ready(); err != nil {
		t.Fatalf("not ready after a success answered after the failure: %v", err)
	}
	h.fail(boom)
	h.answered(t0)
	if h.ready() == nil {
		t.Fatal("ready after a round answered before the failed dial")
	}
	h.answered(time.Now())
	if err := h.ready(); err != nil {
		t.Fatalf("not ready after a round answered after the failed dial: %v", err)
	}
}

// TestHealthMergesFailuresOnOneMaster: a failure that follows its key to
// a master with a failure of its own merges with it: a clock check that
// speaks only for the older one leaves the newer standing.
func TestHealthMergesFailuresOnOneMaster(t *testing.T) {
	owner := map[string]string{"k1": "m1", "k2": "m2"}
	nodeOf := func(k string) string { return owner[k] }
	boom := errors.New("WAIT saw 0 of 1 replicas")
	h := newHealth(0)
	t0 := time.Now()
	h.settle(t0, []callResult{{key: "k2", err: boom}}, nodeOf)                    // m2, older
	h.settle(t0.Add(3*time.Second), []callResult{{key: "k1", err: boom}}, nodeOf) // m1, newer
	owner["k1"] = "m2"                                                            // k1's slot moves to m2
	h.settle(t0.Add(3*time.Second), nil, nodeOf)
	h.ok(t0.Add(time.Second)) // speaks for what failed before t0+1s
	if h.ready() == nil {
		t.Fatal("ready: the newer failure, moved onto m2's older one, was dropped")
	}
	h.settle(t0.Add(4*time.Second), []callResult{{key: "k2"}}, nodeOf)
	if err := h.ready(); err != nil {
		t.Fatalf("not ready after m2 answered after both failures: %v", err)
	}
}
