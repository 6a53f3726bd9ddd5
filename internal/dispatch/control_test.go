package dispatch

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
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

// TestControlFollowerOneWriter: records arriving on eight partitions at
// once, every campaign's last one a stop; once the follower has applied
// every record, every campaign is stopped and no applied offset ever went
// backwards. (With a state published by each partition's reader, an older
// copy could be stored over a newer one: a stop lost until the next record.)
func TestControlFollowerOneWriter(t *testing.T) {
	const partitions, campaigns, rounds = 8, 16, 60
	k := testenv.StartKafka(t, partitions, []string{"ctl"})
	o := testKafkaOptions(k.Addrs, "g")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	src, err := NewControlSource(o, "ctl")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	reg := prometheus.NewRegistry()
	f := control.NewFollower(control.FollowerOptions{Source: src, Topic: "ctl", Registerer: reg})
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	if err := f.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	// Watch the applied offsets: they never go backwards.
	stopWatch := make(chan struct{})
	watched := make(chan string, 1)
	go func() {
		last := map[string]float64{}
		for {
			select {
			case <-stopWatch:
				watched <- ""
				return
			case <-time.After(time.Millisecond):
			}
			for p := range partitions {
				label := strconv.Itoa(p)
				v := gaugeOrMinus(reg, "capper_control_applied_offset", label)
				if prev, ok := last[label]; ok && v < prev {
					watched <- fmt.Sprintf("capper_control_applied_offset{partition=%s} went from %v to %v", label, prev, v)
					return
				}
				last[label] = v
			}
		}
	}()
	t0 := time.Now().UTC().Truncate(time.Second)
	for round := range rounds {
		// Every campaign's stop is written at once, so that partitions'
		// records are applied side by side.
		var wg sync.WaitGroup
		errs := make(chan error, campaigns)
		start := make(chan struct{})
		for c := range campaigns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := fmt.Sprintf("r%d-c%d", round, c)
				<-start
				r := control.Record{Campaign: id, State: control.Stopped, Reason: "test", At: t0, Since: t0}
				if _, err := WriteControl(ctx, o, "ctl", &r); err != nil {
					errs <- err
				}
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		ends, err := src.Ends(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Every record applied (as the gauges say), then the state.
		deadline := time.Now().Add(20 * time.Second)
		for !appliedAll(reg, ends) && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		s := f.Load()
		var missing []string
		for c := range campaigns {
			id := fmt.Sprintf("r%d-c%d", round, c)
			if e := s.Campaign(id); e == nil || e.State != control.Stopped {
				missing = append(missing, id)
			}
		}
		if len(missing) > 0 || !appliedAll(reg, ends) {
			t.Fatalf("round %d: every record written (ends %v); campaigns not stopped in the state in use: %v", round, ends, missing)
		}
	}
	close(stopWatch)
	if msg := <-watched; msg != "" {
		t.Fatal(msg)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func appliedAll(reg *prometheus.Registry, ends map[int]int64) bool {
	for p, end := range ends {
		if gaugeOrMinus(reg, "capper_control_applied_offset", strconv.Itoa(p)) != float64(end-1) {
			return false
		}
	}
	return true
}

// gaugeOrMinus is a gauge's value for the label, -1 when it has none.
func gaugeOrMinus(reg *prometheus.Registry, name, label string) float64 {
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == label {
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1
}

// TestControlStopSurvivesCompaction: foreign records written after a
// campaign's state (a tombstone, another campaign's record under its key,
// bad JSON) never undo it in a running follower, which writes the last
// valid record again; after a compaction, the topic holds only that, and a
// follower started then has every state.
func TestControlStopSurvivesCompaction(t *testing.T) {
	k := testenv.StartKafka(t, 1, nil)
	if err := k.Cluster.CreateTopic("ctl", 1, map[string]string{"cleanup.policy": "compact", "delete.retention.ms": "0"}); err != nil {
		t.Fatal(err)
	}
	o := testKafkaOptions(k.Addrs, "g")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t0 := time.Now().UTC().Truncate(time.Second)
	write := func(id string, st control.State) {
		t.Helper()
		if _, err := WriteControl(ctx, o, "ctl", &control.Record{Campaign: id, State: st, Reason: "test", At: t0, Since: t0}); err != nil {
			t.Fatal(err)
		}
	}
	write("a", control.Stopped)
	write("b", control.Stopped)
	write("c", control.Paused)
	other := fmt.Sprintf(`{"campaign":"c","state":"active","at":%q,"since":%q}`, t0.Format(time.RFC3339), t0.Format(time.RFC3339))
	k.Produce(t, "ctl", []kafka.Message{
		{Key: []byte("campaign/a")}, // a tombstone
		{Key: []byte("campaign/b"), Value: []byte(other)},
		{Key: []byte("campaign/c"), Value: []byte("{not json")},
	})
	want := map[string]control.State{"a": control.Stopped, "b": control.Stopped, "c": control.Paused}
	check := func(who string, s *control.Snapshot) {
		t.Helper()
		for id, st := range want {
			if e := s.Campaign(id); e == nil || e.State != st {
				t.Fatalf("%s: campaign %s is %+v, want %s", who, id, e, st)
			}
		}
	}

	src, err := NewControlSource(o, "ctl")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	reg := prometheus.NewRegistry()
	f := control.NewFollower(control.FollowerOptions{Source: src, Writer: src, Topic: "ctl", Registerer: reg, ReassertAfter: 20 * time.Millisecond})
	run, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- f.Run(run) }()
	if err := f.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	check("the running follower", f.Load())
	deadline := time.Now().Add(20 * time.Second)
	for regValue(t, reg, "capper_control_reasserted_total", "") < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("re-asserted %v records in 20s, want 3", regValue(t, reg, "capper_control_reasserted_total", ""))
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Compaction keeps a partition's last batch: one more record after.
	write("z", control.Active)
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	check("the running follower at its end", f.Load())

	k.Cluster.Compact()
	left := readAll(t, k.Addrs, "ctl")
	for _, m := range left {
		if r, err := control.Parse(m.Key, m.Value); err != nil || (r.Campaign != "z" && r.State != want[r.Campaign]) {
			t.Fatalf("after compaction the topic holds %s=%q: %v", m.Key, m.Value, err)
		}
	}
	if len(left) != 4 {
		t.Fatalf("after compaction the topic holds %d records, want 4 (one per key)", len(left))
	}
	src2, err := NewControlSource(o, "ctl")
	if err != nil {
		t.Fatal(err)
	}
	defer src2.Close()
	f2 := control.NewFollower(control.FollowerOptions{Source: src2, Topic: "ctl", Registerer: prometheus.NewRegistry()})
	run2, stop2 := context.WithCancel(ctx)
	defer stop2()
	go func() { _ = f2.Run(run2) }()
	if err := f2.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	check("a follower started after the compaction", f2.Load())
}

// readAll is every record of a one-partition topic, from its start.
func readAll(t *testing.T, brokers []string, topic string) []kafka.Message {
	t.Helper()
	c := &kafka.Client{Addr: kafka.TCP(brokers...)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	offs, err := c.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: {kafka.FirstOffsetOf(0)}}})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Fetch(ctx, &kafka.FetchRequest{Topic: topic, Partition: 0, Offset: offs.Topics[topic][0].FirstOffset, MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Error != nil {
		t.Fatal(resp.Error)
	}
	var out []kafka.Message
	for {
		r, err := resp.Records.ReadRecord()
		if err != nil {
			break
		}
		m := kafka.Message{Offset: r.Offset}
		if r.Key != nil {
			m.Key, _ = io.ReadAll(r.Key)
		}
		if r.Value != nil {
			m.Value, _ = io.ReadAll(r.Value)
		}
		out = append(out, m)
	}
	return out
}
