package capping

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// LimitState is one limit of a user as stored in Redis at some time.
type LimitState struct {
	Limit Limit
	// Count is the number of intents in the window (sliding_window: the
	// estimate rounded up). A channel limit counts its channel.
	Count int64
	// NextFree is when the limit admits one more intent: the time asked
	// about if Count < Max, later if the window is full, and the zero Time if
	// Max is 0 (never).
	NextFree time.Time
}

// Inspect reports the state of every limit of the user's policy at time at.
// It only reads: no writes and no eviction.
func (e *Engine) Inspect(ctx context.Context, userID uint64, segment string, at time.Time) ([]LimitState, error) {
	pol, ok := e.rules.policy(segment)
	if !ok {
		return nil, fmt.Errorf("inspect user %d: unknown segment %q", userID, segment)
	}
	if at.IsZero() {
		return nil, fmt.Errorf("inspect user %d: no time", userID)
	}
	var (
		st  []LimitState
		err error
	)
	if e.algo == SlidingLog {
		st, err = e.inspectLog(ctx, userID, pol, at)
	} else {
		st, err = e.inspectWindow(ctx, userID, pol, at)
	}
	if err != nil {
		return nil, fmt.Errorf("inspect user %d: %w", userID, err)
	}
	return st, nil
}

func (e *Engine) inspectLog(ctx context.Context, uid uint64, pol Policy, at time.Time) ([]LimitState, error) {
	now := at.UnixMilli()
	base := e.userKey(uid)
	key := func(l Limit) string {
		if l.Channel == "" {
			return base
		}
		return base + ":" + l.Channel
	}
	lowest := func(l Limit) string { return strconv.FormatInt(now-l.Window.Milliseconds()+1, 10) }
	pipe := e.client.Pipeline()
	counts := make([]*redis.IntCmd, len(pol.Limits))
	for i, l := range pol.Limits {
		counts[i] = pipe.ZCount(ctx, key(l), lowest(l), "+inf")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	st := make([]LimitState, len(pol.Limits))
	oldest := make([]*redis.ZSliceCmd, len(pol.Limits))
	pipe = e.client.Pipeline()
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

func (e *Engine) inspectWindow(ctx context.Context, uid uint64, pol Policy, at time.Time) ([]LimitState, error) {
	now := at.UnixMilli()
	base := e.userKey(uid)
	pipe := e.client.Pipeline()
	hashes := map[string]*redis.MapStringStringCmd{}
	for _, l := range pol.Limits {
		k := base + windowSuffix(l.Window.Milliseconds(), l.Channel)
		if hashes[k] == nil {
			hashes[k] = pipe.HGetAll(ctx, k)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	st := make([]LimitState, len(pol.Limits))
	for i, l := range pol.Limits {
		w := l.Window.Milliseconds()
		k := base + windowSuffix(w, l.Channel)
		counters := map[int64]int64{}
		for f, v := range hashes[k].Val() {
			idx, err1 := strconv.ParseInt(f, 10, 64)
			c, err2 := strconv.ParseInt(v, 10, 64)
			if err1 != nil || err2 != nil {
				continue // "l" and "n"
			}
			counters[idx] = c
		}
		s := subInterval(w, e.subs)
		st[i] = LimitState{Limit: l, Count: windowCount(windowEstimate(counters, now, w, s), s), NextFree: at}
		switch {
		case l.Max == 0:
			st[i].NextFree = time.Time{}
		case st[i].Count >= int64(l.Max):
			st[i].NextFree = time.UnixMilli(windowNextFree(counters, now, w, s, int64(l.Max)))
		}
	}
	return st, nil
}
