package kafka

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
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
}
