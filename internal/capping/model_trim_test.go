package capping

// The reference model's trimmed sections, stated on sends: a user's log of
// a scope holds at most the scope's largest max; when a write leaves more
// of its sends inside some limit's window than that, the log is trimmed
// and refunds take nothing from it, until its oldest kept send is before
// every window of the scope.

import (
	"slices"
	"strings"
	"time"
)

// refScopeInfo is what the model knows of a scope: its where and per, its
// largest max, its longest rolling window (-1: none) and calendar kinds.
type refScopeInfo struct {
	where   Where
	per     Per
	keep    int
	rolling int64
	cals    map[Calendar]bool
}

// retention is how long (s) a log keeps a send: its longest window (a
// calendar period at its longest: 25 hours, 7 days and an hour, 31 days and
// an hour), one second, and 5 minutes for clock skew.
func (s *refScopeInfo) retention() int64 {
	r := s.rolling
	for c, span := range map[Calendar]int64{Day: 25 * 3600, Week: 7*86400 + 3600, Month: 31*86400 + 3600} {
		if s.cals[c] {
			r = max(r, span)
		}
	}
	return r + 1 + 300
}

// scopes are the rules' scopes by refScope.
func (m *refModel) scopes() map[string]*refScopeInfo {
	if m.scopeInfo != nil {
		return m.scopeInfo
	}
	m.scopeInfo = map[string]*refScopeInfo{}
	for _, l := range m.allLimits() {
		k := refScope(l.Where, l.Per)
		s := m.scopeInfo[k]
		if s == nil {
			s = &refScopeInfo{where: l.Where, per: l.Per, rolling: -1, cals: map[Calendar]bool{}}
			m.scopeInfo[k] = s
		}
		s.keep = max(s.keep, l.Max)
		if l.Calendar == None {
			s.rolling = max(s.rolling, int64(l.Window/time.Second))
		} else {
			s.cals[l.Calendar] = true
		}
	}
	return m.scopeInfo
}

// logKey names one log of a user: a scope, and the campaign for a
// per-campaign one.
func logKey(scope string, s *refScopeInfo, r *Request) string {
	if s.per == PerCampaign {
		return scope + "|" + r.Campaign
	}
	return scope + "|"
}

// from is the earliest time a limit of the scope counts from, for a
// decision of r: the start of its longest rolling window or of a calendar
// period in r's time zone.
func (m *refModel) from(s *refScopeInfo, r *Request) int64 {
	f := int64(1) << 62
	if s.rolling >= 0 {
		f = r.At.Unix() - s.rolling
	}
	for c := range s.cals {
		start, _ := refPeriod(c, r.At, m.location(r), m.rules.WeekStart)
		f = min(f, start)
	}
	return f
}

// setRules changes the rules from the next decision on (a policy swap):
// what the user's logs hold stays as written under the old ones.
func (m *refModel) setRules(r Rules) {
	m.rules, m.scopeInfo = r, nil
}

// mark updates the user's logs for a write of r (not yet in u.sends). A
// log holds, as of the user's last write, the newest keep (the scope's
// largest max then) of its sends inside the retention then: those it held
// before and r. It is trimmed when the write leaves more than keep of them
// at or after from (it drops one a limit counts), and stops being trimmed
// when, before the write, the oldest it holds is before from (the dropped
// ones are older still).
func (m *refModel) mark(u *refUser, r *Request) {
	if u.trimmed == nil {
		u.trimmed, u.held = map[string]bool{}, map[string][]int64{}
	}
	now := r.At.Unix()
	for scope, s := range m.scopes() {
		if s.keep == 0 {
			continue
		}
		into := ""
		if refMatches(s.where, r) {
			into = logKey(scope, s, r)
			if _, ok := u.held[into]; !ok {
				u.held[into] = nil // r starts a log
			}
		}
		from, since := m.from(s, r), now-s.retention()
		for k, prev := range u.held {
			if !strings.HasPrefix(k, scope+"|") {
				continue
			}
			if u.trimmed[k] && (len(prev) == 0 || prev[0] < from) {
				u.trimmed[k] = false
			}
			var kept []int64
			for _, t := range prev {
				if t >= since {
					kept = append(kept, t)
				}
			}
			if k == into {
				kept = append(kept, now)
				slices.Sort(kept)
			}
			n := 0 // the sends a limit counts
			for _, t := range kept {
				if t >= from {
					n++
				}
			}
			if n > s.keep {
				u.trimmed[k] = true
			}
			if kept = kept[max(len(kept)-s.keep, 0):]; len(kept) == 0 {
				delete(u.held, k)
				delete(u.trimmed, k)
				continue
			}
			u.held[k] = kept
		}
	}
}

// heldFull reports whether a trimmed log holding fewer than allow sends
// counts as full at start (the engine's rule: its dropped sends count as if
// at its oldest kept one), and that oldest send.
func (u *refUser) heldFull(key string, allow int, start int64) (int64, bool) {
	h := u.held[key]
	if !u.trimmed[key] || len(h) >= allow || len(h) == 0 || h[0] < start {
		return 0, false
	}
	return h[0], true
}
