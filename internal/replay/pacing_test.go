package replay_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/policy"
	"github.com/capper-dev/capper/internal/replay"
)

// pacedSide is side with the policy's budgets (and its exempt categories).
func pacedSide(t *testing.T, name, doc string) replay.Policy {
	t.Helper()
	p := side(t, name, doc)
	d, err := policy.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	set, ps := d.Pacing()
	if err := ps.Err(); err != nil {
		t.Fatal(err)
	}
	p.Budgets = set.WithExempt(p.Rules.ExemptCategories)
	return p
}

const pacedPolicy = `channels: [push, email]
categories: [marketing, transactional]
default_category: marketing
exempt_categories: [transactional]
default_policy:
  limits: [{name: hourly, window: 1h, max: 1}]
budgets:
  - name: push
    rate: 2
    burst: 1
    channels: [push]
    lanes:
      - {name: urgent, min_priority: high}
      - {name: bulk}
`

// intentLine is a saved intent of channel at ms after 10:00 (extra: more
// fields, with their leading comma).
func intentLine(id string, user int, channel string, ms int, extra string) string {
	at := time.Date(2026, 11, 18, 10, 0, 0, 0, time.UTC).Add(time.Duration(ms) * time.Millisecond)
	return fmt.Sprintf(`{"id":%q,"user_id":%d,"campaign_id":"c","channel":%q,"created_at":%q%s}`, id, user, channel, at.Format(time.RFC3339Nano), extra)
}

