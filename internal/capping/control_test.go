package capping

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/control"
)

// TestControlVerdict: the verdict for each campaign state, the incident
// switch and send-by, and the deferral past a send-by.
func TestControlVerdict(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 18, 0, 0, 0, time.UTC)
	e := func(r control.Record) *control.Entry {
		return &control.Entry{Record: r, Pos: control.Position{Topic: "ctl", Offset: 7}}
	}
	entries := []*control.Entry{
		e(control.Record{Campaign: "stopped", State: control.Stopped, Since: t0}),
		e(control.Record{Campaign: "paused", State: control.Paused, Since: t0}),
		e(control.Record{Campaign: "due", State: control.Active, Since: t0, SendBy: t0.Add(time.Hour)}),
	}
	cs := func(s *control.Snapshot) *Campaigns {
		return &Campaigns{State: s, MaxPause: 24 * time.Hour, Recheck: time.Minute}
	}
	s := cs(control.NewSnapshot(entries, nil))
	withAll := cs(control.NewSnapshot(entries, e(control.Record{All: true, State: control.Paused, Since: t0})))
	now := t0.Add(30 * time.Minute)
	for _, tc := range []struct {
		name     string
		c        *Campaigns
		campaign string
		exempt   bool
		sendBy   time.Time
		now      time.Time
		want     Outcome // Allowed: no verdict
		reason   Reason
	}{
		{"no state", nil, "any", false, time.Time{}, now, Allowed, NoReason},
		{"empty state", cs(nil), "any", false, time.Time{}, now, Allowed, NoReason},
		{"no record", s, "other", false, time.Time{}, now, Allowed, NoReason},
		{"stopped", s, "stopped", false, time.Time{}, now, Cancelled, ReasonCampaignStopped},
		{"stopped, exempt too", s, "stopped", true, time.Time{}, now, Cancelled, ReasonCampaignStopped},
		{"paused", s, "paused", false, time.Time{}, now, Deferred, ReasonPaused},
		{"paused past max_pause", s, "paused", false, time.Time{}, t0.Add(25 * time.Hour), Cancelled, ReasonExpired},
		{"own send-by passed", s, "other", false, t0, now, Cancelled, ReasonExpired},
		{"own send-by passed, no state", nil, "other", false, t0, now, Cancelled, ReasonExpired},
		{"campaign's send-by passed", s, "due", false, time.Time{}, t0.Add(2 * time.Hour), Cancelled, ReasonExpired},
		{"campaign's send-by to come", s, "due", false, time.Time{}, now, Allowed, NoReason},
		{"every intent paused", withAll, "other", false, time.Time{}, now, Deferred, ReasonPaused},
		{"every intent paused, exempt", withAll, "other", true, time.Time{}, now, Allowed, NoReason},
		{"stopped beats the switch", withAll, "stopped", false, time.Time{}, now, Cancelled, ReasonCampaignStopped},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Request{Campaign: tc.campaign, SendBy: tc.sendBy, Control: tc.c, At: tc.now}
			v := controlVerdict(&r, tc.exempt)
			ok := v.outcome != Allowed
			var d Decision
			if ok {
				d = *v.decision(&r)
			}
			switch {
			case tc.want == Allowed && ok:
				t.Fatalf("verdict %+v, want none", d)
			case tc.want == Allowed:
				return
			case !ok:
				t.Fatalf("no verdict, want %s %s", tc.want, tc.reason)
			case d.Outcome != tc.want || d.Reason != tc.reason || !d.At.Equal(tc.now):
				t.Fatalf("verdict %+v, want %s %s at %s", d, tc.want, tc.reason, tc.now)
			case tc.sendBy.IsZero() && (d.Control == nil || d.Control.String() != "ctl/0/7"):
				t.Fatalf("a verdict from the state names record %v, want ctl/0/7", d.Control)
			case d.Outcome == Deferred && !d.NotBefore.Equal(tc.now.Add(time.Minute)):
				t.Fatalf("a pause waits until %s, want Recheck later", d.NotBefore)
			}
		})
	}

	// The earlier send-by is the deadline: a deferral past it is
	// cancelled, and names the campaign's record when that is the one.
	for _, tc := range []struct {
		name    string
		sendBy  time.Time
		until   time.Time
		want    Outcome
		control string
	}{
		{"before the campaign's", t0.Add(10 * time.Hour), t0.Add(50 * time.Minute), Deferred, "ctl/0/7"},
		{"past the campaign's", t0.Add(10 * time.Hour), t0.Add(2 * time.Hour), Cancelled, "ctl/0/7"},
		{"past its own", t0.Add(40 * time.Minute), t0.Add(50 * time.Minute), Cancelled, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Request{Campaign: "due", SendBy: tc.sendBy, Control: s, At: now}
			d := Decision{Outcome: Deferred, Reason: ReasonCap, At: now, NotBefore: tc.until, Limit: "daily"}
			sendByAfter(&r, &d, controlVerdict(&r, false).by)
			if named := ""; d.Control != nil {
				named = d.Control.String()
				if named != tc.control {
					t.Fatalf("names %q, want %q", named, tc.control)
				}
			} else if tc.control != "" {
				t.Fatalf("names no record, want %q", tc.control)
			}
			if d.Outcome != tc.want || d.Limit != "daily" {
				t.Fatalf("%+v, want %s naming %q", d, tc.want, tc.control)
			}
			if tc.want == Cancelled && d.Reason != ReasonExpired {
				t.Fatalf("reason %s, want expired", d.Reason)
			}
		})
	}
	if !s.stopped("stopped") || s.stopped("paused") || (*Campaigns)(nil).stopped("x") {
		t.Fatal("stopped")
	}
}

