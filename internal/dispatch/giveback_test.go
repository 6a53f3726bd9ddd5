package dispatch

import (
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capper-dev/capper/internal/capping"
)

// TestMayHaveRun: every failed call may have been run, a refused dial or a
// pool timeout included (the last of go-redis' tries of a call).
func TestMayHaveRun(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	_, dialErr := net.DialTimeout("tcp", addr, time.Second)
	if dialErr == nil {
		t.Fatal("dialed a closed port")
	}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("decide: %w", dialErr), true},
		{fmt.Errorf("decide: %w", redis.ErrPoolTimeout), true},
		{fmt.Errorf("decide: %w", capping.ErrLate), true},
		{fmt.Errorf("decide: %w", &net.OpError{Op: "read", Net: "tcp", Err: errors.New("i/o timeout")}), true},
		{errors.New("decide: connection reset by peer"), true},
	} {
		if got := mayHaveRun(c.err); got != c.want {
			t.Errorf("mayHaveRun(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
