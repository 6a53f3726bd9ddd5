package dispatch

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/kafka"
)

// spanIntents are held intents of every shape the decoder reads: escapes,
// spaces, nested values, every field, numbers as strings.
var spanIntents = []struct{ key, value string }{
	{"4242", `{"id":"blast-4242","user_id":4242,"campaign_id":"blast","channel":"push","category":"marketing","priority":50}`},
	{"1", `{"id":"x-\ud800","user_id":1,"campaign_id":"\u0063","channel":"p\u0075sh"}`},
	{"18446744073709551615", `{"id":"c2","user_id":"18446744073709551615","campaign_id":"c","channel":"sms","category":"transactional"}`},
	{"1", `{"id":"x","user_id":1,"campaign_id":"c","channel":"push","tags":["caf\u00e9","a\/b","\"q\""],"time_zone":"Asia\/Tokyo"}`},
	{"1", "{\"id\":\"x\",\"user_id\":1,\"campaign_id\":\"c\",\"channel\":\"push\",\"tags\" : [ \"a\" ,\n\t\"b\" ] }"},
	{"1", `{"id":"x","user_id":1,"campaign_id":"c","x":[[1,[2]],{"a":[3]}],"tags":["a"],"channel":"push","payload":{"tags":[1,2],"priority":"urgent"},"y":[]}`},
	{"7", `{"payload":{"template":"spring-1","vars":{"name":"Ana"}},"route":"fcm","send_by":"2026-12-01T10:00:00Z","created_at":"2026-11-21T16:00:00.5+08:00",` +
		`"capping":"bypass","time_zone":"Asia/Singapore","priority":"high","tags":null,"category":"","channel":"email","campaign_id":"` + strings.Repeat("é", 100) + `","user_id":7,"id":"id with spaces"}`},
	{"8", `{"id":"x","user_id":8,"campaign_id":"c","channel":"push","route":null,"priority":"90","capping":"bypass-uncounted","tags":[]}`},
}

// intentString prints every field of an intent, its zone by name.
func intentString(in Intent, err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	zone := zoneName(in.TimeZone)
	in.TimeZone = nil
	return fmt.Sprintf("%+v zone %q created %d send-by %d", in, zone, in.CreatedAt.UnixNano(), in.SendBy.UnixNano())
}

// TestDecodeHeldAsDecode: a held intent's capper-fields give its release
// the intent Decode gives, field for field; a header that does not fit its
// value (another value, cut short, another version, out of bounds) is
// passed over for Decode.
func TestDecodeHeldAsDecode(t *testing.T) {
	d := testDecoder(t, 0)
	for i, tc := range spanIntents {
		key, value := []byte(tc.key), []byte(tc.value)
		var f fields
		want, err := d.decodeInto(key, value, &f)
		if err != nil {
			t.Fatalf("intent %d: %v", i, err)
		}
		s := encodeSpans(value, &f)
		if s.n == 0 {
			t.Fatalf("intent %d: no capper-fields", i)
		}
		spans := s.b[:s.n]
		if got := intentString(d.decodeHeld(key, value, spans, &f)); got != intentString(want, nil) {
			t.Fatalf("intent %d from its capper-fields:\n got %s\nwant %s", i, got, intentString(want, nil))
		}
		if !f.fromSpans(value, spans) {
			t.Fatalf("intent %d: its own capper-fields do not fit it", i)
		}
		// The record's own bytes only: a copy's fields are not its slices.
		if other := encodeSpans(slices.Clone(value), &f); other.n != 0 {
			t.Fatalf("intent %d: capper-fields of fields that are not slices of the value", i)
		}
		for name, bad := range map[string]struct{ value, spans []byte }{
			// Another intent of the same length: the CRC tells.
			"another value": {[]byte(strings.Replace(tc.value, `"user_id":`, `"user_id" `, 1)), spans},
			"cut short":     {value, spans[:len(spans)-1]},
			"one more byte": {value, append(slices.Clone(spans), 0)},
			"version 2":     {value, append([]byte{2}, spans[1:]...)},
			"out of bounds": {value[:lastEnd(value, &f)-1], withCRC(spans, value[:lastEnd(value, &f)-1])},
			"no CRC":        {value, spans[:3]},
		} {
			var g fields
			got := intentString(d.decodeHeld(key, bad.value, bad.spans, &g))
			if want := intentString(d.Decode(key, bad.value)); got != want {
				t.Errorf("intent %d, %s:\n got %s\nwant %s (Decode's)", i, name, got, want)
			}
		}
	}
}

// lastEnd is where the last of f's fields ends in value.
func lastEnd(value []byte, f *fields) int {
	end := 0
	for _, slot := range f.intentSlots() {
		if raw := *slot; raw != nil {
			end = max(end, cap(value)-cap(raw)+len(raw))
		}
	}
	return end
}

