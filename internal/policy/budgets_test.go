package policy

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/pacing"
)

// budgetsDoc is the example of the policy format page.
const budgetsDoc = `
budgets:
  - name: push-fcm
    rate: 2000
    burst: 200
    channels: [push]
    routes: [fcm]
    lanes:
      - {name: urgent, min_priority: high}
      - {name: bulk}
  - name: sms
    rate: 2.5
    min_rate: 1
    channels: [sms]
  - name: everything-else
    rate: 50000
    lanes:
      - {name: top, min_priority: 90}
      - {name: mid, min_priority: low}
      - {name: rest}
`

// TestPacing: budgets become the worker's set in the document's order,
// their defaults filled in (burst, the one lane); a document without
// budgets paces nothing.
func TestPacing(t *testing.T) {
	d, err := Parse([]byte(budgetsDoc))
	if err != nil {
		t.Fatal(err)
	}
	set, ps := d.Pacing()
	if len(ps) > 0 {
		t.Fatal(ps.Err())
	}
	if d.Problems().Err() != nil {
		t.Fatalf("Problems: %v", d.Problems().Err())
	}
	want := []pacing.Budget{
		{Name: "push-fcm", Rate: 2000, Burst: 200, MinRate: 200, Where: pacing.Where{Channels: []string{"push"}, Routes: []string{"fcm"}},
			Lanes: []pacing.Lane{{Name: "urgent", MinPriority: capping.High}, {Name: "bulk"}}},
		{Name: "sms", Rate: 2.5, Burst: 1, MinRate: 1, Where: pacing.Where{Channels: []string{"sms"}}, Lanes: []pacing.Lane{{Name: pacing.DefaultLane}}},
		{Name: "everything-else", Rate: 50000, Burst: 5000, MinRate: 5000,
			Lanes: []pacing.Lane{{Name: "top", MinPriority: 90}, {Name: "mid", MinPriority: capping.Low}, {Name: "rest"}}},
	}
	if got := set.Budgets(); !reflect.DeepEqual(got, want) {
		t.Fatalf("budgets\n%+v\nwant\n%+v", got, want)
	}
	for _, tc := range []struct {
		channel, route string
		p              capping.Priority
		want           pacing.Place
		ok             bool
	}{
		{"push", "fcm", capping.High, pacing.Place{Budget: 0, Lane: 0}, true},
		{"push", "fcm", capping.Normal, pacing.Place{Budget: 0, Lane: 1}, true},
		{"sms", "", capping.Low, pacing.Place{Budget: 1, Lane: 0}, true},
		{"push", "apns", 95, pacing.Place{Budget: 2, Lane: 0}, true},
		{"email", "", 10, pacing.Place{Budget: 2, Lane: 2}, true},
	} {
		if got, ok := set.Match(pacing.Intent{Channel: tc.channel, Route: tc.route, Priority: tc.p}); got != tc.want || ok != tc.ok {
			t.Errorf("Match(%s, %q, %v) = %v, %v; want %v", tc.channel, tc.route, tc.p, got, ok, tc.want)
		}
	}

	l, err := Load([]byte(budgetsDoc), "v1")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(l.Budgets.Budgets(), want) {
		t.Fatalf("Load: budgets %+v", l.Budgets.Budgets())
	}

	d = new(Default())
	set, ps = d.Pacing()
	if len(ps) > 0 || set.Len() != 0 {
		t.Fatalf("no budgets: %+v, %v", set.Budgets(), ps.Err())
	}
	if l, err := Load(nil, "v0"); err != nil || l.Budgets.Len() != 0 {
		t.Fatalf("Load without budgets: %v, %v", l, err)
	}
}

// The default burst is a tenth of the rate, rounded up, at least 1.
func TestEffectiveBurst(t *testing.T) {
	for _, tc := range []struct {
		b    Budget
		want int
	}{
		{Budget{Rate: 2000}, 200},
		{Budget{Rate: 2001}, 201},
		{Budget{Rate: 0.1}, 1},
		{Budget{Rate: 9}, 1},
		{Budget{Rate: 11}, 2},
		{Budget{Rate: MaxRate}, MaxRate / 10},
		{Budget{Rate: 100, Burst: 7}, 7},
	} {
		if got := tc.b.EffectiveBurst(); got != tc.want {
			t.Errorf("%+v: burst %d, want %d", tc.b, got, tc.want)
		}
	}
}

// bud is the path of the first budget of a one-budget document.
const bud = `budgets[0] (budget "b")`

