package app_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/capper-dev/capper/internal/app"
	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/objstore"
	"github.com/capper-dev/capper/internal/plans"
	"github.com/capper-dev/capper/internal/replay"
)

// weekPolicy: at most 2 marketing sends a calendar day, 8 in any 7 days.
const weekPolicy = `
default_policy:
  limits:
    - {name: daily, calendar: day, max: 2}
    - {name: weekly, window: 168h, max: 8}
`

// plannedWeek writes a generated week of intents (intents.jsonl, in time
// order) and its campaign plans (a plan store) to dir: every day a
// low-priority newsletter to every user at 09:00, a normal-priority promo
// to half of them between 12:00 and 16:00, and a high-priority
// cart-rescue push between 18:00 and 19:00 to 80% of that day's planned
// audience (a tenth of the users: a plan books for everyone it might
// send to). It returns the intents file and the store.
func plannedWeek(t *testing.T, dir string, users int, seed uint64) (string, string) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 1))
	monday := time.Date(2026, 11, 16, 0, 0, 0, 0, time.UTC)
	type line struct {
		at   time.Time
		json string
	}
	var lines []line
	add := func(at time.Time, id, campaign, channel, prio string, user int) {
		lines = append(lines, line{at, fmt.Sprintf(`{"id":%q,"user_id":%d,"campaign_id":%q,"channel":%q,"priority":%q,"created_at":%q}`,
			id, user, campaign, channel, prio, at.Format(time.RFC3339Nano))})
	}
	storeDir := filepath.Join(dir, "plans")
	st, err := objstore.Open(context.Background(), storeDir, objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rules := holdRules(t, weekPolicy)
	for d := range 7 {
		day := monday.AddDate(0, 0, d)
		cart := fmt.Sprintf("cart-rescue-%d", d)
		audience := roaring.New()
		for u := range users {
			add(day.Add(9*time.Hour+time.Duration(u)*time.Millisecond), fmt.Sprintf("news-%d-%d", d, u), fmt.Sprintf("newsletter-%d", d), "email", "low", u)
			if r.IntN(2) == 0 {
				add(day.Add(12*time.Hour+time.Duration(r.Int64N(int64(4*time.Hour)))), fmt.Sprintf("promo-%d-%d", d, u), fmt.Sprintf("promo-%d", d), "push", "normal", u)
			}
			if r.IntN(10) == 0 {
				audience.Add(uint32(u))
				if r.IntN(5) != 0 {
					add(day.Add(18*time.Hour+time.Duration(r.Int64N(int64(time.Hour)))), fmt.Sprintf("cart-%d-%d", d, u), cart, "push", "high", u)
				}
			}
		}
		spec := &plans.Spec{Campaign: cart, Priority: "high", Starts: day.Add(18 * time.Hour), Ends: day.Add(19 * time.Hour),
			Message: plans.Message{Channel: "push"}, Audience: []string{"generated"}}
		prio, ps := spec.Check(rules)
		if err := ps.Err(); err != nil {
			t.Fatal(err)
		}
		data, err := audience.ToBytes()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := plans.Publish(context.Background(), st, spec, prio, data, audience.GetCardinality(), monday); err != nil {
			t.Fatal(err)
		}
	}
	slices.SortStableFunc(lines, func(a, b line) int { return a.at.Compare(b.at) })
	path := filepath.Join(dir, "week.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	for _, l := range lines {
		fmt.Fprintln(w, l.json)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path, storeDir
}

// TestReplayPlans: a generated week replayed first come, first served and
// with the week's plans. With plans, every planned cart-rescue push is
// delivered (each fits the caps: only lower-priority sends stood in its
// way); first come, first served loses those whose user had had the
// newsletter and a promo. The promos given up are counted by whether the
// booking they made way for was used. Both sides see the same intents, and
// neither goes above a cap (the report's users never exceed the daily
// maximum times seven).
func TestReplayPlans(t *testing.T) {
	dir := t.TempDir()
	week, store := plannedWeek(t, dir, 20000, 11)
	policy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policy, []byte(weekPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	perDay := map[string]int{} // a side's allowed sends per user and day
	rep, err := app.Replay(context.Background(), app.ReplayOptions{Policy: policy, Plans: store, From: week,
		Observe: func(rec *replay.Record, ds []replay.Outcome) {
			for i, o := range ds {
				if o.Decision.Outcome == capping.Allowed {
					perDay[fmt.Sprintf("%d/%d/%s", i, o.User, o.Decision.At.Format(time.DateOnly))]++
				}
			}
		}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := rep.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", out.String())
	fcfs, withPlans := rep.Sides[0], rep.Sides[1]
	if fcfs.Side != replay.SideFCFS || withPlans.Side != replay.SidePlans || fcfs.Intents != withPlans.Intents {
		t.Fatalf("sides %s (%d intents), %s (%d)", fcfs.Side, fcfs.Intents, withPlans.Side, withPlans.Intents)
	}
	p, f := withPlans.Plans, fcfs.Plans
	if p.Planned == 0 || p.PlannedDelivered != p.Planned {
		t.Errorf("with plans: %d of %d planned sends delivered, want every one", p.PlannedDelivered, p.Planned)
	}
	if f.Planned != p.Planned || f.PlannedDelivered >= p.PlannedDelivered {
		t.Errorf("first come, first served: %d of %d planned sends delivered, want fewer than with plans (%d)", f.PlannedDelivered, f.Planned, p.PlannedDelivered)
	}
	if p.GivenUp == 0 || p.BookingUsed == 0 || p.BookingUnused == 0 || p.BookingUsed+p.BookingUnused != p.GivenUp {
		t.Errorf("given up %d: for a booking used %d, not used %d; want both", p.GivenUp, p.BookingUsed, p.BookingUnused)
	}
	if f.GivenUp != 0 {
		t.Errorf("first come, first served gave up %d sends for plans", f.GivenUp)
	}
	// Every planned send delivered with plans is one a lower-priority send
	// made way for, or one that had room anyway.
	if gained := p.PlannedDelivered - f.PlannedDelivered; gained > p.BookingUsed {
		t.Errorf("%d more planned sends delivered, yet only %d sends gave way for a used booking", gained, p.BookingUsed)
	}
	for k, n := range perDay {
		if n > 2 {
			t.Fatalf("%s: %d sends in a day, the daily maximum is 2", k, n)
		}
	}
}
