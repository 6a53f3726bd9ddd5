package demo

// The users' own limits section: its part of the policy, the records a
// preference service would write, and what the audit holds them to.

import (
	"fmt"
	"regexp"
	"time"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/kafka"
	"github.com/capper-dev/capper/internal/userlimits"
)

// The users' own limits section: the tier its users may choose, and how
// long a snoozed intent may wait for the snooze's end.
const (
	tierFewer    = "fewer"
	userMaxDefer = 24 * time.Hour
)

// userLimitsPolicy replaces configs/policy.yaml's user_limits (null) in
// the demo's policy file: the example its comment gives.
var userLimitsPolicy = fmt.Sprintf(`# capper-demo's users' own limits section (the demo's, in place of
# configs/policy.yaml's user_limits: null, as its comment suggests).
user_limits:
  tiers:
    - name: %s
      limits:
        - {name: daily, window: 24h, max: 1}
        - {name: weekly, window: 7d, max: 3}
  channels: [push, sms]
  channel_window: 7d
  max_per_channel: 7
  max_defer: %s
`, tierFewer, shortHours(userMaxDefer))

// noUserLimits is configs/policy.yaml's user_limits line.
var noUserLimits = regexp.MustCompile(`(?m)^user_limits: null[ \t]*(?:\n|\z)`)

// tierRecords are the user-limits records of the readers on the tier
// fewer, as a preference service writes them (keyed by user id, each the
// user's whole state).
func (s *sections) tierRecords(at time.Time) ([]kafka.Message, error) {
	var out []kafka.Message
	for u := s.fewer.from; u < s.fewer.to; u++ {
		m, err := userRecord(uint64(u), capping.UserLimits{Tier: tierFewer}, at)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	s.own.tierRecords = len(out)
	return out, nil
}

// snoozeRecords are the snoozes written mid-blast: a week for the first
// readers (past user_limits.max_defer: what they held back is cancelled),
// until the clock skips to due for the next (deferred to it).
func (s *sections) snoozeRecords(at time.Time) ([]kafka.Message, error) {
	s.own.longUntil = at.Add(7 * 24 * time.Hour).Truncate(time.Second)
	s.own.shortUntil = s.due.Truncate(time.Second)
	var out []kafka.Message
	for _, g := range []struct {
		users span
		until time.Time
	}{{s.snoozeLong, s.own.longUntil}, {s.snoozeShort, s.own.shortUntil}} {
		for u := g.users.from; u < g.users.to; u++ {
			m, err := userRecord(uint64(u), capping.UserLimits{SnoozeUntil: g.until}, at)
			if err != nil {
				return nil, err
			}
			out = append(out, m)
		}
	}
	s.own.snoozeRecords = len(out)
	return out, nil
}

// snoozeOf is the end of a reader's snooze (zero: not snoozed).
func (s *sections) snoozeOf(u uint64) time.Time {
	switch {
	case s.snoozeLong.has(u):
		return s.own.longUntil
	case s.snoozeShort.has(u):
		return s.own.shortUntil
	}
	return time.Time{}
}

// userRecord is a user's record of the user-limits topic.
func userRecord(uid uint64, l capping.UserLimits, at time.Time) (kafka.Message, error) {
	v, err := userlimits.Encode(userlimits.Record{UserID: uid, Limits: l, UpdatedAt: at})
	if err != nil {
		return kafka.Message{}, fmt.Errorf("demo: user %d's limits: %w", uid, err)
	}
	return kafka.Message{Key: userlimits.Key(uid), Value: v}, nil
}

// userFacts are the readers' own limits as the demo wrote them, for the
// audit: the tier's, then the snoozes.
func (s *sections) userFacts() map[uint64]userFact {
	f := map[uint64]userFact{}
	for u := s.fewer.from; u < s.fewer.to; u++ {
		f[uint64(u)] = userFact{limits: capping.UserLimits{Tier: tierFewer}, applied: s.own.tierApplied}
	}
	for u := s.snoozeLong.from; u < s.snoozeShort.to; u++ {
		f[uint64(u)] = userFact{limits: capping.UserLimits{SnoozeUntil: s.snoozeOf(uint64(u))}, applied: s.own.snoozeApplied}
	}
	return f
}
