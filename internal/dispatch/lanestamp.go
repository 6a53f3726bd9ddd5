package dispatch

// What a lane's gate (pacing.Gate) asks of a lane record, in either form
// (lanerecord.go): when it was held, and its release time stamped on it.
// The gate knows no record form; these are its Held and Stamp.

import (
	"encoding/binary"
	"time"

	"github.com/capper-dev/capper/internal/kafka"
)

// StampReleased stamps lane records released with a token with their
// release time (pacing.Gate's Stamp): a compact one in its capper-held, a
// headers-form one in its empty capper-released-at, both in place (the
// records' bytes and header arrays are the reader's own, one per record).
// A record held by a version before that placeholder gets the header
// added to a copy of its headers (its own array may be shared), the
// copies cut from one array.
func StampReleased(msgs []kafka.Message, at time.Time) {
	var stamp []byte
	var backing []kafka.Header
	for i := range msgs {
		m := &msgs[i]
		if stampHeld(m, at) {
			continue
		}
		if stamp == nil {
			stamp = []byte(at.UTC().Format(kafka.TimeLayout))
		}
		if stampInPlace(m, HeaderReleasedAt, stamp) {
			continue
		}
		if backing == nil {
			size := 0
			for j := i; j < len(msgs); j++ {
				size += len(msgs[j].Headers) + 1
			}
			backing = make([]kafka.Header, 0, size)
		}
		from := len(backing)
		backing = append(append(backing, m.Headers...), kafka.Header{Key: HeaderReleasedAt, Value: stamp})
		m.Headers = backing[from:len(backing):len(backing)]
	}
}

// stampHeld stamps a compact lane record's release time in place and
// reports whether m is one: nothing is copied for it.
func stampHeld(m *kafka.Message, at time.Time) bool {
	v := heldOf(m)
	if len(v) < 9 || v[0] != heldVersion {
		return false
	}
	binary.BigEndian.PutUint64(v[1:9], uint64(at.UnixMilli()))
	return true
}

// stampInPlace sets the value of m's empty header key (its placeholder)
// to stamp, and reports whether m had one.
func stampInPlace(m *kafka.Message, key string, stamp []byte) bool {
	for i := range m.Headers {
		if h := &m.Headers[i]; h.Key == key && len(h.Value) == 0 {
			h.Value = stamp
			return true
		}
	}
	return false
}

// HeldSince is when a lane record was held (pacing.Gate's Held): its
// capper-held's, or its capper-held-since; zero when it has neither or
// they do not parse.
func HeldSince(m *kafka.Message) time.Time {
	if v := heldOf(m); v != nil {
		r, err := parseHeld(v)
		if err != nil {
			return time.Time{}
		}
		return r.since
	}
	for _, h := range m.Headers {
		if h.Key == HeaderHeldSince {
			t, err := parseHeaderTime(h.Value)
			if err != nil {
				return time.Time{}
			}
			return t
		}
	}
	return time.Time{}
}
