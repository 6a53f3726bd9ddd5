package soak

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/kafka"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/policy"
)

// TestUserLimitsCheck feeds checkUserLimits made-up records and outcomes
// under the soak's policy (tier fewer: 1 in 2m; channels counted over 2m;
// max_defer 1m): a snoozed channel delivered before the snooze's end, a
// tier's limit over-counted by a delivery from before the tier was set, a
// delivery inside quiet hours (the policy's zone, and hours that span
// midnight), a channel turned off, a refusal no limit in force explains,
// Redis holding other limits at the end and a record applied late outside
// any fault are reported; a clean user's deliveries (other channels while
// snoozed, after the snooze, within a channel's max, in quiet hours of
// another zone, a refused record that changes nothing, an exempt send, a
// refunded one) are not, and a delivery decided while a record settles
// is counted ambiguous, not judged.
func TestUserLimitsCheck(t *testing.T) {
	v1, _ := policies("00:00", "00:01", true, true, true)
	l, err := policy.Load(v1, "v1")
	if err != nil {
		t.Fatal(err)
	}
	if l.Rules.Users == nil {
		t.Fatal("the soak's policy has no user_limits")
	}
	versions := map[string]capping.Rules{"v1": l.Rules}
	base := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return base.Add(time.Duration(s * float64(time.Second))) }
	// rec is a record of user 7 written at s, acknowledged 20 ms later and
	// seen applied 300 ms later.
	rec := func(s float64, st userState) userWrite {
		return userWrite{user: 7, kind: "test", state: st, start: at(s), acked: at(s + 0.02), applied: at(s + 0.3)}
	}
	refused := func(w userWrite) userWrite { w.refused = true; return w }
	n := 0
	out := func(topic, decision, channel string, decided float64, tz string, hs ...string) kafka.Message {
		n++
		v := map[string]any{"id": fmt.Sprintf("i-%d", n), "user_id": 7, "campaign_id": "c1", "channel": channel}
		if tz != "" {
			v["time_zone"] = tz
		}
		b, _ := json.Marshal(v)
		m := kafka.Message{Topic: topic, Key: []byte("7"), Value: b, Offset: int64(n), Headers: []kafka.Header{
			{Key: hSource, Value: fmt.Appendf(nil, "%s/0/%d", tIn, n)},
			{Key: hDecision, Value: []byte(decision)},
			{Key: hDecidedAt, Value: []byte(at(decided).Format(timeLayout))},
			{Key: hPolicy, Value: []byte("v1")}}}
		for i := 0; i+1 < len(hs); i += 2 {
			m.Headers = append(m.Headers, kafka.Header{Key: hs[i], Value: []byte(hs[i+1])})
		}
		return m
	}
	deliver := func(channel string, decided float64, tz string) kafka.Message {
		return out(tDeliveries, "allowed", channel, decided, tz)
	}
	snooze := func(until float64, channels ...string) userState {
		return userState{snoozeUntil: at(until), snoozeChannels: channels}
	}

	type tc struct {
		name      string
		writes    []userWrite
		outs      []kafka.Message
		refunded  []int // the deliveries' n refunded
		shown     *userState
		faults    []downWindow // the applier may lag in them
		stalls    []downWindow
		want      []string // each in some problem; none: no problem
		ambiguous int
	}
	// The clean user: snoozed for push (0-60 s), then email max 2 and sms
	// off (100 s), a refused record (120 s), quiet hours 10:05-10:06 UTC
	// (200 s), tier fewer (400 s).
	n = 0
	clean := tc{name: "clean",
		writes: []userWrite{
			rec(0, snooze(60, "push")),
			rec(100, userState{channels: map[string]int{"email": 2, "sms": 0}}),
			refused(rec(120, userState{channels: map[string]int{"inapp": 1}})),
			rec(200, userState{quiet: &userQuiet{10*60 + 5, 10*60 + 6}}),
			rec(400, userState{tier: "fewer"}),
		},
		outs: []kafka.Message{
			deliver("email", 10, ""),
			deliver("sms", 20, ""),
			deliver("push", 61, ""),
			deliver("push", 101, ""), // the email/sms record settling: ambiguous
			deliver("email", 110, ""),
			out(tSuppressed, "capped", "sms", 150, "", "capper-limit", "user-channel/sms"),
			deliver("inapp", 130, ""),                  // the refused record changes nothing
			deliver("email", 310, "Asia/Kolkata"),      // 15:35 there
			out(tDeliveries, "exempt", "sms", 320, ""), // exempt: not counted, not judged
			deliver("email", 530, ""),
		},
		shown:     &userState{tier: "fewer"},
		ambiguous: 1,
	}

	cases := []tc{clean}
	n = 100
	cases = append(cases, tc{name: "a snoozed channel delivered",
		writes: []userWrite{rec(0, snooze(60, "sms", "push"))},
		outs:   []kafka.Message{deliver("email", 20, ""), deliver("sms", 30, "")},
		want:   []string{`user 7: sms "i-102" (campaign c1) decided at 2026-11-27T10:00:30.000Z: delivered while snoozed until 10:01:00`},
	})
	cases = append(cases, tc{name: "every channel snoozed",
		writes: []userWrite{rec(0, snooze(60))},
		outs:   []kafka.Message{deliver("inapp", 59.5, "")},
		want:   []string{"delivered while snoozed until 10:01:00"},
	})
	n = 200
	cases = append(cases, tc{name: "a tier over-counted by a send before it",
		writes: []userWrite{rec(0, userState{tier: "fewer"})},
		outs:   []kafka.Message{deliver("email", -30, ""), deliver("push", 10, "")},
		want:   []string{`user 7: push "i-202"`, `the 2-th delivery in the 2m0s ending then that tier fewer's limit "f-2m" counts, it allows 1`},
	})
	n = 300
	cases = append(cases, tc{name: "the send before it refunded",
		writes:   []userWrite{rec(0, userState{tier: "fewer"})},
		outs:     []kafka.Message{deliver("email", -30, ""), deliver("push", 10, "")},
		refunded: []int{301},
	})
	n = 400
	cases = append(cases, tc{name: "a send of another policy version is not judged",
		writes: []userWrite{rec(0, userState{channels: map[string]int{"sms": 0}})},
		outs: []kafka.Message{func() kafka.Message {
			m := deliver("sms", 10, "")
			m.Headers[3].Value = []byte("v9")
			return m
		}()},
	})
	n = 500
	cases = append(cases, tc{name: "quiet hours in the policy's zone",
		writes: []userWrite{rec(0, userState{quiet: &userQuiet{10 * 60, 10*60 + 5}})},
		outs:   []kafka.Message{deliver("push", 62, "Asia/Kolkata"), deliver("push", 63, ""), deliver("push", 64, "UTC")},
		want:   []string{`push "i-502"`, "delivered at 10:01:03 in UTC, inside the user's quiet hours", `push "i-503"`},
	})
	n = 600
	cases = append(cases, tc{name: "quiet hours over midnight",
		writes: []userWrite{rec(0, userState{quiet: &userQuiet{23 * 60, 10*60 + 1}})},
		outs:   []kafka.Message{deliver("push", 30, ""), deliver("push", 61, "")},
		want:   []string{`push "i-601"`, "delivered at 10:00:30 in UTC"},
	})
	n = 700
	cases = append(cases, tc{name: "a channel off, and one over its max",
		writes: []userWrite{rec(0, userState{channels: map[string]int{"sms": 0, "push": 1}})},
		outs:   []kafka.Message{deliver("sms", 10, ""), deliver("push", -100, ""), deliver("push", 15, "")},
		want:   []string{"channel sms is off", `push "i-703"`, "the 2-th push delivery in the 2m0s ending then, the user's max is 1"},
	})
	n = 800
	cases = append(cases, tc{name: "refusals no limit in force explains",
		writes: []userWrite{rec(0, userState{channels: map[string]int{"push": 2}})},
		outs: []kafka.Message{
			deliver("push", 5, ""),
			out(tSuppressed, "capped", "push", 10, "", "capper-limit", "user-channel/push"),
			out(tSuppressed, "capped", "email", 11, "", "capper-limit", "user-tier/fewer/f-2m"),
			out(tSuppressed, "cancelled", "push", 12, "", "capper-reason", "snooze-too-long"),
		},
		want: []string{"its window held 1 push deliveries at most, the user's max is 2", `"user-tier/fewer/f-2m"`, "not a limit of the user's tier in force",
			"cancelled snooze-too-long at 2026-11-27T10:00:12.000Z, but no snooze of its channel was in force"},
	})
	n = 900
	cases = append(cases, tc{name: "a snooze-too-long within max_defer",
		writes: []userWrite{rec(0, snooze(50, "push"))},
		outs:   []kafka.Message{out(tSuppressed, "cancelled", "push", 12, "", "capper-reason", "snooze-too-long")},
		want:   []string{"but the snooze ends 10:00:50, within max_defer 1m0s"},
	})
	n = 1000
	cases = append(cases, tc{name: "Redis holds another state at the end",
		writes: []userWrite{rec(0, userState{tier: "fewer"}), rec(20, userState{})},
		shown:  &userState{tier: "fewer"},
		want:   []string{"user 7: Redis holds tier fewer, the latest record says no limits"},
	})
	late := rec(0, snooze(60))
	late.applied = at(8)
	n = 1100
	cases = append(cases, tc{name: "applied late, no fault",
		writes:    []userWrite{late},
		outs:      []kafka.Message{deliver("push", 5, ""), deliver("push", 9, "")},
		want:      []string{"record seen applied 7.98s after its acknowledgement, no fault near", `push "i-1102"`},
		ambiguous: 1,
	})
	n = 1200
	cases = append(cases, tc{name: "applied late in a fault",
		writes:    []userWrite{late},
		outs:      []kafka.Message{deliver("push", 5, "")},
		faults:    []downWindow{{at(-20), at(1)}},
		ambiguous: 1,
	})
	n = 1300
	cases = append(cases, tc{name: "decided just before a record that clears",
		writes:    []userWrite{rec(0, snooze(600)), rec(100, userState{})},
		outs:      []kafka.Message{deliver("push", 99.5, ""), deliver("push", 98.5, "")},
		want:      []string{`push "i-1302"`, "delivered while snoozed"},
		ambiguous: 1,
	})
	n = 1400
	cases = append(cases, tc{name: "decided before a record written in a Redis outage",
		writes:    []userWrite{rec(0, snooze(600)), rec(100, userState{})},
		outs:      []kafka.Message{deliver("push", 88, ""), deliver("push", 84, "")},
		stalls:    []downWindow{{at(95), at(130)}},
		want:      []string{`push "i-1402"`, "delivered while snoozed"},
		ambiguous: 1,
	})

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var o outputs
			for _, m := range c.outs {
				if m.Topic == tSuppressed {
					o.suppressed = append(o.suppressed, m)
				} else {
					o.deliveries = append(o.deliveries, m)
				}
			}
			refunded := map[uint64]map[string]bool{7: {}}
			for _, i := range c.refunded {
				refunded[7][fmt.Sprintf("i-%d", i)] = true
			}
			var shown map[uint64]userShown
			if c.shown != nil {
				shown = map[uint64]userShown{7: {state: *c.shown}}
			}
			r := &report{counts: map[string]int{}}
			checkUserLimits(r, o, versions, refunded, c.writes, shown, nil, c.faults, c.stalls)
			var all []string
			for _, ps := range r.problems {
				all = append(all, ps...)
			}
			if len(c.want) == 0 && len(all) > 0 {
				t.Errorf("reported:\n%s", strings.Join(all, "\n"))
			}
			for _, w := range c.want {
				if !strings.Contains(strings.Join(all, "\n"), w) {
					t.Errorf("want a problem with %q; reported:\n%s", w, strings.Join(all, "\n"))
				}
			}
			if got := r.counts["user limits: deliveries ambiguous (a record of the user settling)"]; got != c.ambiguous {
				t.Errorf("%d ambiguous, want %d", got, c.ambiguous)
			}
			if c.name == "clean" && r.counts["user limits: deliveries judged"] != 7 {
				t.Errorf("judged %d deliveries, want 7 (counts %v)", r.counts["user limits: deliveries judged"], r.counts)
			}
		})
	}
}

