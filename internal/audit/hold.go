package audit

// What the caps do not see but the audit must: sends given back by a
// refund (not counted), and quiet hours (nothing non-exempt delivered
// inside them).

import (
	"fmt"
	"slices"
	"time"

	"github.com/capper-dev/capper/internal/capping"
)

// WithoutRefunded drops the sends whose id was refunded (refunded[user]
// holds the ids): their slots were given back, so the caps do not count
// them. The engine may keep counting a refunded send it cannot tell apart
// from another one; that only makes it stricter than this audit.
func WithoutRefunded(sends []Send, refunded map[uint64]map[string]bool) []Send {
	return slices.DeleteFunc(slices.Clone(sends), func(s Send) bool { return refunded[s.User][s.ID] })
}

// QuietViolation is a send delivered inside its user's quiet hours.
type QuietViolation struct {
	Send  Send
	Local time.Time
}

func (v QuietViolation) String() string {
	return fmt.Sprintf("user %d (segment %s): %s send %q decided at %s local time, inside quiet hours",
		v.Send.User, v.Send.Segment, v.Send.Channel, v.Send.ID, v.Local.Format("15:04:05"))
}

// Quiet returns the sends decided inside the quiet hours of their segment's
// policy (on a channel they hold, of a category they do not exempt), in
// the send's time zone or the policy's. Duplicates were decided before and
// are not checked.
func Quiet(rules capping.Rules, sends []Send) []QuietViolation {
	var out []QuietViolation
	for _, s := range sends {
		q := rules.PolicyOf(s.Segment).QuietHours
		if q == nil || s.Duplicate || len(q.Channels) > 0 && !slices.Contains(q.Channels, s.Channel) {
			continue
		}
		cat := s.Category
		if cat == "" {
			cat = rules.DefaultCategory
		}
		if rules.IsExempt(cat) && !q.IncludeExempt {
			continue
		}
		loc := s.TimeZone
		if loc == nil {
			loc = rules.TimeZone
		}
		local := s.At.In(loc)
		m := local.Hour()*60 + local.Minute()
		in := m >= q.From && m < q.To
		if q.To < q.From {
			in = m >= q.From || m < q.To
		}
		if in {
			out = append(out, QuietViolation{s, local})
		}
	}
	return out
}