// TestBudgetProblems: every check of budgets, each problem at its path,
// in the document's order, after the other keys' problems.
func TestBudgetProblems(t *testing.T) {
	one := func(budget string) string { return "budgets: [" + budget + "]" }
	for _, tc := range []struct {
		doc  string
		want []string
	}{
		// name
		{one(`{rate: 1}`), []string{`budgets[0] (budget "").name: is required`}},
		{one(`{name: Push, rate: 1}`),
			[]string{`budgets[0] (budget "Push").name: "Push" must match ^[a-z0-9][a-z0-9_-]{0,47}$ (it names Kafka topics and metric labels)`}},
		{one(`{name: push.fcm, rate: 1}`),
			[]string{`budgets[0] (budget "push.fcm").name: "push.fcm" must match ^[a-z0-9][a-z0-9_-]{0,47}$ (it names Kafka topics and metric labels)`}},
		{one(`{name: ` + strings.Repeat("b", 49) + `, rate: 1}`),
			[]string{`budgets[0] (budget "` + strings.Repeat("b", 49) + `").name: "` + strings.Repeat("b", 49) + `" must match ^[a-z0-9][a-z0-9_-]{0,47}$ (it names Kafka topics and metric labels)`}},
		{"budgets: [{name: b, rate: 1, channels: [push]}, {name: b, rate: 1, channels: [sms]}]",
			[]string{`budgets[1] (budget "b").name: budget "b" is listed twice`}},
		// rate
		{one(`{name: b}`), []string{bud + ".rate: is required: releases per second, all workers together, above 0 and at most 10000000"}},
		{one(`{name: b, rate: 0}`), []string{bud + ".rate: is required: releases per second, all workers together, above 0 and at most 10000000"}},
		{one(`{name: b, rate: -5}`), []string{bud + ".rate: -5 must be above 0 and at most 10000000 (releases per second, all workers together)"}},
		{one(`{name: b, rate: 10000001}`), []string{bud + ".rate: 10000001 must be above 0 and at most 10000000 (releases per second, all workers together)"}},
		{one(`{name: b, rate: .inf}`), []string{bud + ".rate: +Inf must be above 0 and at most 10000000 (releases per second, all workers together)"}},
		{one(`{name: b, rate: .nan}`), []string{bud + ".rate: NaN must be above 0 and at most 10000000 (releases per second, all workers together)"}},
		{one(`{name: b, rate: 10, min_rate: 20}`), []string{bud + ".min_rate: 20 must be above 0 and at most the rate, 10 (left out: the rate/10)"}},
		{one(`{name: b, rate: 10, min_rate: -1}`), []string{bud + ".min_rate: -1 must be above 0 and at most the rate, 10 (left out: the rate/10)"}},
		// burst
		{one(`{name: b, rate: 10, burst: -1}`), []string{bud + ".burst: -1 must be at least 1 (left out: the rate/10, at least 1)"}},
		// channels
		{one(`{name: b, rate: 1, channels: [push, fax]}`), []string{bud + `.channels[1]: "fax" is not one of the channels`}},
		{one(`{name: b, rate: 1, channels: [push, push]}`), []string{bud + `.channels[1]: "push" is listed twice`}},
		// routes
		{one(`{name: b, rate: 1, routes: [fcm, ""]}`),
			[]string{bud + `.routes[1]: "" must match ^[a-z0-9][a-z0-9._-]{0,63}$ (an intent's route field)`}},
		{one(`{name: b, rate: 1, routes: [FCM]}`),
			[]string{bud + `.routes[0]: "FCM" must match ^[a-z0-9][a-z0-9._-]{0,63}$ (an intent's route field)`}},
		{one(`{name: b, rate: 1, routes: [` + strings.Repeat("r", 65) + `]}`),
			[]string{bud + `.routes[0]: "` + strings.Repeat("r", 65) + `" must match ^[a-z0-9][a-z0-9._-]{0,63}$ (an intent's route field)`}},
		{one(`{name: b, rate: 1, routes: [fcm, apns, fcm]}`), []string{bud + `.routes[2]: "fcm" is listed twice`}},
		// lanes
		{one(`{name: b, rate: 1, lanes: [{name: a, min_priority: high}, {name: A}]}`),
			[]string{bud + `.lanes[1] (lane "A").name: "A" must match ^[a-z0-9][a-z0-9_-]{0,47}$ (it names a Kafka topic and metric labels)`}},
		{one(`{name: b, rate: 1, lanes: [{min_priority: high}, {name: rest}]}`),
			[]string{bud + `.lanes[0] (lane "").name: is required`}},
		{one(`{name: b, rate: 1, lanes: [{name: a, min_priority: high}, {name: a}]}`),
			[]string{bud + `.lanes[1] (lane "a").name: lane "a" is listed twice`}},
		{one(`{name: b, rate: 1, lanes: [{name: a}, {name: rest}]}`),
			[]string{bud + `.lanes[0] (lane "a").min_priority: is required on every lane but the last: the lowest priority the lane takes (low, normal, high or 1-100)`}},
		{one(`{name: b, rate: 1, lanes: [{name: a, min_priority: urgent}, {name: rest}]}`),
			[]string{bud + `.lanes[0] (lane "a").min_priority: "urgent" is not low, normal, high or a whole number from 1 to 100`}},
		{one(`{name: b, rate: 1, lanes: [{name: a, min_priority: 0}, {name: rest}]}`),
			[]string{bud + `.lanes[0] (lane "a").min_priority: "0" is not low, normal, high or a whole number from 1 to 100: 0 takes every priority, which only the last lane does (leave min_priority out there)`}},
		{one(`{name: b, rate: 1, lanes: [{name: a, min_priority: normal}, {name: c, min_priority: high}, {name: rest}]}`),
			[]string{bud + `.lanes[1] (lane "c").min_priority: high must be below the lane before's (normal): lanes go from the highest priority down`}},
		{one(`{name: b, rate: 1, lanes: [{name: a, min_priority: high}, {name: c, min_priority: 75}, {name: rest}]}`),
			[]string{bud + `.lanes[1] (lane "c").min_priority: high must be below the lane before's (high): lanes go from the highest priority down`}},
		{one(`{name: b, rate: 1, lanes: [{name: a, min_priority: high}, {name: rest, min_priority: low}]}`),
			[]string{bud + `.lanes[1] (lane "rest").min_priority: the last lane takes every priority the lanes before leave: leave min_priority out`}},
		{one(`{name: b, rate: 1, lanes: [{name: only, min_priority: high}]}`),
			[]string{bud + `.lanes[0] (lane "only").min_priority: the last lane takes every priority the lanes before leave: leave min_priority out`}},
		// budgets that can never pace an intent
		{"budgets: [{name: a, rate: 1}, {name: b, rate: 1, channels: [push], routes: [fcm]}]",
			[]string{`budgets[1] (budget "b"): can never pace an intent: budget "a" (budgets[0]) comes first and covers every intent it covers (an intent is paced by the first budget that covers it)`}},
		{"budgets: [{name: a, rate: 1, channels: [push, sms], routes: [fcm, apns]}, {name: c, rate: 1, channels: [sms]}, {name: b, rate: 1, channels: [push], routes: [apns]}]",
			[]string{`budgets[2] (budget "b"): can never pace an intent: budget "a" (budgets[0]) comes first and covers every intent it covers (an intent is paced by the first budget that covers it)`}},
		// listing every channel is every channel
		{"channels: [push, sms]\nbudgets: [{name: a, rate: 1, channels: [sms, push]}, {name: b, rate: 1}]",
			[]string{`budgets[1] (budget "b"): can never pace an intent: budget "a" (budgets[0]) comes first and covers every intent it covers (an intent is paced by the first budget that covers it)`}},
		// all at once, after the other keys' problems
		{"week_start: funday\nbudgets: [{name: b, rate: -1, burst: -2, channels: [fax], routes: [FCM], lanes: [{name: a}, {name: z, min_priority: low}]}, {name: b, rate: 1, channels: [push]}]", []string{
			`week_start: "funday" is not one of monday, tuesday, wednesday, thursday, friday, saturday, sunday`,
			bud + ".rate: -1 must be above 0 and at most 10000000 (releases per second, all workers together)",
			bud + ".burst: -2 must be at least 1 (left out: the rate/10, at least 1)",
			bud + `.channels[0]: "fax" is not one of the channels`,
			bud + `.routes[0]: "FCM" must match ^[a-z0-9][a-z0-9._-]{0,63}$ (an intent's route field)`,
			bud + `.lanes[0] (lane "a").min_priority: is required on every lane but the last: the lowest priority the lane takes (low, normal, high or 1-100)`,
			bud + `.lanes[1] (lane "z").min_priority: the last lane takes every priority the lanes before leave: leave min_priority out`,
			`budgets[1] (budget "b").name: budget "b" is listed twice`,
		}},
	} {
		d, err := Parse([]byte(tc.doc))
		if err != nil {
			t.Errorf("%s: %v", tc.doc, err)
			continue
		}
		var got []string
		for _, p := range d.Problems() {
			got = append(got, p.Error())
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s:\ngot  %q\nwant %q", tc.doc, got, tc.want)
		}
		if _, err := Load([]byte(tc.doc), "v"); err == nil || !strings.Contains(err.Error(), tc.want[len(tc.want)-1]) {
			t.Errorf("%s: Load: %v, want it to fail with %q", tc.doc, err, tc.want[len(tc.want)-1])
		}
		if set, ps := d.Pacing(); set != nil || len(ps) == 0 {
			t.Errorf("%s: Pacing gave a set with problems %v", tc.doc, ps)
		}
	}
}

