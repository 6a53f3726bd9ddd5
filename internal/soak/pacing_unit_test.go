package soak

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/kafka"
)

// pacedDelivery is a made-up delivery of input offset off that waited in
// lane (of the soak's budget), released at released, decided at decided
// and written at written.
func pacedDelivery(off int, lane string, released, decided, written time.Time, dup bool) kafka.Message {
	m := kafka.Message{Topic: tDeliveries, Offset: int64(off), Key: []byte("7"), Time: written,
		Value: fmt.Appendf(nil, `{"id":"i-%d","user_id":7,"campaign_id":"c1","channel":"push","route":"fcm"}`, off),
		Headers: []kafka.Header{
			{Key: hSource, Value: fmt.Appendf(nil, "%s/0/%d", tIn, off)},
			{Key: hDecision, Value: []byte("allowed")},
			{Key: hDecidedAt, Value: []byte(decided.Format(timeLayout))},
			{Key: hReleasedAt, Value: []byte(released.Format(timeLayout))},
			{Key: hLane, Value: []byte(paceBudget + "/" + lane)},
		}}
	if dup {
		m.Headers = append(m.Headers, kafka.Header{Key: hDuplicate, Value: []byte("true")})
	}
	return m
}

// TestReleasesCheck feeds checkReleases made-up outcomes of a budget of
// 8/s with a burst of 4 (at most 12.08 in a second): a burst of 12
// followed by the rate is not reported; 13 within a second are, with
// every outcome's capper-source, duplicates, refusals and both lanes
// counted; cancellations and another budget's outcomes take no part.
func TestReleasesCheck(t *testing.T) {
	base := time.Date(2026, 11, 27, 5, 0, 0, 0, time.UTC)
	b := budget{name: paceBudget, rate: 8, burst: 4}
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	// n deliveries from ms on, every step ms.
	run := func(n, from, step int, lane func(i int) string, dup func(i int) bool) []kafka.Message {
		var out []kafka.Message
		for i := range n {
			r := at(from + i*step)
			out = append(out, pacedDelivery(from+i, lane(i), r, r.Add(5*time.Millisecond), r.Add(20*time.Millisecond), dup(i)))
		}
		return out
	}
	bulk := func(int) string { return "bulk" }
	both := func(i int) string { return paceLanes[i%2] }
	never := func(int) bool { return false }
	for _, c := range []struct {
		name string
		ds   []kafka.Message
		want []string // in the one finding; none: no finding
	}{
		{"the burst, then the rate", append(run(12, 0, 1, bulk, never), run(40, 1000, 125, bulk, never)...), nil},
		{"the rate", run(40, 0, 125, bulk, never), nil},
		{"12, the 13th a second after the first", append(run(12, 0, 1, bulk, never), run(1, 1000, 1, bulk, never)...), nil},
		{"13 within a second", run(13, 0, 70, bulk, never), []string{"released 13 intents (by their outcomes) from 2026-11-27T05:00:00.000Z to 2026-11-27T05:00:00.840Z",
			"rate*1.01 + burst = 12.08", "send-intents/0/0 push-fcm/bulk", "send-intents/0/12 push-fcm/bulk"}},
		{"both lanes and a duplicate count", run(13, 0, 70, both, func(i int) bool { return i == 3 }), []string{"released 13 intents",
			"push-fcm/urgent", "send-intents/0/3 push-fcm/bulk allowed released-at 2026-11-27T05:00:00.210Z decided-at 2026-11-27T05:00:00.215Z duplicate"}},
		{"another budget's", append(run(12, 0, 10, bulk, never), func() kafka.Message {
			m := pacedDelivery(99, "bulk", at(5), at(6), at(7), false)
			m.Headers[len(m.Headers)-1].Value = []byte("push-apns/bulk")
			return m
		}()), nil},
		{"refusals count", refused(run(13, 0, 70, bulk, never), "capped", 1, 5, 9), []string{"released 13 intents",
			"send-intents/0/5 push-fcm/bulk capped released-at 2026-11-27T05:00:00.350Z"}},
		{"cancellations do not", refused(run(13, 0, 70, bulk, never), "cancelled", 4), nil},
	} {
		var o outputs
		for _, m := range c.ds {
			if m.Topic == tSuppressed {
				o.suppressed = append(o.suppressed, m)
			} else {
				o.deliveries = append(o.deliveries, m)
			}
		}
		r := &report{counts: map[string]int{}}
		checkReleases(r, o, b)
		got := r.problems["releases"]
		switch {
		case len(c.want) == 0 && len(got) > 0:
			t.Errorf("%s: reported %q", c.name, got)
		case len(c.want) > 0 && len(got) != 1:
			t.Errorf("%s: reported %q, want one finding", c.name, got)
		case len(c.want) > 0:
			for _, w := range c.want {
				if !strings.Contains(got[0], w) {
					t.Errorf("%s: reported %q, want %q in it", c.name, got[0], w)
				}
			}
		}
	}
}

