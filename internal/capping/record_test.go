package capping

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capper-dev/capper/internal/testenv"
)

func TestRecordRoundTrip(t *testing.T) {
	rec := record{
		idem: []idemEntry{{digest: [5]byte{1, 2, 3, 4, 5}, at: 1795276800}, {digest: [5]byte{9, 9, 9, 9, 9}, at: 1795276801}},
		sections: []section{
			{id: 0x12345, times: []int64{1795276800, 1795276801}},
			{id: 0x54321 | perCampaignFlag, campaign: [3]byte{7, 8, 9}, times: []int64{1795276801}},
			{id: 0x1, times: slices.Repeat([]int64{1795276700}, 300)}, // a two-byte count
			{id: 0x2, trimmed: true, times: []int64{1795276700, 1795276801}},
		},
	}
	b := rec.encode()
	got, err := decodeRecord(b)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.idem, rec.idem) || len(got.sections) != 4 || !slices.Equal(got.sections[2].times, rec.sections[2].times) ||
		got.sections[1].campaign != rec.sections[1].campaign || !bytes.Equal(got.encode(), b) {
		t.Fatalf("round trip: %+v", got)
	}
	// The trimmed section: its count holds the mark, a time 0 first.
	if tr := got.sections[3]; !tr.trimmed || !slices.Equal(tr.times, rec.sections[3].times) || got.sections[0].trimmed ||
		!bytes.Contains(b, []byte{0, 0, 2, 3, 0, 0, 0, 0}) { // id 000002, 3 times
		t.Fatalf("trimmed section: %+v in %x", tr, b)
	}
	if got.newest() != 1795276801 {
		t.Fatalf("newest %d", got.newest())
	}
	for cut := 1; cut < len(b); cut++ {
		if _, err := decodeRecord(b[:cut]); err == nil && cut < len(b) && !validPrefix(b[:cut]) {
			t.Fatalf("a record cut at %d of %d bytes decoded without error", cut, len(b))
		}
	}
}

// validPrefix: a cut that falls exactly between two sections is a valid
// (shorter) record.
func validPrefix(b []byte) bool {
	r, err := decodeRecord(b)
	return err == nil && bytes.Equal(r.encode(), b)
}

func FuzzDecodeRecord(f *testing.F) {
	f.Add([]byte{0})
	f.Add(record{idem: []idemEntry{{at: 5}}, sections: []section{{id: 3, times: []int64{1, 2}}}}.encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeRecord(b)
		if err == nil && !bytes.Equal(r.encode(), b) && !(len(b) >= 2 && b[0] >= 0x80) {
			// A valid record encodes back to itself (except a two-byte
			// count written where one byte would do).
			t.Fatalf("%x decodes to %+v, which encodes to %x", b, r, r.encode())
		}
	})
}

// stored returns a user's decoded record (empty when there is none).
func stored(t *testing.T, c redis.UniversalClient, e *Engine, uid uint64) (record, int) {
	t.Helper()
	raw, err := c.HGet(context.Background(), e.keys.bucket(uid), field(uid)).Bytes()
	if errors.Is(err, redis.Nil) {
		return record{}, 0
	}
	if err != nil {
		t.Fatal(err)
	}
	rec, err := decodeRecord(raw)
	if err != nil {
		t.Fatal(err)
	}
	return rec, len(raw)
}

