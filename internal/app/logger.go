package app

// Process-wide plumbing: the slog logger, go-redis' logger, GC tuning.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/capper-dev/capper/internal/cli"
	"github.com/capper-dev/capper/internal/config"
)

// NewLogger returns the process logger: JSON (or text) at the configured
// level, durations as text ("100ms"). User ids and payloads are only ever
// logged at debug.
func NewLogger(w io.Writer, c config.Log) (*slog.Logger, error) {
	l, err := cli.NewLogger(w, c.Level, c.Format)
	if err != nil {
		return nil, fmt.Errorf("log: %w", err)
	}
	return l, nil
}

// RedisLogEvery is how often RedisLogger lets one kind of go-redis message
// through.
const RedisLogEvery = 30 * time.Second

// RedisLogger adapts l to go-redis' logger, which otherwise prints its
// connection-pool messages as plain text on stderr, outside the JSON log.
//
// go-redis repeats some messages for as long as a problem lasts (during a
// Redis outage, "failed to dial" about twice a second per node), so at most
// one message of each kind is logged per every: a repeat within every of the
// last logged one is counted, and the next message of that kind logged
// carries the count as "suppressed" (the repeats since the previous line of
// its kind). A message's kind is its format string (go-redis' are
// constants), or, when the format is only verbs ("%s"), the message with
// its numbers (connection ids, ports) left out. now is the clock (time.Now
// in production).
func RedisLogger(l *slog.Logger, every time.Duration, now func() time.Time) *RedisLog {
	return &RedisLog{l: l, every: every, now: now, kinds: map[string]*redisLogKind{}}
}

// RedisLog is go-redis' logger (see RedisLogger); install it with
// redis.SetLogger.
type RedisLog struct {
	l     *slog.Logger
	every time.Duration
	now   func() time.Time

	mu    sync.Mutex
	kinds map[string]*redisLogKind
}

type redisLogKind struct {
	last       time.Time // when a message of this kind was last logged
	suppressed int       // repeats not logged since
}

// Printf logs one go-redis message, or counts it (see RedisLogger).
func (r *RedisLog) Printf(ctx context.Context, format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	kind := format
	if onlyVerbs(format) {
		kind = withoutDigits(msg)
	}
	at := r.now()
	r.mu.Lock()
	k := r.kinds[kind]
	if k == nil {
		k = &redisLogKind{}
		r.kinds[kind] = k
	} else if at.Sub(k.last) < r.every {
		k.suppressed++
		r.mu.Unlock()
		return
	}
	suppressed := k.suppressed
	k.last, k.suppressed = at, 0
	r.mu.Unlock()
	attrs := []any{"component", "go-redis"}
	if suppressed > 0 {
		attrs = append(attrs, "suppressed", suppressed, "every", r.every)
	}
	r.l.WarnContext(ctx, strings.TrimSpace(msg), attrs...)
}

// onlyVerbs reports whether format has nothing but verbs and spaces ("%s",
// "%v %v"): such a format says nothing about the message's kind.
func onlyVerbs(format string) bool {
	for i := 0; i < len(format); i++ {
		switch c := format[i]; {
		case c == '%':
			i++ // the verb letter; go-redis uses no flags or widths here
		case c == ' ':
		default:
			return false
		}
	}
	return true
}

// withoutDigits replaces every run of digits in s with "#".
func withoutDigits(s string) string {
	var b strings.Builder
	digits := false
	for _, c := range s {
		if c >= '0' && c <= '9' {
			if !digits {
				b.WriteByte('#')
			}
			digits = true
			continue
		}
		digits = false
		b.WriteRune(c)
	}
	return b.String()
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
