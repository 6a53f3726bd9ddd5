package userlimits

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/capping"
	capkafka "github.com/capper-dev/capper/internal/kafka"
)

// TestApplied: Applied waits while records written before it was called
// are not applied (no applier runs), returns once the applier's group
// committed them, and at once on an empty topic.
func TestApplied(t *testing.T) {
	e := newEnv(t)
	admin, err := capkafka.NewAdmin(e.kopts)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	empty, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := Applied(empty, admin, group, tUsers, 20*time.Millisecond); err != nil {
		t.Fatalf("an empty topic: %v", err)
	}
	fewer := capping.UserLimits{Tier: "fewer"}
	for uid := uint64(1); uid <= 8; uid++ { // on several partitions
		e.write(Record{UserID: uid, Limits: fewer})
	}
	short, cancel2 := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel2()
	if err := Applied(short, admin, group, tUsers, 20*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("records written, no applier: %v, want the wait to run out", err)
	}
	e.start()
	long, cancel3 := context.WithTimeout(ctx, 30*time.Second)
	defer cancel3()
	if err := Applied(long, admin, group, tUsers, 20*time.Millisecond); err != nil {
		t.Fatalf("with the applier: %v", err)
	}
	for uid := uint64(1); uid <= 8; uid++ {
		if got := e.limits(uid); got.Tier != "fewer" {
			t.Fatalf("Applied returned, user %d's limits in Redis: %+v", uid, got)
		}
	}
}
