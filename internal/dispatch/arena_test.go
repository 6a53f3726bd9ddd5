package dispatch

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/kafka"
)

// TestHeaderBuilderReset: a builder reset for a new batch builds what a
// new builder builds (snapshot, policy, names and times of the new batch,
// nothing of the old), and cuts from the arrays of the batch before
// instead of new ones.
func TestHeaderBuilderReset(t *testing.T) {
	at := time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC)
	batch := func(seg string, n int, first int64) ([]kafka.Message, []entry) {
		msgs, entries := make([]kafka.Message, n), make([]entry, n)
		for i := range msgs {
			msgs[i] = kafka.Message{Topic: "in", Partition: i % 3, Offset: first + int64(i),
				Headers: []kafka.Header{{Key: "trace", Value: []byte(fmt.Sprint(seg, i))}}}
			entries[i] = entry{segment: fmt.Sprint(seg, i%5), decision: capping.Decision{Outcome: capping.Allowed, At: at.Add(time.Duration(i) * time.Millisecond)}}
		}
		return msgs, entries
	}
	build := func(hb *headerBuilder, msgs []kafka.Message, entries []entry) [][]kafka.Header {
		out := make([][]kafka.Header, len(msgs))
		for i := range msgs {
			out[i] = hb.build(&msgs[i], &entries[i])
		}
		return out
	}
	reused := newHeaderBuilder("v1", "p1")
	oldMsgs, oldEntries := batch("old-", 2000, 0) // more than one array of headers and of bytes
	build(reused, oldMsgs, oldEntries)
	arrays := len(reused.spent.headers.used)
	if arrays < 2 || len(reused.spent.arenas.used) < 2 {
		t.Fatalf("the first batch used %d header arrays and %d arenas, want several of each", arrays, len(reused.spent.arenas.used))
	}
	reused.reset("v2", "p2")
	msgs, entries := batch("new-", 3000, 100000)
	got := build(reused, msgs, entries)
	want := build(newHeaderBuilder("v2", "p2"), msgs, entries)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("a reset builder's headers differ from a new builder's:\n got %v\nwant %v", got[0], want[0])
	}
	if len(reused.spent.headers.free) != 0 || len(reused.spent.arenas.free) != 0 {
		t.Fatalf("%d of the first batch's %d header arrays and %d arenas left unused by a larger batch", len(reused.spent.headers.free), arrays, len(reused.spent.arenas.free))
	}
}

// TestPoolReusesClearedArrays: a recycled array is handed out again for a
// request it can hold (cleared: nothing of the batch before), a larger
// request gets a new one, and the pool keeps at most maxFree arrays free.
func TestPoolReusesClearedArrays(t *testing.T) {
	var p pool[kafka.Message]
	a := append(p.get(4), kafka.Message{Value: []byte("old")}, kafka.Message{Value: []byte("old")})
	p.recycle()
	b := p.get(3)
	if cap(b) != cap(a) || &b[:1][0] != &a[0] {
		t.Fatalf("a request for 3 got a new array (cap %d), not the recycled one", cap(b))
	}
	if v := b[:2][1].Value; v != nil {
		t.Fatalf("the recycled array still holds %q", v)
	}
	if c := p.get(8); cap(c) < 8 || len(p.free) != 0 {
		t.Fatalf("a request for 8: cap %d, %d arrays free", cap(c), len(p.free))
	}
	for range 2 * maxFree {
		p.get(1)
	}
	p.recycle()
	if len(p.free) != maxFree || len(p.used) != 0 {
		t.Fatalf("%d arrays free, %d used after recycling %d, want %d and 0", len(p.free), len(p.used), 2*maxFree+2, maxFree)
	}
}
