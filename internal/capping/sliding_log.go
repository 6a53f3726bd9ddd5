package capping

// sliding_log: the exact algorithm, with sliding_log.lua. This file owns its
// key layout, its arguments and its read-only view (Inspect).

import (
	"context"
	_ "embed"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed sliding_log.lua
var slidingLogSrc string

type slidingLog struct {
	client    redis.UniversalClient
	keys      keys
	src       *script
	retention int64                    // ms: the user log, also the idempotency record
	tracked   map[string]time.Duration // channels some limit caps, and their longest window
}

func newSlidingLog(e *Engine) *slidingLog {
	return &slidingLog{client: e.client, keys: e.keys, src: newScript(slidingLogSrc),
		retention: e.retention, tracked: e.rules.trackedChannels()}
}

func (s *slidingLog) script() *script { return s.src }

// Which log a limit counts (logArgs.limits[i].key).
const (
	logNone    = "0" // a limit of another channel: not evaluated
	logUser    = "1" // KEYS[1], every channel
	logChannel = "2" // KEYS[2], the request's channel
)

// logArgs are sliding_log.lua's ARGV, in its order.
type logArgs struct {
	retention     int64 // ms, of KEYS[1]
	chanRetention int64 // ms, of KEYS[2] (0 without one)
	limits        []logLimit
}

type logLimit struct {
	key    string // logNone, logUser or logChannel
	window int64  // ms
	max    int64
}

// at lays the arguments out for a decision at now: member (left nil), now,
// the eviction bounds and TTLs of both logs, then per limit its log, the
// lowest score inside its window, its max and its window.
func (a *logArgs) at(now int64) []any {
	out := make([]any, 0, 6+4*len(a.limits))
	out = append(out, nil, now, now-a.retention, a.retention, now-a.chanRetention, a.chanRetention)
	for _, l := range a.limits {
		out = append(out, l.key, now-l.window+1, l.max, l.window)
	}
	return out
}

func (s *slidingLog) compile(pol Policy, ch string) *plan {
	a := &logArgs{retention: s.retention}
	p := &plan{limits: pol.Limits, member: 0, args: a.at}
	if ret, ok := s.tracked[ch]; ok {
		// Recorded in the channel's log whatever this policy caps, so that
		// the count is exact when the user moves to a segment that caps it.
		p.suffixes = []string{":" + ch}
		a.chanRetention = ret.Milliseconds()
	}
	for _, l := range pol.Limits {
		k := logNone
		switch {
		case l.Channel == "":
			k = logUser
		case l.Channel == ch:
			k = logChannel
		}
		a.limits = append(a.limits, logLimit{key: k, window: l.Window.Milliseconds(), max: int64(l.Max)})
	}
	return p
}

func (s *slidingLog) inspect(ctx context.Context, uid uint64, pol Policy, at time.Time) ([]LimitState, error) {
	now := at.UnixMilli()
	base := s.keys.user(uid)
	key := func(l Limit) string {
		if l.Channel == "" {
			return base
		}
		return base + ":" + l.Channel
	}
	lowest := func(l Limit) string { return strconv.FormatInt(now-l.Window.Milliseconds()+1, 10) }
	pipe := s.client.Pipeline()
	counts := make([]*redis.IntCmd, len(pol.Limits))
	for i, l := range pol.Limits {
		counts[i] = pipe.ZCount(ctx, key(l), lowest(l), "+inf")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	st := make([]LimitState, len(pol.Limits))
	oldest := make([]*redis.ZSliceCmd, len(pol.Limits))
	pipe = s.client.Pipeline()
	for i, l := range pol.Limits {
		st[i] = LimitState{Limit: l, Count: counts[i].Val(), NextFree: at}
		switch {
		case l.Max == 0:
			st[i].NextFree = time.Time{}
		case st[i].Count >= int64(l.Max):
			// Oldest first, the entry at offset count-max must leave first.
			oldest[i] = pipe.ZRangeByScoreWithScores(ctx, key(l), &redis.ZRangeBy{
				Min: lowest(l), Max: "+inf", Offset: st[i].Count - int64(l.Max), Count: 1})
		}
	}
	if pipe.Len() == 0 {
		return st, nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	for i, c := range oldest {
		if c == nil {
			continue
		}
		z := c.Val()
		if len(z) != 1 {
			return nil, errors.New("log changed while inspecting")
		}
		st[i].NextFree = time.UnixMilli(int64(z[0].Score) + pol.Limits[i].Window.Milliseconds())
	}
	return st, nil
}
