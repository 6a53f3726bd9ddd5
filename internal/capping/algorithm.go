package capping

// The algorithm interface: what an algorithm file provides to the engine.

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// Algorithm selects how the engine counts.
type Algorithm string

const (
	// SlidingLog is exact: a sorted set of the user's allowed intents.
	SlidingLog Algorithm = "sliding_log"
	// SlidingWindow is approximate: counters per sub-interval of each window.
	// It may allow up to floor((1-f)*c) more than max in a window, where c is
	// the count of the sub-interval that straddles the window's start and f
	// the part of it inside the window (see sliding_window.lua): at most
	// max + (count of one sub-interval), under 2*max, close to max when
	// traffic is smooth.
	SlidingWindow Algorithm = "sliding_window"
)

// algorithm is one way of counting in Redis: its Lua script, the call a
// request of a policy on a channel makes (keys and typed arguments), and the
// read-only view of a user's state. The engine around it owns the batch,
// the pipeline and the retries; the algorithm owns the key layout.
type algorithm interface {
	script() *script
	// compile returns what every request of pol on channel sends.
	compile(pol Policy, channel string) *plan
	// inspect reads the state of every limit of pol for a user at a time.
	inspect(ctx context.Context, uid uint64, pol Policy, at time.Time) ([]LimitState, error)
}

// plan is the call of one (policy, channel): the parts that do not depend
// on the user, the intent or the time, and a builder for those that depend
// on the time only.
type plan struct {
	limits []Limit
	// suffixes of the keys after the first one, appended to the user key
	// <prefix>:{<uid>}.
	suffixes []string
	// idKey: the first key is the intent's own <user key>:d:<hex digest>
	// instead of the user key itself.
	idKey bool
	// args returns the script's arguments for a decision at now (ms). When
	// member >= 0, args[member] is left for the intent's 8-byte digest.
	args   func(now int64) []any
	member int
}

// keys builds the Redis key names of users; the prefix never holds braces,
// so the hash tag is always {<uid>}.
type keys struct{ prefix string }

// user is <prefix>:{<uid>}.
func (k keys) user(uid uint64) string { return string(k.appendUser(nil, uid)) }

func (k keys) appendUser(b []byte, uid uint64) []byte {
	b = append(b, k.prefix...)
	b = append(b, ":{"...)
	b = strconv.AppendUint(b, uid, 10)
	return append(b, '}')
}

func newAlgorithm(a Algorithm, e *Engine) (algorithm, error) {
	switch a {
	case SlidingLog:
		return newSlidingLog(e), nil
	case SlidingWindow:
		return newSlidingWindow(e), nil
	}
	return nil, fmt.Errorf("capping: algorithm %q is not one of %s, %s", a, SlidingLog, SlidingWindow)
}
