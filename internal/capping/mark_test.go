package capping

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/testenv"
)

// TestEarlierMarkIsRead: a bucket an earlier version wrote (x in decimal,
// y in a field of its own) is read by this version's decide script as
// "sweep": the next write drops the records no limit looks at any more and
// the old y field, keeps x, and leaves one mark of this version with the
// oldest record's time as y. The users' limits script reads both marks.
func TestEarlierMarkIsRead(t *testing.T) {
	c := testenv.StartRedis(t, testenv.RedisOptions{}).Client()
	e := newEngine(t, c, Options{Rules: userRules()})
	ctx := context.Background()
	now := time.Now().Truncate(time.Second)
	decide := func(uid uint64, at time.Time) {
		decideUser(t, e, Request{UserID: uid, Segment: "new", IntentID: fmt.Sprint("i", uid), Channel: "push", Category: "marketing", At: at})
	}
	stale, kept := now.Add(-60*24*time.Hour), now.Add(-time.Hour)
	decide(33, kept)
	decide(32, stale) // a worker's clock far behind: no sweep, the mark stays
	key := e.keys.bucket(32)
	x, y, ok := readMark(c.HGet(ctx, key, xField).Val())
	if !ok || y != kept.Unix() || x <= kept.Unix() {
		t.Fatalf("mark x %d y %d (%t), want y %d and x after it", x, y, ok, kept.Unix())
	}
	// As an earlier version leaves it, y at user 32's write.
	if err := c.HSet(ctx, key, xField, fmt.Sprint(x), yField, "\x00"+string(be32(stale.Unix()))).Err(); err != nil {
		t.Fatal(err)
	}
	decide(34, now)
	if c.HExists(ctx, key, yField).Val() || c.HExists(ctx, key, field(32)).Val() || !c.HExists(ctx, key, field(33)).Val() {
		t.Fatalf("after a write: fields %v, want y and user 32's stale record gone, user 33's kept", c.HKeys(ctx, key).Val())
	}
	x2, y2, ok := readMark(c.HGet(ctx, key, xField).Val())
	if !ok || x2 != x || y2 != kept.Unix() {
		t.Fatalf("mark x %d y %d (%t), want x %d y %d", x2, y2, ok, x, kept.Unix())
	}
	// The users' limits script keeps y, and reads an earlier mark's x.
	until := now.Add(100 * 24 * time.Hour)
	setLimits(t, e, 35, UserLimits{SnoozeUntil: until})
	if x3, y3, ok := readMark(c.HGet(ctx, key, xField).Val()); !ok || x3 != until.Unix() || y3 != kept.Unix() {
		t.Fatalf("after a snooze: mark x %d y %d (%t), want x %d y %d", x3, y3, ok, until.Unix(), kept.Unix())
	}
	if err := c.HSet(ctx, key, xField, fmt.Sprint(until.Unix()+5)).Err(); err != nil {
		t.Fatal(err)
	}
	setLimits(t, e, 36, UserLimits{SnoozeUntil: now.Add(time.Hour)})
	if x4, y4, ok := readMark(c.HGet(ctx, key, xField).Val()); !ok || x4 != until.Unix()+5 || y4 != 0 {
		t.Fatalf("after a snooze on an earlier mark: x %d y %d (%t), want x %d y 0 (the next write sweeps)", x4, y4, ok, until.Unix()+5)
	}
}

func be32(n int64) []byte { return []byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)} }
