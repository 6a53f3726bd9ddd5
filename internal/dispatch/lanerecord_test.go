package dispatch

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/kafka"
)

// heldCases are entries held in every shape a lane record carries: from
// the input, from a delay tier with its deferral (and a pause's), a
// throttled send handed back, with and without a send-by and fields.
func heldCases(t testing.TB) []struct {
	name string
	m    *kafka.Message
	e    *entry
} {
	t.Helper()
	at := time.Date(2026, 1, 2, 3, 4, 5, 678_000_000, time.UTC)
	value := []byte(`{"id":"x-1","user_id":1,"campaign_id":"blast","channel":"push","priority":"high"}`)
	var f fields
	if _, err := testDecoder(t, 0).decodeInto([]byte("1"), value, &f); err != nil {
		t.Fatal(err)
	}
	spans := encodeSpans(value, &f)
	input := func() *kafka.Message {
		return &kafka.Message{Topic: "send-intents", Partition: 3, Offset: 12345, Key: []byte("1"), Value: value,
			Headers: []kafka.Header{{Key: "traceparent", Value: []byte("00-abc-01")}, {Key: "capper-decision", Value: []byte("forged")}}}
	}
	held := func(e *entry, sendBy time.Time, campaign string, s fieldSpans) *entry {
		e.kind, e.home = kindHold, 3
		e.held = &e.heldAt
		*e.held = heldEntry{topic: "capper-lanes.push-fcm.bulk", budget: "push-fcm", lane: "bulk", since: at,
			campaign: campaign, sendBy: sendBy, fields: s}
		return e
	}
	tier := &entry{}
	tier.tier.source = []byte("send-intents/1/77")
	tier.tier.Deferral = capping.Deferral{Count: 2, Since: at.Add(-time.Hour)}
	tier.tier.paused = true
	back := &entry{}
	back.tier.handedBack = []byte("send-intents/3/99")
	back.throttledAt = at.Add(-time.Minute)
	return []struct {
		name string
		m    *kafka.Message
		e    *entry
	}{
		{"input", input(), held(&entry{}, time.Time{}, "blast", spans)},
		{"send-by, no campaign, no fields", input(), held(&entry{}, at.Add(time.Hour), "", fieldSpans{})},
		{"from a tier, paused", input(), held(tier, at.Add(-time.Second), "blast", spans)},
		{"handed back", input(), held(back, time.Time{}, "blast", spans)},
		{"before 1970", input(), held(&entry{}, time.Date(1969, 7, 20, 20, 17, 0, 0, time.UTC), "c", spans)},
	}
}

// laneRecord is the lane record of a held entry in one form.
func laneRecord(hb *headerBuilder, m *kafka.Message, e *entry, compact bool) *kafka.Message {
	h := hb.heldHeaders(m, e)
	if compact {
		h = hb.compactHeaders(m, e)
	}
	// As the broker gives it back: its own bytes.
	var own []kafka.Header
	for _, x := range h {
		own = append(own, kafka.Header{Key: x.Key, Value: bytes.Clone(x.Value)})
	}
	return &kafka.Message{Topic: e.held.topic, Partition: e.home, Offset: 5, Key: m.Key, Value: m.Value, Headers: own}
}

