// Package audit checks, independently of the capping engine, that what
// capper delivered respects the caps: it reads the delivery records back,
// counts each user's sends per limit and reports every window above its max.
// The end-to-end tests and `capper demo` use it as their verdict.
package audit

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/capper-dev/capper/internal/capping"
)

// Header names and values read back; they are the output contract (README,
// "The event contract"), spelled out here rather than imported so the audit
// does not share code with what it audits.
const (
	hDecision  = "capper-decision"
	hSegment   = "capper-segment"
	hDecidedAt = "capper-decided-at"
	hUnchecked = "capper-unchecked"
	hDuplicate = "capper-duplicate"
	timeLayout = "2006-01-02T15:04:05.000Z07:00"
)

// Send is one delivery that counts against the caps.
type Send struct {
	User      uint64
	ID        string
	Channel   string
	Segment   string
	At        time.Time // when the caps were checked (capper-decided-at)
	Duplicate bool      // a redelivery of an id allowed before
}

// Sends extracts the counted sends from delivery records: decision
// "allowed" and not failed open. Exempt and shadow-capped records are not
// counted by the caps, so they are skipped.
func Sends(records []kafka.Message) ([]Send, error) {
	var out []Send
	for _, r := range records {
		h := headers(r)
		if h[hDecision] != "allowed" || h[hUnchecked] == "true" {
			continue
		}
		var v struct {
			ID      string          `json:"id"`
			UserID  json.RawMessage `json:"user_id"`
			Channel string          `json:"channel"`
		}
		if err := json.Unmarshal(r.Value, &v); err != nil {
			return nil, fmt.Errorf("delivery at %s/%d/%d: %w", r.Topic, r.Partition, r.Offset, err)
		}
		uid, err := strconv.ParseUint(string(bytesTrimQuotes(v.UserID)), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("delivery at %s/%d/%d: user_id %s: %w", r.Topic, r.Partition, r.Offset, v.UserID, err)
		}
		at, err := time.Parse(time.RFC3339Nano, h[hDecidedAt]) // capper writes ms; any RFC 3339 reads
		if err != nil {
			return nil, fmt.Errorf("delivery at %s/%d/%d: %s: %w", r.Topic, r.Partition, r.Offset, hDecidedAt, err)
		}
		out = append(out, Send{User: uid, ID: v.ID, Channel: v.Channel, Segment: h[hSegment], At: at, Duplicate: h[hDuplicate] == "true"})
	}
	return out, nil
}

func headers(r kafka.Message) map[string]string {
	m := make(map[string]string, len(r.Headers))
	for _, h := range r.Headers {
		m[h.Key] = string(h.Value)
	}
	return m
}

func bytesTrimQuotes(b []byte) []byte {
	if len(b) >= 2 && b[0] == '"' && b[len(b)-1] == '"' {
		return b[1 : len(b)-1]
	}
	return b
}

// Violation is a window holding more sends than its limit allows.
type Violation struct {
	User      uint64
	Segment   string
	Limit     capping.Limit
	Count     int
	WindowEnd time.Time
}

func (v Violation) String() string {
	return fmt.Sprintf("user %d (segment %s): %d sends in the %s window ending %s, limit %q allows %d",
		v.User, v.Segment, v.Count, v.Limit.Window, v.WindowEnd.UTC().Format(timeLayout), v.Limit.Name, v.Limit.Max)
}

// Check returns every violation of rules in sends. A user's repeated id
// counts once, at its earliest time. For each counted send at time t under
// its segment's policy, every limit (window W, max M) must see at most M
// sends of its channel in (t-W, t]: that is the decision the engine made, and
// since the busiest window always ends at a send, it is equivalent to "at
// most M in any interval of length W".
func Check(rules capping.Rules, sends []Send) []Violation {
	type key struct {
		user uint64
		id   string
	}
	first := map[key]Send{}
	for _, s := range sends {
		k := key{s.User, s.ID}
		if f, ok := first[k]; !ok || s.At.Before(f.At) {
			first[k] = s
		}
	}
	byUser := map[uint64][]Send{}
	for _, s := range first {
		byUser[s.User] = append(byUser[s.User], s)
	}
	users := make([]uint64, 0, len(byUser))
	for u := range byUser {
		users = append(users, u)
	}
	slices.Sort(users)

	var out []Violation
	type window struct {
		user  uint64
		limit string
		end   time.Time
	}
	reported := map[window]bool{}
	for _, u := range users {
		list := byUser[u]
		sort.Slice(list, func(i, j int) bool { return list[i].At.Before(list[j].At) })
		for _, s := range list {
			for _, l := range rules.PolicyOf(s.Segment).Limits {
				if l.Channel != "" && l.Channel != s.Channel {
					continue // this limit did not apply to this decision
				}
				n := 0
				for _, o := range list {
					if o.At.After(s.At.Add(-l.Window)) && !o.At.After(s.At) && (l.Channel == "" || o.Channel == l.Channel) {
						n++
					}
				}
				if w := (window{u, l.Name, s.At}); n > l.Max && !reported[w] {
					reported[w] = true
					out = append(out, Violation{User: u, Segment: s.Segment, Limit: l, Count: n, WindowEnd: s.At})
				}
			}
		}
	}
	return out
}