// TestStorageBounded: only what a limit counts is kept, and only as long as
// it counts. 200 emails under an sms-only policy keep nothing but their
// idempotency entries, which leave after the idempotency window; a section
// never holds more sends than its largest max.
func TestStorageBounded(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	c := r.Client()
	rules := testOptions(Options{}).Rules
	rules.Segments, rules.Default = nil, Policy{Limits: []Limit{
		{Name: "sms-week", Window: 7 * day, Max: 2, Where: Where{Channels: []string{"sms"}}},
		{Name: "sms-day", Window: day, Max: 1, Where: Where{Channels: []string{"sms"}}},
	}}
	e := newEngine(t, c, Options{Rules: rules, IdempotencyWindow: time.Hour})
	ctx := context.Background()
	at := T0
	for i := range 200 {
		at = at.Add(time.Minute)
		ch := "email"
		if i%50 == 0 {
			ch = "sms"
		}
		d, err := e.Decide(ctx, []Request{{UserID: 1, IntentID: fmt.Sprint("i", i), Channel: ch, Category: "marketing", At: at}})
		if err != nil || d[0].Err != nil {
			t.Fatal(err, d[0].Err)
		}
	}
	// The last hour holds 61 intents, one of them an sms capped by sms-day
	// (the first sms, 150 minutes earlier, is the only one allowed).
	rec, size := stored(t, c, e, 1)
	if len(rec.idem) != 60 {
		t.Errorf("%d idempotency entries, want the 60 allowed in the last hour", len(rec.idem))
	}
	if len(rec.sections) != 1 || len(rec.sections[0].times) != 1 {
		t.Errorf("sections %+v: want one sms section of the one allowed sms", rec.sections)
	}
	t.Logf("record: %d bytes", size)
	// Hours later, one more email: the old idempotency entries are gone.
	at = at.Add(2 * time.Hour)
	if _, err := e.Decide(ctx, []Request{{UserID: 1, IntentID: "late", Channel: "email", Category: "marketing", At: at}}); err != nil {
		t.Fatal(err)
	}
	if rec, _ = stored(t, c, e, 1); len(rec.idem) != 1 {
		t.Errorf("%d idempotency entries after the window, want 1", len(rec.idem))
	}
	// Eight days later the sms section has left every window: dropped.
	at = at.Add(8 * day)
	if _, err := e.Decide(ctx, []Request{{UserID: 1, IntentID: "later", Channel: "email", Category: "marketing", At: at}}); err != nil {
		t.Fatal(err)
	}
	if rec, _ = stored(t, c, e, 1); len(rec.sections) != 0 {
		t.Errorf("sections %+v kept past every window", rec.sections)
	}
}

// TestStaleUsersLeaveNothing: a user who stops receiving is dropped from
// their bucket by the first later write that finds (in the bucket's y) a
// record may be older than the key life, and a bucket no one writes to
// expires whole: nothing is left after the longest retention plus the
// idempotency window.
func TestStaleUsersLeaveNothing(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	c := r.Client()
	ctx := context.Background()
	e := newEngine(t, c, Options{IdempotencyWindow: time.Hour})
	life := time.Duration(e.set.Load().keyLife) * time.Second
	decide := func(uid uint64, id string, at time.Time) {
		t.Helper()
		d, err := e.Decide(ctx, []Request{{UserID: uid, Segment: "new", IntentID: id, Channel: "push", Category: "marketing", At: at}})
		if err != nil || d[0].Err != nil || d[0].Outcome != Allowed {
			t.Fatalf("%v %+v", err, d[0])
		}
	}
	// Users 0 and 1 share a bucket; 0 stops, 1 goes on.
	decide(0, "a", T0)
	decide(1, "b", T0)
	decide(1, "c", T0.Add(life))
	if _, n := stored(t, c, e, 0); n == 0 {
		t.Fatal("user 0 dropped while a limit may still count its send")
	}
	decide(1, "d", T0.Add(life+25*time.Hour))
	if _, n := stored(t, c, e, 0); n != 0 {
		t.Fatalf("user 0 still holds %d bytes after the key life and a bucket extension", n)
	}
	if _, n := stored(t, c, e, 1); n == 0 {
		t.Fatal("user 1 dropped")
	}
	// The bucket's TTL never exceeds the key life plus the slack.
	ttl, err := c.TTL(ctx, e.keys.bucket(1)).Result()
	if err != nil || ttl <= 0 || ttl > life+time.Hour {
		t.Fatalf("bucket TTL %s (%v), want (0, %s]", ttl, err, life+time.Hour)
	}
}