// TestLaneRecordFormsReadAlike: a held intent's lane record in its
// compact form (capper-held) reads, released by a token or passed free,
// exactly as in its headers form: when and where it was held, its release,
// its source, fields, deferral and hand-back; the gate stamps both in place
// and LaneFree reads both alike; the input's own headers stay beside it.
func TestLaneRecordFormsReadAlike(t *testing.T) {
	w := &Worker{}
	released := time.Date(2026, 1, 2, 3, 5, 0, 123_000_000, time.UTC)
	now := released.Add(time.Second)
	for _, tc := range heldCases(t) {
		for _, stamped := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/stamped=%v", tc.name, stamped), func(t *testing.T) {
				hb := newHeaderBuilder("v1", "p1")
				var got [2]entry
				for i, compact := range []bool{false, true} {
					m := laneRecord(hb, tc.m, tc.e, compact)
					if compact && (len(m.Headers) > 1+2+3 || findHeader(m.Headers, HeaderHeldSince) != "") {
						t.Fatalf("compact form: %d headers %v", len(m.Headers), m.Headers)
					}
					if findHeader(m.Headers, "traceparent") != "00-abc-01" || findHeader(m.Headers, "capper-decision") != "" {
						t.Fatalf("compact=%v: the input's own headers not kept as they were: %v", compact, m.Headers)
					}
					if stamped {
						// The gate's Stamp, in place: the record keeps its header array.
						own := &m.Headers[0]
						msgs := []kafka.Message{*m}
						StampReleased(msgs, released)
						if *m = msgs[0]; &m.Headers[0] != own {
							t.Fatalf("compact=%v: stamped in a copy of its headers", compact)
						}
					}
					if !HeldSince(m).Equal(tc.e.held.since) {
						t.Errorf("compact=%v: HeldSince %v, want %v", compact, HeldSince(m), tc.e.held.since)
					}
					free := w.LaneFree(m, now)
					if want := !tc.e.held.sendBy.IsZero() && tc.e.held.sendBy.Before(now); free != want {
						t.Errorf("compact=%v: LaneFree %v, want %v (send-by %v)", compact, free, want, tc.e.held.sendBy)
					}
					if !w.readLane(m, &got[i], now) {
						t.Fatalf("compact=%v: unreadable: %v", compact, got[i].invalid)
					}
				}
				h, c := &got[0], &got[1]
				if !laneInfoEqual(h.lane, c.lane) {
					t.Errorf("lane info: headers %+v, compact %+v", *h.lane, *c.lane)
				}
				if !bytes.Equal(h.tier.source, c.tier.source) || !bytes.Equal(h.tier.handedBack, c.tier.handedBack) ||
					h.tier.Deferral != c.tier.Deferral || h.tier.paused != c.tier.paused || !h.throttledAt.Equal(c.throttledAt) ||
					h.home != c.home || h.kind != c.kind {
					t.Errorf("read: headers %+v / %v / %v, compact %+v / %v / %v", h.tier, h.throttledAt, h.home, c.tier, c.throttledAt, c.home)
				}
				if c.lane.token != stamped || stamped && !c.lane.releasedAt.Equal(released) {
					t.Errorf("compact release: token %v at %v, want %v at %v", c.lane.token, c.lane.releasedAt, stamped, released)
				}
				if string(c.tier.source) == "" || c.lane.budget != "push-fcm" || c.lane.lane != "bulk" {
					t.Errorf("compact: source %q, lane %s/%s", c.tier.source, c.lane.budget, c.lane.lane)
				}
			})
		}
	}
}

func laneInfoEqual(a, b *laneInfo) bool {
	return a.budget == b.budget && a.lane == b.lane && a.heldSince.Equal(b.heldSince) && a.releasedAt.Equal(b.releasedAt) &&
		a.token == b.token && bytes.Equal(a.fields, b.fields)
}

// TestLaneRecordCompactIsSmaller: the compact form of the benchmark's held
// intent is less than half its headers form's header bytes.
func TestLaneRecordCompactIsSmaller(t *testing.T) {
	tc := heldCases(t)[0]
	hb := newHeaderBuilder("v1", "2026-11-30T00:00:00Z-abcdef")
	size := func(h []kafka.Header) (n int) {
		for _, x := range h {
			n += len(x.Key) + len(x.Value) + 2
		}
		return n
	}
	full, compact := size(hb.heldHeaders(tc.m, tc.e)), size(hb.compactHeaders(tc.m, tc.e))
	if compact*2 > full {
		t.Errorf("compact headers %d bytes against %d", compact, full)
	}
}

