package capping

// The fence: with Options.Fence, a decision call carries a deadline on the
// worker's wall clock (the time it is sent, plus LateAfter, plus how far
// the masters' clocks run ahead of it), and the script records nothing when
// Redis's TIME is past it (codeLate). A worker that lost an attempt's
// answer waits LateBy after sending it before it gives the intent back
// (dispatch): by then Redis runs no call of that attempt that could still
// record the send. The masters' skews come from the clock check
// (clock.go); a skew beyond maxFenceSkew is not followed (the clock check
// warns far below it).

import (
	"sync/atomic"
	"time"
)

// maxFenceSkew bounds the skews the fence follows.
const maxFenceSkew = time.Minute

// fenceClock holds the masters' skews against the wall clock (ns), as the
// last clock check that reached every master measured them.
type fenceClock struct{ ahead, behind atomic.Int64 }

func (f *fenceClock) observe(skews []time.Duration) {
	var ahead, behind time.Duration
	for _, s := range skews {
		ahead, behind = max(ahead, min(s, maxFenceSkew)), max(behind, min(-s, maxFenceSkew))
	}
	f.ahead.Store(int64(ahead))
	f.behind.Store(int64(behind))
}

// deadline is the fence of a call sent now (unix s).
func (f *fenceClock) deadline() uint32 {
	return uint32(time.Now().Add(LateAfter + time.Duration(f.ahead.Load())).Unix())
}

// LateBy is how long after sending a call the worker must wait before
// Redis can no longer record it (with Options.Fence): LateAfter, the
// masters' skews either way, and a second for the deadline's resolution.
func (e *Engine) LateBy() time.Duration {
	return LateAfter + time.Duration(e.fence.ahead.Load()+e.fence.behind.Load()) + time.Second
}