// refused makes outcomes i of ds refusals of decision d (in the
// suppressed topic).
func refused(ds []kafka.Message, d string, i ...int) []kafka.Message {
	for _, k := range i {
		ds[k].Topic = tSuppressed
		for j := range ds[k].Headers {
			if ds[k].Headers[j].Key == hDecision {
				ds[k].Headers[j].Value = []byte(d)
			}
		}
	}
	return ds
}

// TestWrittenCheck feeds checkWritten made-up deliveries: one written
// more than a second after its decision is reported with its
// capper-source, and one decided before its release; one written within
// the second is not, nor a duplicate
// (its decided-at is its id's first allowance), nor one decided before
// the broker came back from a restart, nor one whose batch waited for a
// Redis outage; one decided well after that outage is.
func TestWrittenCheck(t *testing.T) {
	base := time.Date(2026, 11, 27, 5, 0, 0, 0, time.UTC)
	sec := func(s float64) time.Time { return base.Add(time.Duration(s * float64(time.Second))) }
	down := []downWindow{{sec(100), sec(103)}}
	redis := []downWindow{{sec(200), sec(205)}}
	for _, c := range []struct {
		name string
		d    kafka.Message
		want string
	}{
		{"within the second", pacedDelivery(1, "bulk", sec(0), sec(0.1), sec(1.1), false), ""},
		{"late", pacedDelivery(2, "urgent", sec(0), sec(0.1), sec(1.2), false),
			"send-intents/0/2 (lane push-fcm/urgent) decided at 2026-11-27T05:00:00.100Z, written at 2026-11-27T05:00:01.200Z: 1.1s after its decision"},
		{"a duplicate", pacedDelivery(3, "bulk", sec(50), sec(1), sec(50.1), true), ""},
		{"across a broker restart", pacedDelivery(4, "bulk", sec(99), sec(99.5), sec(104), false), ""},
		{"decided after the broker came back", pacedDelivery(5, "bulk", sec(103), sec(103.2), sec(105), false), "send-intents/0/5"},
		{"its attempt waited for a Redis node", pacedDelivery(7, "bulk", sec(210), sec(210.1), sec(214), false), ""},
		{"its own answer lost in an outage", pacedDelivery(9, "bulk", sec(210), sec(210.1), sec(222), false), ""},
		{"decided well after a Redis outage", pacedDelivery(8, "bulk", sec(300), sec(300.1), sec(302), false), "send-intents/0/8"},
		{"decided before its release", pacedDelivery(6, "bulk", sec(10), sec(9.9), sec(10.1), false),
			"send-intents/0/6 (lane push-fcm/bulk) decided at 2026-11-27T05:00:09.900Z, before its release"},
	} {
		r := &report{counts: map[string]int{}}
		checkWritten(r, outputs{deliveries: []kafka.Message{c.d}}, down, redis)
		got := r.problems["written"]
		switch {
		case c.want == "" && len(got) > 0:
			t.Errorf("%s: reported %q", c.name, got)
		case c.want != "" && (len(got) != 1 || !strings.Contains(got[0], c.want)):
			t.Errorf("%s: reported %q, want one finding with %q", c.name, got, c.want)
		}
	}
}

// TestLanesCheck: an outcome of a covered intent names the lane its
// priority falls in; an intent not covered (another route, an exempt
// category, another channel) names none.
func TestLanesCheck(t *testing.T) {
	b := budget{name: paceBudget, rate: paceRate, burst: paceBurst}
	out := func(value, lane string) kafka.Message {
		m := kafka.Message{Topic: tDeliveries, Value: []byte(value), Headers: []kafka.Header{{Key: hSource, Value: []byte("send-intents/0/1")}}}
		if lane != "" {
			m.Headers = append(m.Headers, kafka.Header{Key: hLane, Value: []byte(lane)})
		}
		return m
	}
	for _, c := range []struct {
		value, lane string
		ok          bool
	}{
		{`{"channel":"push","route":"fcm"}`, "push-fcm/bulk", true},
		{`{"channel":"push","route":"fcm","priority":"high"}`, "push-fcm/urgent", true},
		{`{"channel":"push","route":"fcm","priority":"80"}`, "push-fcm/urgent", true},
		{`{"channel":"push","route":"fcm","priority":74}`, "push-fcm/bulk", true},
		{`{"channel":"push","route":"fcm","priority":74}`, "push-fcm/urgent", false},
		{`{"channel":"push","route":"fcm","category":""}`, "push-fcm/bulk", true},
		{`{"channel":"push","route":"fcm","category":"transactional"}`, "", true},
		{`{"channel":"push","route":"fcm","category":"transactional"}`, "push-fcm/bulk", false},
		{`{"channel":"push","route":"apns"}`, "", true},
		{`{"channel":"push"}`, "push-fcm/bulk", false},
		{`{"channel":"push","route":"fcm"}`, "", false},
		{`{"channel":"email","route":"fcm"}`, "", true},
	} {
		r := &report{counts: map[string]int{}}
		checkLanes(r, outputs{deliveries: []kafka.Message{out(c.value, c.lane)}}, b)
		if got := r.problems["lanes"]; (len(got) == 0) != c.ok {
			t.Errorf("%s in lane %q: reported %q", c.value, c.lane, got)
		}
	}
}