// Budgets that overlap without one covering all of the other's intents
// are fine: the first that covers an intent paces it.
func TestBudgetsThatOverlap(t *testing.T) {
	for _, doc := range []string{
		"budgets: [{name: a, rate: 1, channels: [push], routes: [fcm]}, {name: b, rate: 1, channels: [push]}]",
		"budgets: [{name: a, rate: 1, routes: [fcm]}, {name: b, rate: 1, channels: [push], routes: [fcm, apns]}]",
		"budgets: [{name: a, rate: 1, channels: [push]}, {name: b, rate: 1, channels: [push, sms]}]",
		"budgets: [{name: a, rate: 1, routes: [fcm]}, {name: b, rate: 1}]",
	} {
		d, err := Parse([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		if ps := d.Problems(); len(ps) > 0 {
			t.Errorf("%s: %v", doc, ps.Err())
		}
	}
}

func TestDescribeBudget(t *testing.T) {
	d, err := Parse([]byte(budgetsDoc))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"2000/s, burst 200, channels push, routes fcm, lanes urgent (high and up), bulk (the rest)",
		"2.5/s, burst 1, min rate 1/s, channels sms, any route, lanes marketing (every priority)",
		"50000/s, burst 5000, every channel, any route, lanes top (90 and up), mid (low and up), rest (the rest)",
	}
	for i, b := range d.Budgets {
		if got := DescribeBudget(b); got != want[i] {
			t.Errorf("budget %q:\ngot  %s\nwant %s", b.Name, got, want[i])
		}
	}
}

// TestDiffBudgets: budgets added, removed, reordered, and each change of
// one (burst and lanes as the worker reads them, defaults filled in).
func TestDiffBudgets(t *testing.T) {
	parse := func(y string) *Document {
		t.Helper()
		d, err := Parse([]byte(y))
		if err != nil {
			t.Fatal(err)
		}
		if ps := d.Problems(); len(ps) > 0 {
			t.Fatalf("%s: %v", y, ps.Err())
		}
		return d
	}
	old := parse(`budgets:
  - {name: push-fcm, rate: 2000, burst: 200, channels: [push], routes: [fcm], lanes: [{name: urgent, min_priority: high}, {name: bulk}]}
  - {name: sms, rate: 10, channels: [sms]}
  - {name: gone, rate: 5, channels: [email]}
  - {name: apns, rate: 100, routes: [apns]}
`)
	new := parse(`budgets:
  - {name: apns, rate: 100, routes: [apns], lanes: [{name: marketing}]}
  - {name: push-fcm, rate: 1500, burst: 200, channels: [push, inapp], routes: [fcm, hms], lanes: [{name: urgent, min_priority: 75}, {name: bulk}]}
  - {name: sms, rate: 20, routes: [twilio], lanes: [{name: otp, min_priority: 90}, {name: marketing}]}
  - {name: email, rate: 300, channels: [email]}
`)
	want := []string{
		`budget "push-fcm": rate 2000/s -> 1500/s`,
		`budget "push-fcm": channels push -> channels inapp|push`,
		`budget "push-fcm": routes fcm -> routes fcm|hms`,
		`budget "sms": rate 10/s -> 20/s`,
		`budget "sms": burst 1 -> 2`,
		`budget "sms": channels sms -> every channel`,
		`budget "sms": any route -> routes twilio`,
		`budget "sms": lanes marketing (every priority) -> otp (90 and up), marketing (the rest)`,
		`budget "email": added: 300/s, burst 30, channels email, any route, lanes marketing (every priority)`,
		`budget "gone": removed (was 5/s, burst 1, channels email, any route, lanes marketing (every priority))`,
		`budget order (the first that covers an intent paces it): push-fcm, sms, apns -> apns, push-fcm, sms`,
	}
	if got := Diff(old, new); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("diff:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if d := Diff(new, new); len(d) != 0 {
		t.Fatalf("a policy against itself: %q", d)
	}
	// The other keys' changes come after the budgets'.
	if got := Diff(parse("time_zone: UTC\n"), parse("time_zone: Europe/Paris\nbudgets: [{name: a, rate: 1}]\n")); !slices.Equal(got, []string{
		`budget "a": added: 1/s, burst 1, every channel, any route, lanes marketing (every priority)`,
		"time_zone: UTC -> Europe/Paris",
	}) {
		t.Fatalf("diff: %q", got)
	}
}