// TestUserPlan: a run's records cover every kind, for userRecords users,
// within the traffic; quiet hours hold the minute they are written in
// (in their zone) and end within 90 s; snoozes end after they are written.
func TestUserPlan(t *testing.T) {
	for _, traffic := range []time.Duration{30 * time.Second, 60 * time.Second} {
		steps := userPlan(8, traffic)
		kinds, users := map[string]bool{}, map[uint64]bool{}
		for _, s := range steps {
			kinds[s.kind], users[s.user] = true, true
			if s.at <= 0 || s.at >= traffic {
				t.Errorf("%s: a record at %s", traffic, s.at)
			}
			now := time.Date(2026, 11, 27, 23, 59, 45, 0, time.UTC)
			st, _ := s.state(now)
			if q := st.quiet; q != nil {
				loc, _ := time.LoadLocation(s.zone)
				l := now.In(loc)
				if !q.holds(l.Hour()*60 + l.Minute()) {
					t.Errorf("quiet hours %s-%s written at %s %s do not hold it", hhmm(q.from), hhmm(q.to), l.Format("15:04:05"), s.zone)
				}
				if end := l.Add(90 * time.Second); q.holds(end.Hour()*60 + end.Minute()) {
					t.Errorf("quiet hours %s-%s written at %s %s last past 90 s", hhmm(q.from), hhmm(q.to), l.Format("15:04:05"), s.zone)
				}
			}
			if !st.snoozeUntil.IsZero() && !st.snoozeUntil.After(now) {
				t.Errorf("a snooze until %s written at %s", st.snoozeUntil, now)
			}
		}
		if len(users) != userRecords {
			t.Errorf("%s: %d users, want %d", traffic, len(users), userRecords)
		}
		for _, k := range append(userFirst, userLater...) {
			if !kinds[k] {
				t.Errorf("%s: no %s record", traffic, k)
			}
		}
		st, _ := userStep{kind: "mixed", tier: "light", max: map[string]int{"sms": 0}, zone: "UTC"}.state(time.Date(2026, 11, 27, 8, 0, 10, 0, time.UTC))
		got, err := parseUserRecord(st.record(7, time.Now()))
		if err != nil || !got.equal(st) {
			t.Errorf("a record read back: %v %v, want %v", got, err, st)
		}
	}
}
