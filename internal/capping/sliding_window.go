package capping

// sliding_window: the approximate algorithm, with sliding_window.lua. This
// file owns its key layout, its arguments, its read-only view (Inspect) and
// the Go side of its arithmetic, which mirrors the script; the tests check
// the script against an independent model.

import (
	"context"
	_ "embed"
	"sort"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed sliding_window.lua
var slidingWindowSrc string

type slidingWindow struct {
	client    redis.UniversalClient
	keys      keys
	src       *script
	retention int64 // ms: the idempotency markers
	subs      int
	hashes    []windowHash // every (window, channel) some policy counts
}

func newSlidingWindow(e *Engine) *slidingWindow {
	return &slidingWindow{client: e.client, keys: e.keys, src: newScript(slidingWindowSrc),
		retention: e.retention, subs: e.subs, hashes: e.rules.windowHashes()}
}

func (s *slidingWindow) script() *script { return s.src }

// windowHash is what one counter hash counts.
type windowHash struct {
	window  int64 // ms
	channel string
}

// windowHashes lists the distinct (window, channel) of every policy, in a
// stable order.
func (r Rules) windowHashes() []windowHash {
	seen := map[windowHash]bool{}
	var hs []windowHash
	for _, p := range r.allPolicies() {
		for _, l := range p.Limits {
			h := windowHash{l.Window.Milliseconds(), l.Channel}
			if !seen[h] {
				seen[h] = true
				hs = append(hs, h)
			}
		}
	}
	sort.Slice(hs, func(i, j int) bool {
		if hs[i].channel != hs[j].channel {
			return hs[i].channel < hs[j].channel
		}
		return hs[i].window < hs[j].window
	})
	return hs
}

// windowSuffix names a counter hash by what it counts (window and channel),
// not by limit name: limits of different segments with the same window and
// channel share it, so counts survive a change of segment.
func windowSuffix(windowMS int64, channel string) string {
	s := ":sw:" + strconv.FormatInt(windowMS, 10)
	if channel != "" {
		s += ":" + channel
	}
	return s
}

// subInterval is the sub-interval length in ms of a window.
func subInterval(windowMS int64, subs int) int64 { return max(windowMS/int64(subs), 1) }

// windowArgs are sliding_window.lua's ARGV, in its order.
type windowArgs struct {
	markerTTL int64           // ms
	hashes    []windowHashArg // one per key after the marker
	limits    []windowLimit
}

type windowHashArg struct{ window, sub int64 } // ms

type windowLimit struct {
	key int64 // index in KEYS of its hash; 0 = a limit of another channel
	max int64
}

// at lays the arguments out for a decision at now: marker TTL, now, the
// number of hashes, window and sub-interval per hash, then key and max per
// limit.
func (a *windowArgs) at(now int64) []any {
	out := make([]any, 0, 3+2*len(a.hashes)+2*len(a.limits))
	out = append(out, a.markerTTL, now, int64(len(a.hashes)))
	for _, h := range a.hashes {
		out = append(out, h.window, h.sub)
	}
	for _, l := range a.limits {
		out = append(out, l.key, l.max)
	}
	return out
}

func (s *slidingWindow) compile(pol Policy, ch string) *plan {
	a := &windowArgs{markerTTL: s.retention}
	p := &plan{limits: pol.Limits, idKey: true, member: -1, args: a.at}
	// Every counter hash that counts this channel is updated, whatever this
	// policy caps, so that counts survive a change of segment.
	keyIdx := map[string]int64{}
	for _, h := range s.hashes {
		if h.channel != "" && h.channel != ch {
			continue
		}
		suffix := windowSuffix(h.window, h.channel)
		p.suffixes = append(p.suffixes, suffix)
		keyIdx[suffix] = int64(len(p.suffixes) + 1) // KEYS[1] is the marker
		a.hashes = append(a.hashes, windowHashArg{h.window, subInterval(h.window, s.subs)})
	}
	for _, l := range pol.Limits {
		var k int64
		if l.Applies(ch) {
			k = keyIdx[windowSuffix(l.Window.Milliseconds(), l.Channel)]
		}
		a.limits = append(a.limits, windowLimit{key: k, max: int64(l.Max)})
	}
	return p
}

func (s *slidingWindow) inspect(ctx context.Context, uid uint64, pol Policy, at time.Time) ([]LimitState, error) {
	now := at.UnixMilli()
	base := s.keys.user(uid)
	pipe := s.client.Pipeline()
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
		sub := subInterval(w, s.subs)
		st[i] = LimitState{Limit: l, Count: windowCount(windowEstimate(counters, now, w, sub), sub), NextFree: at}
		switch {
		case l.Max == 0:
			st[i].NextFree = time.Time{}
		case st[i].Count >= int64(l.Max):
			st[i].NextFree = time.UnixMilli(windowNextFree(counters, now, w, sub, int64(l.Max)))
		}
	}
	return st, nil
}

// floorDiv is floor(a/b) for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// windowEstimate returns E, the estimated count times s, of the counters at
// time t for a window of w ms split in sub-intervals of s ms: the counter of
// the sub-interval holding t-w+1 weighted by its part inside the window, the
// later ones in full.
func windowEstimate(counters map[int64]int64, t, w, s int64) int64 {
	i0 := floorDiv(t-w+1, s)
	var after int64
	for i, c := range counters {
		if i > i0 {
			after += c
		}
	}
	inside := (i0+1)*s - (t - w + 1)
	return inside*counters[i0] + s*after
}

// windowCount rounds an estimate up, as Decision.Counts reports it.
func windowCount(e, s int64) int64 { return (e + s - 1) / s }

// windowNextFree returns the earliest time t' >= t, in ms, at which the
// estimate allows one more intent under max (max >= 1), if no intent is
// added meanwhile.
func windowNextFree(counters map[int64]int64, t, w, s, maxCount int64) int64 {
	i0 := floorDiv(t-w+1, s)
	top := floorDiv(t, s)
	var after int64
	for i, c := range counters {
		if i >= i0 {
			after += c
			top = max(top, i)
		}
	}
	for b := i0; b <= top+1; b++ {
		cb := counters[b]
		after -= cb
		r := s * (maxCount - 1 - after)
		if r < 0 {
			continue
		}
		start, stop := b*s+w-1, (b+1)*s+w-1
		at := start
		if cb > 0 {
			at = max(start, stop-min(r/cb, s))
		}
		return max(at, t)
	}
	return t // not reached for maxCount >= 1
}