// checkTargetNs is the goal for campaign control's cost per intent.
const checkTargetNs = 50

// BenchmarkCheck: the control verdict of one intent (what every request
// meets before Redis; an intent with plan bookings also asks whether each
// plan's campaign is stopped), with 10,000 campaigns in the state (a tenth
// stopped, a tenth paused, some with a send-by), for intents of campaigns
// with and without a record; prints ns/intent and its ratio to the 50 ns
// target.
func BenchmarkCheck(b *testing.B) {
	const campaigns = 10_000
	now := time.Date(2026, 11, 25, 18, 0, 0, 0, time.UTC)
	entries := make([]*control.Entry, 0, campaigns)
	for i := range campaigns {
		st := control.Active
		switch i % 10 {
		case 0:
			st = control.Stopped
		case 1:
			st = control.Paused
		}
		r := control.Record{Campaign: fmt.Sprintf("campaign-%05d-spring-sale", i), State: st, Since: now.Add(-time.Hour)}
		if i%7 == 0 {
			r.SendBy = now.Add(time.Hour)
		}
		entries = append(entries, &control.Entry{Record: r})
	}
	cs := &Campaigns{State: control.NewSnapshot(entries, nil), MaxPause: 24 * time.Hour, Recheck: time.Minute}
	// Intents name 20,000 campaigns: half have a record.
	rng := rand.New(rand.NewPCG(1, 2))
	reqs := make([]Request, 4096)
	for i := range reqs {
		reqs[i] = Request{Campaign: fmt.Sprintf("campaign-%05d-spring-sale", rng.IntN(2*campaigns)), Control: cs, At: now}
	}
	b.ReportAllocs()
	b.ResetTimer()
	var goes int
	for i := range b.N {
		if v := controlVerdict(&reqs[i&4095], false); v.outcome == Allowed {
			goes++
		}
	}
	b.StopTimer()
	ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	b.ReportMetric(ns, "ns/intent")
	b.ReportMetric(ns/checkTargetNs, "x-of-50ns-target")
	if goes == 0 {
		b.Fatal("no intent went on")
	}
}

