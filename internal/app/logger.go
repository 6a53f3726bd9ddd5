package app

// Process-wide plumbing: the slog logger, go-redis' logger, GC tuning.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"

	"github.com/capper-dev/capper/internal/config"
)

// NewLogger returns the process logger: JSON (or text) at the configured
// level. User ids and payloads are only ever logged at debug.
func NewLogger(w io.Writer, c config.Log) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.Level)); err != nil {
		return nil, fmt.Errorf("log.level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "text" {
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return slog.New(slog.NewJSONHandler(w, opts)), nil
}

// RedisLogger adapts l to go-redis' logger, which otherwise prints its
// connection-pool messages as plain text on stderr, outside the JSON log.
func RedisLogger(l *slog.Logger) interface {
	Printf(ctx context.Context, format string, v ...any)
} {
	return redisLogger{l}
}

type redisLogger struct{ l *slog.Logger }

func (r redisLogger) Printf(ctx context.Context, format string, v ...any) {
	r.l.WarnContext(ctx, fmt.Sprintf(format, v...), "component", "go-redis")
}

// TuneGC makes GOGC=200 the default of the process. A worker's live heap is
// small (the snapshot and two batches) and its allocation rate high, so with
// Go's default of 100 it spends about a fifth of its CPU in the garbage
// collector; 200 cuts that by about a third for a few MiB of heap. GOGC in
// the environment wins (and GOMEMLIMIT still bounds the heap).
func TuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(200)
	}
}
