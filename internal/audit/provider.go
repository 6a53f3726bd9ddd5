package audit

// A simulated provider, for the demo and the benchmark that show throttle
// feedback: it accepts fewer sends a second than the budget, then all of
// them, and throttles the rest.

import "time"

// Provider accepts Low sends a second (by its clock) for LowFor from its
// first answer, then High, and throttles the rest. It is not safe for
// concurrent use: its caller holds a lock.
type Provider struct {
	Low, High float64
	LowFor    time.Duration
	// First: its first answer; ThrottledFrom: its first throttled one;
	// Raised: the first answer at High.
	First, ThrottledFrom, Raised time.Time
	// Accepted and Throttled count its answers per second (Unix).
	Accepted, Throttled map[int64]int
}

// Answer answers one send at now: accepted, or throttled.
func (p *Provider) Answer(now time.Time) (accepted bool) {
	if p.Accepted == nil {
		p.Accepted, p.Throttled = map[int64]int{}, map[int64]int{}
	}
	if p.First.IsZero() {
		p.First = now
	}
	capacity := p.Low
	if now.Sub(p.First) >= p.LowFor {
		capacity = p.High
		if p.Raised.IsZero() {
			p.Raised = now
		}
	}
	sec := now.Unix()
	if float64(p.Accepted[sec]) < capacity {
		p.Accepted[sec]++
		return true
	}
	p.Throttled[sec]++
	if p.ThrottledFrom.IsZero() {
		p.ThrottledFrom = now
	}
	return false
}

// Answers are how many sends it accepted and throttled in all.
func (p *Provider) Answers() (accepted, throttled int) {
	for _, n := range p.Accepted {
		accepted += n
	}
	for _, n := range p.Throttled {
		throttled += n
	}
	return accepted, throttled
}