// withCRC is spans with value's CRC.
func withCRC(spans, value []byte) []byte {
	s := slices.Clone(spans)
	binary.BigEndian.PutUint32(s[1:], crc32.Checksum(value, castagnoli()))
	return s
}

// TestDecodeHeldVocabularyNow: a released intent is checked against the
// channels in force at its release, as Decode would check it.
func TestDecodeHeldVocabularyNow(t *testing.T) {
	d := testDecoder(t, 0)
	key, value := []byte("1"), []byte(`{"id":"x","user_id":1,"campaign_id":"c","channel":"sms"}`)
	var f fields
	if _, err := d.decodeInto(key, value, &f); err != nil {
		t.Fatal(err)
	}
	s := encodeSpans(value, &f)
	if err := d.SetVocabulary([]string{"push"}, testCategories, "marketing"); err != nil {
		t.Fatal(err)
	}
	_, err := d.decodeHeld(key, value, s.b[:s.n], &f)
	if want := intentString(d.Decode(key, value)); intentString(Intent{}, err) != want || err == nil {
		t.Fatalf("got %v, want %s", err, want)
	}
}

// TestDecodeHeldForgedFields: a capper-fields header written by someone
// else (any offsets, with the value's CRC) never panics the worker; what
// it picks is read as fields are (checked, or an error naming one).
func TestDecodeHeldForgedFields(t *testing.T) {
	d := testDecoder(t, 0)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range spanIntents {
		key, value := []byte(tc.key), []byte(tc.value)
		for range 5000 {
			b := []byte{spansVersion}
			b = binary.BigEndian.AppendUint32(b, crc32.Checksum(value, castagnoli()))
			for range intentFields {
				if rng.IntN(3) == 0 {
					b = append(b, 0)
					continue
				}
				at := rng.IntN(len(value))
				b = binary.AppendUvarint(b, uint64(at)+1)
				b = binary.AppendUvarint(b, uint64(1+rng.IntN(len(value)-at)))
			}
			var f fields
			_, _ = d.decodeHeld(key, value, b, &f) // must not panic
		}
	}
}

// BenchmarkDecodeHeld: a released lane record's intent from its
// capper-fields against Decode (the peer: what a release cost before),
// BenchmarkPacing's blast intent.
func BenchmarkDecodeHeld(b *testing.B) {
	d := testDecoder(b, 0)
	key, value := []byte(spanIntents[0].key), []byte(spanIntents[0].value)
	var f fields
	if _, err := d.decodeInto(key, value, &f); err != nil {
		b.Fatal(err)
	}
	s := encodeSpans(value, &f)
	spans := s.b[:s.n]
	var ns [2]float64
	for i, name := range []string{"decode", "fields"} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if i == 0 {
					_, err = d.Decode(key, value)
				} else {
					_, err = d.decodeHeld(key, value, spans, &f)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			ns[i] = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
		})
	}
	if ns[0] > 0 {
		b.Logf("from capper-fields %.0f ns against Decode %.0f ns: %.2fx (%d-byte header)", ns[1], ns[0], ns[1]/ns[0], len(spans))
	}
}

// TestReleaseReadsItsFields: a released lane record's intent is read from
// its capper-fields (here pointing campaign_id at another string of the
// value, with the value's CRC: what only the header can say), and one
// without the header from its JSON.
func TestReleaseReadsItsFields(t *testing.T) {
	w := &Worker{}
	w.o.Decoder = testDecoder(t, 0)
	value := []byte(`{"id":"x","user_id":1,"campaign_id":"held","channel":"push","note":"other"}`)
	var f fields
	if _, err := w.o.Decoder.decodeInto([]byte("1"), value, &f); err != nil {
		t.Fatal(err)
	}
	at := strings.Index(string(value), `"other"`)
	f.campaignID = value[at : at+len(`"other"`)]
	s := encodeSpans(value, &f)
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	held := kafka.Header{Key: HeaderHeldSince, Value: now.AppendFormat(nil, TimeLayout)}
	for _, tc := range []struct {
		headers []kafka.Header
		want    string
	}{
		{[]kafka.Header{held, {Key: HeaderFields, Value: s.b[:s.n]}}, "other"},
		{[]kafka.Header{held}, "held"},
	} {
		m, e := &kafka.Message{Key: []byte("1"), Value: value, Headers: tc.headers}, &entry{}
		if !w.readLane(m, e, now) {
			t.Fatalf("lane record unreadable: %v", e.invalid)
		}
		in, err := w.decodeIntent(m, e, &f)
		if err != nil || in.CampaignID != tc.want {
			t.Errorf("released with %d headers: campaign %q (%v), want %q", len(tc.headers), in.CampaignID, err, tc.want)
		}
	}
}