// TestLaneRecordForgedHeld: a capper-held cut at every length, of another
// version, or random bytes is dead-lettered naming it (never a panic), and
// the gate neither stamps nor dates a record it cannot read.
func TestLaneRecordForgedHeld(t *testing.T) {
	w := &Worker{}
	tc := heldCases(t)[2]
	v := []byte(findHeader(laneRecord(newHeaderBuilder("", ""), tc.m, tc.e, true).Headers, HeaderHeld))
	now := time.Now()
	read := func(b []byte) (*kafka.Message, *entry, bool) {
		m := &kafka.Message{Value: tc.m.Value, Headers: []kafka.Header{{Key: HeaderHeld, Value: b}}}
		e := &entry{}
		ok := w.readLane(m, e, now)
		w.LaneFree(m, now)
		return m, e, ok
	}
	for n := range len(v) {
		for _, b := range [][]byte{v[:n], append([]byte{2}, v[1:]...)} {
			m, e, ok := read(b)
			if ok || e.invalid == nil || e.invalid.Field != "header "+HeaderHeld {
				t.Errorf("capper-held %x (%d of %d bytes): read %v, error %v", b, len(b), len(v), ok, e.invalid)
			}
			if !HeldSince(m).IsZero() {
				t.Errorf("capper-held %x: dated %v", b, HeldSince(m))
			}
			if len(b) > 0 && b[0] != heldVersion && stampHeld(m, now) {
				t.Errorf("capper-held %x of another version stamped", b)
			}
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		b := make([]byte, r.IntN(40))
		for i := range b {
			b[i] = byte(r.UintN(256))
		}
		if len(b) > 0 {
			b[0] = heldVersion
		}
		if _, e, ok := read(b); !ok && e.invalid.Field != "header "+HeaderHeld {
			t.Fatalf("capper-held %x: error %v", b, e.invalid)
		}
	}
	if _, _, ok := read(v); !ok {
		t.Fatal("the whole capper-held unreadable")
	}
}

// BenchmarkLaneRecord: what a worker does with a held intent's lane
// record besides the Kafka room's encoding and decoding (BenchmarkDecode
// there): its headers built, the gate's stamp, LaneFree and readLane, in
// each form, per record, with compact's ratio to headers in the same run.
func BenchmarkLaneRecord(b *testing.B) {
	tc := heldCases(b)[0]
	w := &Worker{}
	now := tc.e.held.since.Add(time.Second)
	stamp := []byte(now.Format(TimeLayout))
	var ns [2]float64
	for i, compact := range []bool{false, true} {
		b.Run(map[bool]string{false: "headers", true: "compact"}[compact], func(b *testing.B) {
			hb := newHeaderBuilder("v1", "2026-11-30T00:00:00Z-abcdef")
			// As read back: the records' own header arrays and bytes.
			back := laneRecord(hb, tc.m, tc.e, compact)
			var e entry
			b.ReportAllocs()
			for n := 0; b.Loop(); n++ {
				if n%1000 == 0 {
					hb.reset("v1", "2026-11-30T00:00:00Z-abcdef")
				}
				if compact {
					_ = hb.compactHeaders(tc.m, tc.e)
					binary.BigEndian.PutUint64(findHeaderBytes(back, HeaderHeld)[1:9], 0)
					stampHeld(back, now)
				} else {
					_ = hb.heldHeaders(tc.m, tc.e)
					setEmpty(back, HeaderReleasedAt)
					stampInPlace(back, HeaderReleasedAt, stamp)
				}
				w.LaneFree(back, now)
				e = entry{}
				if !w.readLane(back, &e, now) {
					b.Fatal(e.invalid)
				}
			}
			ns[i] = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
		})
	}
	if ns[0] > 0 && ns[1] > 0 {
		b.Logf("compact %.0f ns against headers %.0f ns per record: %.2fx", ns[1], ns[0], ns[1]/ns[0])
	}
}

func findHeaderBytes(m *kafka.Message, key string) []byte {
	for _, x := range m.Headers {
		if x.Key == key {
			return x.Value
		}
	}
	return nil
}

// setEmpty empties key's value (the record as held, before its stamp).
func setEmpty(m *kafka.Message, key string) {
	for i := range m.Headers {
		if m.Headers[i].Key == key {
			m.Headers[i].Value = m.Headers[i].Value[:0]
		}
	}
}