// TestReplayPaces: a budget of 2 a second (burst 1) with an urgent and a
// bulk lane, replayed against the same policy without it. Four bulk pushes
// at 10:00: the first goes with the bucket's one token, the rest wait. An
// urgent push at 0.2 s is released before them; an exempt push at 0.3 s is
// decided at once and takes a token ahead of the lanes (the next release
// moves from 0.5 s to 1 s); a bulk push at 0.4 s whose send-by (1 s) comes
// before its lane could release it (3 s) is cancelled when it arrives. The
// last bulk push is decided at its release (2.5 s): after an email to its
// user at 2 s, which takes the hourly slot first (without the budget, the
// push takes it and the email is capped).
func TestReplayPaces(t *testing.T) {
	lines := []string{
		intentLine("b1", 1, "push", 0, ""),
		intentLine("b2", 2, "push", 0, ""),
		intentLine("b3", 3, "push", 0, ""),
		intentLine("b4", 4, "push", 0, ""),
		intentLine("u1", 5, "push", 200, `,"priority":"high"`),
		intentLine("e1", 6, "push", 300, `,"category":"transactional"`),
		intentLine("s1", 7, "push", 400, `,"send_by":"2026-11-18T10:00:01Z"`),
		intentLine("m4", 4, "email", 2000, ""),
	}
	base := side(t, "base.yaml", pacedPolicy)
	cand := pacedSide(t, "cand.yaml", pacedPolicy)
	start := time.Date(2026, 11, 18, 10, 0, 0, 0, time.UTC)
	first := map[string]replay.Outcome{}
	type rel struct {
		at, wait time.Duration
		lane     string
		outcome  capping.Outcome
	}
	released := map[string]rel{}
	var order []string
	rep, err := replay.Run(context.Background(), jsonlSource(t, lines), replay.Options{Baseline: &base, Candidate: cand,
		IdempotencyWindow: time.Hour,
		Observe: func(rec *replay.Record, ds []replay.Outcome) {
			var v struct{ ID string }
			if err := json.Unmarshal(rec.Value, &v); err != nil {
				t.Fatal(err)
			}
			first[v.ID] = ds[1]
			if ds[0].Held || ds[0].Lane != "" {
				t.Errorf("%s: the baseline has no budget, yet %+v", v.ID, ds[0])
			}
		},
		Released: func(side string, r *replay.Release) {
			if side != "candidate" || !r.Token || r.Budget != "push" {
				t.Errorf("release %+v on side %s", r, side)
			}
			released[r.IntentID] = rel{r.ReleasedAt.Sub(start), r.ReleasedAt.Sub(r.HeldSince), r.Lane, r.Decision.Outcome}
			order = append(order, r.IntentID)
			if !r.Decision.At.Equal(r.ReleasedAt) {
				t.Errorf("%s decided at %s, released at %s", r.IntentID, r.Decision.At, r.ReleasedAt)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]rel{
		"b1": {0, 0, "bulk", capping.Allowed},
		"u1": {time.Second, 800 * time.Millisecond, "urgent", capping.Allowed},
		"b2": {1500 * time.Millisecond, 1500 * time.Millisecond, "bulk", capping.Allowed},
		"b3": {2 * time.Second, 2 * time.Second, "bulk", capping.Allowed},
		"b4": {2500 * time.Millisecond, 2500 * time.Millisecond, "bulk", capping.Capped},
	}
	if got := strings.Join(order, " "); got != "b1 u1 b2 b3 b4" {
		t.Errorf("released in the order %s, want b1 u1 b2 b3 b4", got)
	}
	for id, w := range want {
		if released[id] != w {
			t.Errorf("%s: released %+v, want %+v", id, released[id], w)
		}
		if o := first[id]; !o.Held || o.Lane != "push/"+w.lane {
			t.Errorf("%s: on arrival %+v, want held in push/%s", id, o, w.lane)
		}
	}
	if e := first["e1"]; e.Held || e.Decision.Outcome != capping.Exempt || !e.Decision.At.Equal(start.Add(300*time.Millisecond)) {
		t.Errorf("exempt e1: %+v, want exempt at once (0.3 s)", e)
	}
	if s := first["s1"]; s.Held || s.Lane != "push/bulk" || s.Decision.Outcome != capping.Cancelled || s.Decision.Reason != capping.ReasonExpired {
		t.Errorf("s1 (send-by 1 s, released at 3 s at the earliest): %+v, want cancelled expired on arrival", s)
	}
	if m := first["m4"]; m.Decision.Outcome != capping.Allowed {
		t.Errorf("email m4 at 2 s: %s, want allowed (the push to its user is released at 2.5 s)", m.Decision.Outcome)
	}

	b, c := rep.Sides[0], rep.Sides[1]
	if b.Allowed != 6 || b.Capped != 1 || b.Exempt != 1 || b.Cancelled != 0 || len(b.Budgets) != 0 {
		t.Errorf("baseline %+v", b)
	}
	if c.Intents != 8 || c.Allowed != 5 || c.Capped != 1 || c.Exempt != 1 || c.Cancelled != 1 || c.CappedByChannel["push"] != 1 {
		t.Errorf("candidate %+v", c)
	}
	if len(c.Budgets) != 1 {
		t.Fatalf("candidate budgets %+v", c.Budgets)
	}
	bs := c.Budgets[0]
	if bs.Budget != "push" || bs.Rate != 2 || bs.Burst != 1 || bs.Paced != 5 || bs.LongestWaitMs != 2500 ||
		!bs.DrainEnd.Equal(start.Add(2500*time.Millisecond)) || bs.ExpiredAtArrival != 1 || bs.ExemptCharged != 1 || bs.ExpiredWaiting != 0 {
		t.Errorf("budget %+v", bs)
	}
	if l := bs.Lanes; len(l) != 2 || l[0].Lane != "urgent" || l[0].Paced != 1 || l[0].LongestWaitMs != 800 || l[1].Paced != 4 ||
		l[1].LongestWaitMs != 2500 || !l[0].DrainEnd.Equal(start.Add(time.Second)) {
		t.Errorf("lanes %+v", l)
	}

	var tab bytes.Buffer
	if err := rep.Write(&tab, "table"); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", tab.String())
	for _, re := range []string{
		`(?m)^budget push$`,
		`(?m)^  paced +- +5$`,
		`(?m)^  longest wait +- +2\.5s$`,
		`(?m)^  drain end +- +10:00:02\.5$`,
		`(?m)^  expired at arrival +- +1$`,
		`(?m)^  lane urgent: longest wait +- +800ms$`,
		`(?m)^  cancelled +0 +1 +\+1$`,
	} {
		if !regexpMatch(re, tab.String()) {
			t.Errorf("table has no line matching %s", re)
		}
	}
	var js bytes.Buffer
	if err := rep.Write(&js, "json"); err != nil {
		t.Fatal(err)
	}
	var back replay.Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if g := back.Sides[1].Budgets; len(g) != 1 || g[0].LongestWaitMs != 2500 || !g[0].DrainEnd.Equal(bs.DrainEnd) || g[0].Paced != 5 ||
		!strings.Contains(js.String(), `"drain_end": "2026-11-18T10:00:02.5Z"`) {
		t.Errorf("json budgets %+v", g)
	}
	var cs bytes.Buffer
	if err := rep.Write(&cs, "csv"); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&cs).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, r := range rows {
		switch strings.Join(r, ",") {
		case "budget push,longest wait ms,,2500", "budget push,drain end,,2026-11-18T10:00:02.5Z", "budget push,paced,,5":
			found++
		}
	}
	if found != 3 {
		t.Errorf("csv:\n%v", rows)
	}
}

// TestReplayPacingRate: ten bulk pushes at once through a budget of 10 a
// second (burst 2), three urgent ones 0.35 s later. The burst goes at once,
// then one every 100 ms; the urgent ones go next, before the bulk ones
// that arrived first. The last bulk push could be released at 0.8 s when
// it arrived (before its send-by, 0.85 s): it is held, the urgent ones
// push it to 1.1 s, and it leaves its lane then without a token,
// cancelled. No second holds more releases than the rate and the burst.
func TestReplayPacingRate(t *testing.T) {
	doc := strings.Replace(pacedPolicy, "rate: 2\n    burst: 1", "rate: 10\n    burst: 2", 1)
	var lines []string
	for i := range 10 {
		extra := ""
		if i == 9 {
			extra = `,"send_by":"2026-11-18T10:00:00.85Z"`
		}
		lines = append(lines, intentLine(fmt.Sprintf("b%d", i), 100+i, "push", 0, extra))
	}
	for i := range 3 {
		lines = append(lines, intentLine(fmt.Sprintf("u%d", i), 200+i, "push", 350, `,"priority":"high"`))
	}
	start := time.Date(2026, 11, 18, 10, 0, 0, 0, time.UTC)
	var got []string
	var tokens []time.Time
	rep, err := replay.Run(context.Background(), jsonlSource(t, lines), replay.Options{Candidate: pacedSide(t, "cand.yaml", doc),
		IdempotencyWindow: time.Hour,
		Released: func(_ string, r *replay.Release) {
			got = append(got, fmt.Sprintf("%s@%d", r.IntentID, r.ReleasedAt.Sub(start).Milliseconds()))
			if r.Token {
				tokens = append(tokens, r.ReleasedAt)
			} else if r.IntentID != "b9" || r.Decision.Outcome != capping.Cancelled || r.Decision.Reason != capping.ReasonExpired {
				t.Errorf("%s passed without a token: %+v", r.IntentID, r)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	want := "b0@0 b1@0 b2@100 b3@200 b4@300 u0@400 u1@500 u2@600 b5@700 b6@800 b7@900 b8@1000 b9@1100"
	if s := strings.Join(got, " "); s != want {
		t.Errorf("releases\n %s\nwant\n %s", s, want)
	}
	for i, a := range tokens {
		n := 0
		for _, b := range tokens[i:] {
			if b.Sub(a) < time.Second {
				n++
			}
		}
		if n > 10+2 {
			t.Errorf("%d releases in the second from %s", n, a)
		}
	}
	c := rep.Sides[0]
	bs := c.Budgets[0]
	if c.Allowed != 12 || c.Cancelled != 1 || bs.Paced != 13 || bs.ExpiredWaiting != 1 || bs.ExpiredAtArrival != 0 || bs.LongestWaitMs != 1100 {
		t.Errorf("side %+v\nbudget %+v", c, bs)
	}
}

// TestReplayPacedDefer: a paced intent its policy defers (quiet hours) is
// decided when released, deferred, and held in its lane again when it
// comes due: decided when the budget releases it then.
func TestReplayPacedDefer(t *testing.T) {
	doc := strings.Replace(pacedPolicy, "  limits:", "  quiet_hours: {from: \"22:00\", to: \"08:00\", channels: [push]}\n  limits:", 1)
	night := time.Date(2026, 11, 18, 23, 0, 0, 0, time.UTC)
	lines := []string{
		fmt.Sprintf(`{"id":"n1","user_id":1,"campaign_id":"c","channel":"push","created_at":%q}`, night.Format(time.RFC3339)),
		fmt.Sprintf(`{"id":"n2","user_id":2,"campaign_id":"c","channel":"push","created_at":%q}`, night.Format(time.RFC3339)),
		fmt.Sprintf(`{"id":"d1","user_id":3,"campaign_id":"c","channel":"push","created_at":%q}`, night.Add(10*time.Hour).Format(time.RFC3339)),
	}
	var got []string
	rep, err := replay.Run(context.Background(), jsonlSource(t, lines), replay.Options{Candidate: pacedSide(t, "cand.yaml", doc),
		IdempotencyWindow: time.Hour,
		Released: func(_ string, r *replay.Release) {
			got = append(got, fmt.Sprintf("%s %s %s", r.IntentID, r.ReleasedAt.Format("15:04:05.000"), r.Decision.Outcome))
		}})
	if err != nil {
		t.Fatal(err)
	}
	// n1 and n2 are released at 23:00 and 23:00:00.5 and deferred to
	// 08:00 and a jitter; each is held again then and released.
	if len(got) != 5 || !strings.HasPrefix(got[0], "n1 23:00:00.000 deferred") || !strings.HasPrefix(got[1], "n2 23:00:00.500 deferred") ||
		!strings.HasSuffix(got[2], "allowed") || !strings.HasSuffix(got[3], "allowed") || !strings.HasPrefix(got[4], "d1 09:00:00.000 allowed") {
		t.Errorf("releases %q", got)
	}
	c := rep.Sides[0]
	if c.Intents != 3 || c.Allowed != 3 || c.Deferred != 2 || c.Hops != 0 || c.Waiting != 0 || c.Budgets[0].Paced != 5 {
		t.Errorf("side %+v, budget %+v", c, c.Budgets[0])
	}
}

func regexpMatch(re, s string) bool { return regexp.MustCompile(re).MatchString(s) }
