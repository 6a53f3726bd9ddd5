package kafka

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

// TestEnded: a request cut by its context's deadline fails with the
// connection's timeout; ended makes it the context's error, and leaves
// an error alone while the context lives.
func TestEnded(t *testing.T) {
	netErr := &net.OpError{Op: "write", Net: "tcp", Err: os.ErrDeadlineExceeded}
	live := context.Background()
	if err := ended(live, netErr); err != error(netErr) {
		t.Fatalf("a live context: %v, want the error itself", err)
	}
	done, cancel := context.WithTimeout(live, 0)
	defer cancel()
	<-done.Done()
	err := ended(done, netErr)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("an expired context: %v, want context.DeadlineExceeded", err)
	}
	if want := "context deadline exceeded (write tcp: i/o timeout)"; err.Error() != want {
		t.Fatalf("an expired context: %q, want %q", err, want)
	}
	if err := ended(done, done.Err()); err != done.Err() {
		t.Fatalf("the context's own error: %v, want it unwrapped", err)
	}
	// The connection's timeout seen before ctx's timer cancelled it.
	if err := ended(passed{live}, netErr); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a context past its deadline, not yet cancelled: %v, want context.DeadlineExceeded", err)
	}
}

// passed is a context whose deadline has passed and whose timer has not
// cancelled it yet.
type passed struct{ context.Context }

func (passed) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }
