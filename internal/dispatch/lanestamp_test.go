package dispatch

import (
	"encoding/binary"
	"slices"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/kafka"
)

// TestStampReleased: the gate's Stamp writes a release time in place into
// a compact lane record's capper-held and a headers-form record's empty
// capper-released-at, and adds capper-released-at to a copy of the
// headers of a record held without that placeholder (an earlier
// version's), leaving its own array as it was; HeldSince reads both forms.
func TestStampReleased(t *testing.T) {
	tc := heldCases(t)[0]
	hb := newHeaderBuilder("v1", "p1")
	at := tc.e.held.since.Add(90 * time.Second)
	compact := laneRecord(hb, tc.m, tc.e, true)
	headers := laneRecord(hb, tc.m, tc.e, false)
	old := laneRecord(hb, tc.m, tc.e, false)
	old.Headers = slices.DeleteFunc(old.Headers, func(h kafka.Header) bool { return h.Key == HeaderReleasedAt })
	oldOwn := slices.Clone(old.Headers)
	arrays := []*kafka.Header{&compact.Headers[0], &headers.Headers[0], &old.Headers[0]}
	msgs := []kafka.Message{*compact, *headers, *old}
	StampReleased(msgs, at)

	if &msgs[0].Headers[0] != arrays[0] || &msgs[1].Headers[0] != arrays[1] {
		t.Error("a record with a place for its release time was stamped in a copy of its headers")
	}
	if ms := int64(binary.BigEndian.Uint64(heldOf(&msgs[0])[1:9])); ms != at.UnixMilli() {
		t.Errorf("compact: capper-held says released at %d, want %d", ms, at.UnixMilli())
	}
	want := at.UTC().Format(TimeLayout)
	if got := findHeader(msgs[1].Headers, HeaderReleasedAt); got != want {
		t.Errorf("headers: capper-released-at %q, want %q", got, want)
	}
	if &msgs[2].Headers[0] == arrays[2] || len(msgs[2].Headers) != len(oldOwn)+1 || findHeader(msgs[2].Headers, HeaderReleasedAt) != want {
		t.Errorf("held without a placeholder: headers %v, want a copy with capper-released-at %q", msgs[2].Headers, want)
	}
	if !slices.EqualFunc(old.Headers, oldOwn, func(a, b kafka.Header) bool { return a.Key == b.Key && string(a.Value) == string(b.Value) }) {
		t.Errorf("held without a placeholder: its own headers changed to %v", old.Headers)
	}
	for i := range msgs {
		if got := HeldSince(&msgs[i]); !got.Equal(tc.e.held.since) {
			t.Errorf("record %d: HeldSince %v, want %v", i, got, tc.e.held.since)
		}
	}
	if got := HeldSince(&kafka.Message{Headers: []kafka.Header{{Key: HeaderHeldSince, Value: []byte("yesterday")}}}); !got.IsZero() {
		t.Errorf("an unreadable capper-held-since: HeldSince %v, want zero", got)
	}
}
