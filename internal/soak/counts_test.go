package soak

// The counts check: what Redis holds at the end against what was
// delivered. Every send a user's record counts must be a delivery that
// counts (one allowed, not failed open); an intent cancelled, expired or
// left waiting, whose attempt Redis may have run while its answer was
// lost, must not stay counted. The record is read by its documented
// layout (docs/design/record-layout.md), with no code of the engine.

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/capper-dev/capper/internal/kafka"
	"github.com/redis/go-redis/v9"

	"github.com/capper-dev/capper/internal/audit"
)

// Sizes of the record layout (docs/design/record-layout.md).
const (
	idemEntry   = 5 + 4 // an idempotency entry: digest, time
	scopeID     = 3
	campaignTag = 3    // a per-campaign section's campaign hash
	perCampaign = 0x80 // in a section's first byte: a per-campaign scope
	smallCount  = 128  // a count below it is one byte; else 0x80|hi, lo
)

// section is one scope's log of a user's record: the send times it
// counts (unix s; a trimmed section's mark left out), and whether it is
// trimmed (it dropped older sends a limit still counts).
type section struct {
	scope   string // the scope id (and campaign hash), hex, for a report
	times   []int64
	trimmed bool
}

// parseRecord reads a user's record: its sections.
func parseRecord(rec []byte) ([]section, error) {
	p := 0
	count := func() (int, error) {
		if p >= len(rec) {
			return 0, fmt.Errorf("a count at byte %d: truncated", p)
		}
		n := int(rec[p])
		p++
		if n >= smallCount {
			if p >= len(rec) {
				return 0, fmt.Errorf("a count at byte %d: truncated", p-1)
			}
			n = (n-smallCount)*256 + int(rec[p])
			p++
		}
		return n, nil
	}
	n, err := count()
	if err != nil {
		return nil, err
	}
	p += n * idemEntry
	var out []section
	for p < len(rec) {
		h := scopeID
		if rec[p] >= perCampaign {
			h += campaignTag
		}
		if p+h > len(rec) {
			return nil, fmt.Errorf("a section at byte %d: truncated", p)
		}
		s := section{scope: fmt.Sprintf("%x", rec[p:p+h])}
		p += h
		c, err := count()
		if err != nil {
			return nil, err
		}
		if p+4*c > len(rec) {
			return nil, fmt.Errorf("section %s: %d times: truncated", s.scope, c)
		}
		for i := range c {
			b := rec[p+4*i:]
			t := int64(b[0])<<24 | int64(b[1])<<16 | int64(b[2])<<8 | int64(b[3])
			if t == 0 && i == 0 {
				s.trimmed = true // the mark
				continue
			}
			s.times = append(s.times, t)
		}
		p += 4 * c
		out = append(out, s)
	}
	if p != len(rec) {
		return nil, fmt.Errorf("idempotency entries past its end (%d bytes, %d entries)", len(rec), n)
	}
	return out, nil
}

// readRecords reads every user's record from the masters (prefix: the
// config's capping.key_prefix).
func readRecords(ctx context.Context, tp *topology, prefix string) (map[uint64][]section, error) {
	nodes := []string{}
	if tp.single != nil {
		nodes = append(nodes, tp.single.Addr())
	} else {
		for _, n := range tp.byRole(ctx, "master") {
			nodes = append(nodes, n.Addr())
		}
	}
	out := map[uint64][]section{}
	for _, addr := range nodes {
		c := redis.NewClient(&redis.Options{Addr: addr})
		err := func() error {
			defer c.Close()
			iter := c.Scan(ctx, 0, prefix+":{b*}", 1000).Iterator()
			for iter.Next(ctx) {
				key := iter.Val()
				bucket, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(key, prefix+":{b"), "}"), 10, 64)
				if err != nil {
					return fmt.Errorf("key %q: not a bucket: %w", key, err)
				}
				fields, err := c.HGetAll(ctx, key).Result()
				if err != nil {
					return fmt.Errorf("read %s on %s: %w", key, addr, err)
				}
				for f, v := range fields {
					i, err := strconv.ParseUint(f, 10, 64)
					if err != nil || i >= 32 {
						continue // the bucket's own fields (x, y)
					}
					secs, err := parseRecord([]byte(v))
					if err != nil {
						return fmt.Errorf("user %d's record in %s: %w", bucket*32+i, key, err)
					}
					out[bucket*32+i] = secs
				}
			}
			return iter.Err()
		}()
		if err != nil {
			return nil, fmt.Errorf("read the records on %s: %w", addr, err)
		}
	}
	return out, nil
}

