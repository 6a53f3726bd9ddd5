package capping

// Scopes: what one log of a user counts. A scope is a limit's Where and Per;
// limits with the same scope (a daily and a weekly cap of promo pushes)
// share one log, and a scope keeps its identity, and so its counts, across
// policy edits that keep it (a renamed limit, another max).

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/cespare/xxhash/v2"
)

// scope is one log of every user, compiled.
type scope struct {
	canon string // canonical form: identity across policy versions
	id    uint32 // 23-bit id in the record (perCampaignFlag added for per-campaign scopes)
	per   Per
	where compiledWhere
	// retention: how long (s) a send stays in this log, the longest span
	// any limit on it looks back.
	retention int64
	// keep: the most times a section needs, the largest max of a limit on
	// it (a limit looks at its max-th newest send, no further).
	keep int
	// rolling is the longest rolling window (s) of a limit on it, -1 for
	// none; calendars has bit c-1 set for a limit of Calendar c. They say
	// from when a limit counts (from).
	rolling   int64
	calendars uint8
	// channelOnly: its where sets only channels (policySet.byChannel).
	channelOnly bool
}

// from is the earliest time a limit on the scope counts from at now: the
// start of its longest rolling window or of a calendar period (cal, as
// callPlan.cal). A later decision's windows start later, so a send before
// it is counted by no limit on the scope again (for a user who keeps their
// time zone).
func (s *scope) from(now int64, cal *[3]struct{ start, end int64 }) int64 {
	f := int64(math.MaxInt64)
	if s.rolling >= 0 {
		f = now - s.rolling
	}
	for i := range cal {
		if s.calendars&(1<<i) != 0 {
			f = min(f, cal[i].start)
		}
	}
	return f
}

// canonical is a scope's identity: the sorted, de-duplicated sets of its
// Where and its Per. Two limits with the same canonical form count the same
// sends.
func canonical(w Where, per Per) string {
	part := func(name string, list []string) string {
		s := slices.Clone(list)
		slices.Sort(s)
		return name + "=" + strings.Join(slices.Compact(s), ",")
	}
	p := "user"
	if per == PerCampaign {
		p = "campaign"
	}
	parts := []string{"per=" + p}
	for _, d := range whereDims {
		parts = append(parts, part(d.key, d.list(&w)))
	}
	return strings.Join(parts, ";")
}

// describe is a scope in words, for inspect and messages.
func (s *scope) describe() string {
	var parts []string
	for i, set := range s.where {
		if set != nil {
			names := make([]string, 0, len(set))
			for n := range set {
				names = append(names, n)
			}
			slices.Sort(names)
			parts = append(parts, whereDims[i].key+" "+strings.Join(names, ","))
		}
	}
	if len(parts) == 0 {
		parts = append(parts, "every intent")
	}
	if s.per == PerCampaign {
		parts = append(parts, "per campaign")
	}
	return strings.Join(parts, "; ")
}

// scopeID is the record's name of a scope: 23 bits of a hash of its
// canonical form, salted until it differs from the ids already taken (in
// the order scopes are compiled: the earlier keeps its id).
func scopeID(canon string, taken map[uint32]bool) uint32 {
	for salt := 0; ; salt++ {
		s := canon
		if salt > 0 {
			s = fmt.Sprintf("%s#%d", canon, salt)
		}
		id := uint32(xxhash.Sum64String(s)) & (perCampaignFlag - 1)
		if id != 0 && !taken[id] {
			return id
		}
	}
}

// campaignHash is the 3-byte name of a campaign in a per-campaign section.
// Two campaigns of one user sharing it would share their count: stricter,
// never looser, and about 1 in 5.6 million for two campaigns.
func campaignHash(campaign string) [3]byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], xxhash.Sum64String(campaign))
	return [3]byte{b[0], b[1], b[2]}
}

// ValidTag reports whether an intent may name t as a tag: 1 to MaxTagBytes
// bytes of printable characters, no spaces.
func ValidTag(t string) bool {
	if t == "" || len(t) > MaxTagBytes {
		return false
	}
	for _, c := range t {
		if c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}

// validName: names end up in Redis keys and message headers.
func validName(s string) bool {
	return s != "" && len(s) <= 64 && !strings.ContainsAny(s, "{}: \t\r\n")
}
