package app

// The Redis warning: one WARN line, naming redis.addrs, as soon as the
// engine sees Redis fail (a connection refused, a call that failed, calls
// waiting past redis.read_timeout: Engine.Ready), then at most one line per
// redisWarnEvery while it lasts, with a count of the failures left out; an
// INFO line once Redis answers again. go-redis' own messages are
// rate-limited per kind (RedisLogger) and the worker's retries log later:
// without this line a freeze of a few seconds left nothing in the log.

import (
	"context"
	"log/slog"
	"time"
)

// redisWarnEvery is the most often the warning repeats.
const redisWarnEvery = 10 * time.Second

// redisCheckEvery is how often the engine's view is read.
const redisCheckEvery = 200 * time.Millisecond

// redisWarner turns Engine.Ready's answers into log lines.
type redisWarner struct {
	addrs []string
	log   *slog.Logger
	now   func() time.Time

	failing bool      // the last answer was a failure
	since   time.Time // when the current failure began
	warned  bool      // the current failure has been logged
	last    time.Time // the last warning
	left    int       // failures since the last warning that were not logged
}

func newRedisWarner(addrs []string, log *slog.Logger) *redisWarner {
	return &redisWarner{addrs: addrs, log: log, now: time.Now}
}

// run reads ready until ctx ends.
func (w *redisWarner) run(ctx context.Context, ready func() error) error {
	t := time.NewTicker(redisCheckEvery)
	defer t.Stop()
	for {
		w.observe(ready())
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// observe takes one answer of Engine.Ready.
func (w *redisWarner) observe(err error) {
	now := w.now()
	switch {
	case err != nil && !w.failing:
		w.failing, w.since, w.warned = true, now, false
		if !w.last.IsZero() && now.Sub(w.last) < redisWarnEvery {
			w.left++
			return
		}
		w.warn(now, "Redis cannot decide (check redis.addrs and the servers)", err)
	case err != nil:
		if now.Sub(w.last) >= redisWarnEvery {
			w.warn(now, "Redis still cannot decide", err)
		}
	case w.failing:
		w.failing = false
		if w.warned {
			w.log.Info("Redis answers again", "redis.addrs", w.addrs, "after", now.Sub(w.since).Round(time.Millisecond))
		}
	}
}

func (w *redisWarner) warn(now time.Time, msg string, err error) {
	args := []any{"redis.addrs", w.addrs, "error", err, "for", now.Sub(w.since).Round(time.Millisecond)}
	if w.left > 0 {
		args = append(args, "suppressed", w.left, "every", redisWarnEvery.String())
	}
	w.log.Warn(msg, args...)
	w.last, w.left, w.warned = now, 0, true
}
