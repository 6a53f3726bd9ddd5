package dispatch

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/capper-dev/capper/internal/control"
	"github.com/capper-dev/capper/internal/testenv"
)

// TestControlFollower: over a real broker, a follower reads the control
// topic (two partitions) to its end before it says ready, then follows it
// live; a malformed record (written by something else) is counted and
// never undoes a stop; the positions it keeps are where the records are.
func TestControlFollower(t *testing.T) {
	k := testenv.StartKafka(t, 2, []string{"ctl"})
	o := testKafkaOptions(k.Addrs, "g")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t0 := time.Now().UTC().Truncate(time.Second)
	write := func(r control.Record) control.Position {
		t.Helper()
		if r.Since.IsZero() {
			r.Since = t0
		}
		r.At = t0
		pos, err := WriteControl(ctx, o, "ctl", &r)
		if err != nil {
			t.Fatal(err)
		}
		return pos
	}
	stopA := write(control.Record{Campaign: "a", State: control.Stopped, Reason: "wrong price"})
	write(control.Record{Campaign: "b", State: control.Paused, Reason: "review"})
	write(control.Record{Campaign: "b", State: control.Active})
	// Something else writes under a's key: skipped, a stays stopped.
	k.Produce(t, "ctl", []kafka.Message{{Key: []byte("campaign/a"), Value: []byte(`{"campaign":"a","state":"active"}`)}})

	src, err := NewControlSource(o, "ctl")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	reg := prometheus.NewRegistry()
	f := control.NewFollower(control.FollowerOptions{Source: src, Topic: "ctl", Registerer: reg})
	if f.Ready() == nil || f.Load() != nil {
		t.Fatalf("ready before reading the topic")
	}
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	if err := f.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	s := f.Load()
	if a := s.Campaign("a"); a == nil || a.State != control.Stopped || a.Pos != stopA {
		t.Fatalf("campaign a: %+v, want stopped at %s (a malformed record must not undo it)", a, stopA)
	}
	if b := s.Campaign("b"); b == nil || b.State != control.Active {
		t.Fatalf("campaign b: %+v, want active (its latest record)", b)
	}
	if n := regValue(t, reg, "capper_control_malformed_records_total", ""); n != 1 {
		t.Fatalf("capper_control_malformed_records_total = %v, want 1", n)
	}

	// Live: a record written now is applied.
	pos := write(control.Record{All: true, State: control.Paused, Reason: "incident"})
	deadline := time.Now().Add(20 * time.Second)
	for f.Load().All() == nil {
		if time.Now().After(deadline) {
			t.Fatalf("the switch was not applied in 20s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := f.Load().All(); got.State != control.Paused || got.Pos != pos {
		t.Fatalf("switch %+v, want paused at %s", got, pos)
	}
	if n := regValue(t, reg, "capper_control_campaigns", "stopped"); n != 1 {
		t.Fatalf("capper_control_campaigns{state=stopped} = %v", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestWriteControlRefusesBadRecords: nothing is written for a bad record.
func TestWriteControlRefusesBadRecords(t *testing.T) {
	k := testenv.StartKafka(t, 1, []string{"ctl"})
	o := testKafkaOptions(k.Addrs, "g")
	now := time.Now()
	_, err := WriteControl(context.Background(), o, "ctl", &control.Record{Campaign: "a", State: control.Stopped, At: now, Since: now})
	if err == nil || !strings.Contains(err.Error(), "reason: is required") {
		t.Fatalf("WriteControl without a reason: %v", err)
	}
	_, err = WriteControl(context.Background(), o, "missing", &control.Record{Campaign: "a", State: control.Active, At: now, Since: now})
	if err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("WriteControl to a missing topic: %v", err)
	}
}

// regValue is a counter's or gauge's value in reg: the series whose (only)
// label has value label, or the unlabelled one.
func regValue(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label != "" && (len(m.GetLabel()) != 1 || m.GetLabel()[0].GetValue() != label) {
				continue
			}
			if m.Counter != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no series %s{%s}", name, label)
	return 0
}