// TestSendByAtRelease: an intent its budget would hold is cancelled now
// (expired) when its lane could release it only after its send-by (its
// own or its campaign's); released in time, it may go.
func TestSendByAtRelease(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 18, 0, 0, 0, time.UTC)
	due := &control.Entry{Record: control.Record{Campaign: "due", State: control.Active, Since: t0, SendBy: t0.Add(time.Hour)},
		Pos: control.Position{Topic: "ctl", Offset: 9}}
	cs := &Campaigns{State: control.NewSnapshot([]*control.Entry{due}, nil), MaxPause: time.Hour, Recheck: time.Minute}
	now := t0.Add(30 * time.Minute)
	for _, tc := range []struct {
		name      string
		campaign  string
		sendBy    time.Time
		releaseAt time.Time
		expired   bool
	}{
		{"own send-by before the release", "other", t0.Add(40 * time.Minute), t0.Add(50 * time.Minute), true},
		{"own send-by after the release", "other", t0.Add(40 * time.Minute), t0.Add(35 * time.Minute), false},
		{"campaign's send-by before the release", "due", time.Time{}, t0.Add(2 * time.Hour), true},
		{"campaign's send-by after the release", "due", time.Time{}, t0.Add(45 * time.Minute), false},
		{"no send-by", "other", time.Time{}, t0.Add(100 * time.Hour), false},
	} {
		r := Request{Campaign: tc.campaign, SendBy: tc.sendBy, ReleaseAt: tc.releaseAt, Control: cs, At: now}
		v := controlVerdict(&r, false)
		switch {
		case tc.expired && (v.outcome != Cancelled || v.reason != ReasonExpired):
			t.Errorf("%s: verdict %s %s, want cancelled expired", tc.name, v.outcome, v.reason)
		case !tc.expired && v.outcome != Allowed:
			t.Errorf("%s: verdict %s %s, want none", tc.name, v.outcome, v.reason)
		}
	}
}

// TestGate: the holding readers' question gets the decision's answer: a
// stopped campaign's, a paused one's (with until when the pause can hold
// it), one past its campaign's send-by or its own, one under the incident
// switch, and one that may go; and Deadline is the earlier send-by.
func TestGate(t *testing.T) {
	t0 := time.Now().Truncate(time.Second)
	e := func(r control.Record) *control.Entry { return &control.Entry{Record: r} }
	entries := []*control.Entry{
		e(control.Record{Campaign: "stopped", State: control.Stopped, Since: t0}),
		e(control.Record{Campaign: "paused", State: control.Paused, Since: t0}),
		e(control.Record{Campaign: "due", State: control.Active, Since: t0, SendBy: t0.Add(time.Hour)}),
	}
	c := &Campaigns{State: control.NewSnapshot(entries, nil), MaxPause: 24 * time.Hour, Recheck: time.Minute}
	all := &Campaigns{State: control.NewSnapshot(entries, e(control.Record{All: true, State: control.Paused, Since: t0})), MaxPause: time.Hour}
	now := t0.Add(30 * time.Minute)
	for _, tc := range []struct {
		name     string
		c        *Campaigns
		campaign string
		sendBy   time.Time
		now      time.Time
		want     Gate
	}{
		{"active", c, "other", time.Time{}, now, Gate{Go: true}},
		{"no control, own send-by passed", nil, "other", t0, now, Gate{Outcome: Cancelled, Reason: ReasonExpired}},
		{"stopped", c, "stopped", time.Time{}, now, Gate{Outcome: Cancelled, Reason: ReasonCampaignStopped}},
		{"paused", c, "paused", time.Time{}, now, Gate{Outcome: Deferred, Reason: ReasonPaused, PausedUntil: t0.Add(24 * time.Hour)}},
		{"paused too long", c, "paused", time.Time{}, t0.Add(25 * time.Hour), Gate{Outcome: Cancelled, Reason: ReasonExpired}},
		{"campaign's send-by not yet", c, "due", time.Time{}, now, Gate{Go: true}},
		{"campaign's send-by passed", c, "due", time.Time{}, t0.Add(2 * time.Hour), Gate{Outcome: Cancelled, Reason: ReasonExpired}},
		{"incident switch", all, "other", time.Time{}, now, Gate{Outcome: Deferred, Reason: ReasonPaused, PausedUntil: t0.Add(time.Hour)}},
	} {
		if got := tc.c.Gate(tc.campaign, tc.sendBy, tc.now); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
	if d := c.Deadline("due", t0.Add(2*time.Hour)); !d.Equal(t0.Add(time.Hour)) {
		t.Errorf("Deadline: %s, want the campaign's", d)
	}
	if d := c.Deadline("due", t0.Add(time.Minute)); !d.Equal(t0.Add(time.Minute)) {
		t.Errorf("Deadline: %s, want its own", d)
	}
	if d := (*Campaigns)(nil).Deadline("due", time.Time{}); !d.IsZero() {
		t.Errorf("Deadline without control: %s", d)
	}
}
