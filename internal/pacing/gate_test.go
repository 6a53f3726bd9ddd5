package pacing_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/capper-dev/capper/internal/kafka"
	"github.com/capper-dev/capper/internal/pacing"
	"github.com/capper-dev/capper/internal/testenv"
)

// TestGateStampsTokensAndShowsOnlyWaits: the gate stamps capper-released-at
// on what took a token and not on what passed without one;
// capper_pacing_oldest_wait_seconds has a series while a record waits for
// its tokens and none once nothing waits (a free record last at the head
// included).
func TestGateStampsTokensAndShowsOnlyWaits(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	set := budgetSet(t, 1000, 500)
	reg := prometheus.NewRegistry()
	p := newPacer(t, r, set, 0, reg)
	other := newPacer(t, r, set, 700*time.Millisecond, nil) // another worker's urgent lane
	free := func(m *kafka.Message, _ time.Time) bool { return string(m.Key) == "free" }
	g := &pacing.Gate{Pacer: p, Prefix: "lanes", Free: free, Header: "capper-released-at", HeldHeader: "capper-held-since"}
	topic := pacing.Topic("lanes", "push", "bulk")
	held := time.Now().Add(-time.Minute).UTC().Format("2006-01-02T15:04:05.000Z07:00")
	rec := func(key string, off int64) kafka.Message {
		return kafka.Message{Topic: topic, Key: []byte(key), Offset: off,
			Headers: []kafka.Header{{Key: "capper-held-since", Value: []byte(held)}}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := other.Acquire(ctx, "push", 0, 1); err != nil {
		t.Fatal(err)
	}
	msgs := []kafka.Message{rec("a", 0), rec("free", 1)}
	done := make(chan int, 1)
	go func() {
		n, err := g.Pass(ctx, topic, msgs, 2)
		if err != nil {
			t.Error(err)
		}
		done <- n
	}()
	waitSeries := func(want int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for testutil.CollectAndCount(reg, "capper_pacing_oldest_wait_seconds") != want {
			if time.Now().After(deadline) {
				t.Fatalf("capper_pacing_oldest_wait_seconds has %d series, want %d", testutil.CollectAndCount(reg, "capper_pacing_oldest_wait_seconds"), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitSeries(1) // "a" waits behind the other worker's urgent lane
	if n := <-done; n != 1 {
		t.Fatalf("the gate let %d records go, want 1 (the next is free, not leased for)", n)
	}
	if n, err := g.Pass(ctx, topic, msgs[1:], 2); err != nil || n != 1 {
		t.Fatalf("the free record: %d, %v", n, err)
	}
	waitSeries(0)
	stamp := func(m kafka.Message) string {
		for _, h := range m.Headers {
			if h.Key == "capper-released-at" {
				return string(h.Value)
			}
		}
		return ""
	}
	if stamp(msgs[0]) == "" || stamp(msgs[1]) != "" {
		t.Fatalf("capper-released-at: %q on the released record, %q on the free one; want a time, and none", stamp(msgs[0]), stamp(msgs[1]))
	}
}

// TestGateStampsPlaceholdersInPlace: a record held with an empty
// capper-released-at (capper's lane records) gets its release time in that
// header, in its own array (no copy); a free one's stays empty; a record
// without one (held by an earlier version) gets the header added.
func TestGateStampsPlaceholdersInPlace(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	p := newPacer(t, r, budgetSet(t, 1000, 500), 0, nil)
	free := func(m *kafka.Message, _ time.Time) bool { return string(m.Key) == "free" }
	g := &pacing.Gate{Pacer: p, Prefix: "lanes", Free: free, Header: "capper-released-at", HeldHeader: "capper-held-since"}
	topic := pacing.Topic("lanes", "push", "bulk")
	rec := func(key string, off int64, placeholder bool) kafka.Message {
		h := []kafka.Header{{Key: "capper-held-since", Value: []byte("2026-11-29T00:00:00.000Z")}}
		if placeholder {
			h = append(h, kafka.Header{Key: "capper-released-at", Value: []byte{}})
		}
		return kafka.Message{Topic: topic, Key: []byte(key), Offset: off, Headers: h}
	}
	msgs := []kafka.Message{rec("a", 0, true), rec("old", 1, false), rec("b", 2, true), rec("free", 3, true)}
	arrays := make([]*kafka.Header, len(msgs))
	for i := range msgs {
		arrays[i] = &msgs[i].Headers[0]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for off := 0; off < len(msgs); {
		n, err := g.Pass(ctx, topic, msgs[off:], int64(len(msgs)))
		if err != nil {
			t.Fatal(err)
		}
		off += n
	}
	values := func(m kafka.Message) (vs []string) {
		for _, h := range m.Headers {
			if h.Key == "capper-released-at" {
				vs = append(vs, string(h.Value))
			}
		}
		return vs
	}
	for i, want := range []struct {
		inPlace, stamped bool
	}{{true, true}, {false, true}, {true, true}, {true, false}} {
		m := msgs[i]
		vs := values(m)
		if len(vs) != 1 || (vs[0] != "") == !want.stamped {
			t.Errorf("record %s: capper-released-at %q, want one, stamped %v", m.Key, vs, want.stamped)
		}
		if (&m.Headers[0] == arrays[i]) != want.inPlace {
			t.Errorf("record %s: headers in their own array %v, want %v", m.Key, &m.Headers[0] == arrays[i], want.inPlace)
		}
	}
	if a, b := values(msgs[0]), values(msgs[2]); len(a) == 1 && len(b) == 1 {
		if _, err := time.Parse(kafka.TimeLayout, a[0]); err != nil {
			t.Errorf("record a's stamp: %v", err)
		}
	}
}