// checkCounted: every send time in a user's record is a delivery of the
// user that counts, decided in that second or after it (an attempt whose
// answer was lost, answered duplicate when retried, is delivered at the
// retry's time or the attempt's); each delivery explains one time per
// section. Refunds, trimming and a slot that lost writes only take times
// out, so fewer times than deliveries is no finding. In a trimmed section a
// time may also stand for an older delivery it dropped: a refund or a
// give-back keeps a trimmed section whole (the send it would take out may
// be what counts the dropped ones: failure-semantics.md), so a send given
// back there stays, explained by the dropped delivery.
func checkCounted(r *report, o outputs, recs map[uint64][]section) {
	sends, err := audit.Sends(o.delivered())
	if err != nil {
		r.add("read", "%v", err)
		return
	}
	type key struct {
		user uint64
		id   string
	}
	first := map[key]audit.Send{} // a send's first delivery; a duplicate only when no other was read
	for _, s := range sends {
		k := key{s.User, s.ID}
		if f, ok := first[k]; !ok || f.Duplicate && !s.Duplicate || f.Duplicate == s.Duplicate && s.At.Before(f.At) {
			first[k] = s
		}
	}
	delivered := map[uint64][]int64{}
	for _, s := range first {
		delivered[s.User] = append(delivered[s.User], s.At.Unix())
	}
	users := make([]uint64, 0, len(recs))
	for u := range recs {
		users = append(users, u)
	}
	slices.Sort(users)
	for _, u := range users {
		ds := delivered[u]
		slices.Sort(ds)
		for _, sec := range recs[u] {
			r.counts["counted sends in Redis"] += len(sec.times)
			used := make([]bool, len(ds))
			times := slices.Clone(sec.times)
			slices.Sort(times)
			for _, t := range times {
				j := slices.IndexFunc(ds, func(d int64) bool { return d >= t-1 })
				for j >= 0 && j < len(ds) && used[j] {
					j++
				}
				if j >= 0 && j < len(ds) {
					used[j] = true
					continue
				}
				if sec.trimmed {
					if k := slices.IndexFunc(ds, func(d int64) bool { return d < t }); k >= 0 {
						for k < len(ds) && ds[k] < t && used[k] {
							k++
						}
						if k < len(ds) && ds[k] < t {
							used[k] = true
							r.counts["counted sends a trimmed section keeps for a dropped delivery"]++
							continue
						}
					}
				}
				r.add("counted", "user %d: Redis counts a send at %s (scope %s: %d sends, trimmed %t) that no delivery explains (%d deliveries that count); the user's outcomes:%s",
					u, time.Unix(t, 0).UTC().Format(time.TimeOnly), sec.scope, len(sec.times), sec.trimmed, len(ds), outcomesOf(o, u))
				break
			}
		}
	}
}

// outcomesOf lists a user's outcomes (deliveries and refusals), for a
// report.
func outcomesOf(o outputs, user uint64) string {
	var b strings.Builder
	for _, x := range [][]kafka.Message{o.deliveries, o.suppressed} {
		for _, m := range x {
			if string(m.Key) == strconv.FormatUint(user, 10) {
				fmt.Fprintf(&b, "\n    %s id=%s campaign=%s", audit.Describe(m), intentID(m), campaignOf(m))
			}
		}
	}
	return b.String()
}
