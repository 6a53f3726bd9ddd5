package policy

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/capping"
)

func TestDefaultIsValid(t *testing.T) {
	d := Default()
	r, ps := d.Rules()
	if len(ps) > 0 {
		t.Fatalf("the default policy has problems:\n%v", ps.Err())
	}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	if r.TimeZone != time.UTC || r.WeekStart != time.Monday {
		t.Errorf("time zone %v, week start %v", r.TimeZone, r.WeekStart)
	}
	want := capping.Policy{Limits: []capping.Limit{
		{Name: "daily", Window: 24 * time.Hour, Max: 1},
		{Name: "weekly", Window: 7 * 24 * time.Hour, Max: 3},
	}}
	if !reflect.DeepEqual(r.Default, want) {
		t.Errorf("default policy %+v, want %+v", r.Default, want)
	}
}

// Default returns fresh lists: a caller that edits them changes no one
// else's defaults.
func TestDefaultIsFresh(t *testing.T) {
	a := Default()
	a.Channels[0] = "fax"
	*a.DefaultPolicy.Limits[0].Max = 9
	if b := Default(); b.Channels[0] != "email" || *b.DefaultPolicy.Limits[0].Max != 1 {
		t.Fatalf("Default shares state: %+v", b)
	}
}

func TestParseEveryFeature(t *testing.T) {
	doc := `
channels: [email, push, sms]
categories: [marketing, news, transactional]
default_category: news
exempt_categories: [transactional]
overrides: {campaigns: [outage], categories: [news]}
time_zone: Europe/Paris
week_start: sunday
segments:
  - name: vip
    limits:
      - {name: daily, window: 24h, max: 3, reserve: {slots: 1}}
      - {name: gap, window: 30m, max: 1, where: {channels: [push]}}
      - {name: week, calendar: week, max: 5, per: campaign, reserve: {slots: 2, below: normal}}
      - {name: promo, calendar: month, max: 4, where: {tags: [promo, "sale-50%"], categories: [marketing], campaigns: [spring]}}
      - {name: sms, window: 7d, max: 0, channel: sms}
default_policy:
  limits: [{name: daily, calendar: day, max: 1}]
`
	d, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	r, ps := d.Rules()
	if len(ps) > 0 {
		t.Fatalf("problems:\n%v", ps.Err())
	}
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	want := capping.Rules{
		Segments: []capping.Segment{{Name: "vip", Policy: capping.Policy{Limits: []capping.Limit{
			{Name: "daily", Window: 24 * time.Hour, Max: 3, Reserve: capping.Reserve{Slots: 1, Below: capping.High}},
			{Name: "gap", Window: 30 * time.Minute, Max: 1, Where: capping.Where{Channels: []string{"push"}}},
			{Name: "week", Calendar: capping.Week, Max: 5, Per: capping.PerCampaign, Reserve: capping.Reserve{Slots: 2, Below: capping.Normal}},
			{Name: "promo", Calendar: capping.Month, Max: 4, Where: capping.Where{Tags: []string{"promo", "sale-50%"}, Categories: []string{"marketing"}, Campaigns: []string{"spring"}}},
			{Name: "sms", Window: 7 * 24 * time.Hour, Max: 0, Where: capping.Where{Channels: []string{"sms"}}},
		}}}},
		Default:          capping.Policy{Limits: []capping.Limit{{Name: "daily", Calendar: capping.Day, Max: 1}}},
		Channels:         []string{"email", "push", "sms"},
		Categories:       []string{"marketing", "news", "transactional"},
		DefaultCategory:  "news",
		ExemptCategories: []string{"transactional"},
		Overrides:        capping.Overrides{Campaigns: []string{"outage"}, Categories: []string{"news"}},
		TimeZone:         paris,
		WeekStart:        time.Sunday,
	}
	if r.TimeZone.String() != "Europe/Paris" {
		t.Errorf("time zone %v", r.TimeZone)
	}
	r.TimeZone, want.TimeZone = nil, nil
	if !reflect.DeepEqual(r, want) {
		t.Errorf("rules\n%+v\nwant\n%+v", r, want)
	}
	if d.DefaultCategory != "news" || !slices.Equal(d.SegmentNames(), []string{"vip"}) {
		t.Errorf("default category %q, segments %q", d.DefaultCategory, d.SegmentNames())
	}
}

// Keys a document leaves out keep their defaults; a list it sets replaces
// the default one.
func TestParseOverDefaults(t *testing.T) {
	d, err := Parse([]byte("week_start: friday\nchannels: [push]\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.WeekStart, want.Channels = "friday", []string{"push"}
	if !reflect.DeepEqual(*d, want) {
		t.Errorf("got %+v, want %+v", *d, want)
	}
	for _, empty := range []string{"", "# nothing\n"} {
		d, err := Parse([]byte(empty))
		if err != nil || !reflect.DeepEqual(*d, Default()) {
			t.Errorf("%q: %+v, %v; want the defaults", empty, d, err)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for doc, want := range map[string]string{
		"segments:\n  - name: a\n    limits:\n      - {name: d, windw: 1d, max: 1}\n":                  `line 4: segments[0] (segment "a").limits[0] (limit "d").windw: unknown key; did you mean window?`,
		"default_policy:\n  limits: [{name: d, window: 1.5d, max: 1}]\n":                               `line 2: default_policy.limits[0] (limit "d").window: "1.5d" is not a duration`,
		"time_zone: UTC\n---\ntime_zone: UTC\n":                                                        "more than one YAML document",
		"overrides: {campaign: [x]}\n":                                                                 `line 1: overrides.campaign: unknown key; did you mean campaigns?`,
		"segments:\n  - {name: a, limits: [{name: d, window: 1d, max: 1, where: {channel: [sms]}}]}\n": `line 2: segments[0] (segment "a").limits[0] (limit "d").where.channel: unknown key; did you mean channels?`,
		"segments:\n  - {name: a, limits: [{name: d, window: 1d, max: 1, reserve: {slot: 1}}]}\n":      `line 2: segments[0] (segment "a").limits[0] (limit "d").reserve.slot: unknown key; did you mean slots?`,
		"default_policy:\n  limits: [{name: d, window: 1d, max: lots}]\n":                              `line 2: default_policy.limits[0] (limit "d").max: "lots" is not a whole number`,
	} {
		_, err := Parse([]byte(doc))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want it to contain %q", doc, err, want)
		}
	}
}

// lim is a limit at the path a one-segment document gives it.
const lim = `segments[0] (segment "a").limits[0] (limit "d")`

// TestProblems: every check, each problem once, at its path, in the
// document's words.
func TestProblems(t *testing.T) {
	one := func(limit string) string { return "segments: [{name: a, limits: [" + limit + "]}]" }
	for _, tc := range []struct {
		doc  string
		want []string
	}{
		// window and calendar
		{one(`{name: d, window: 1d, calendar: day, max: 1}`),
			[]string{lim + ": has both window and calendar: a limit is rolling or calendar, not both"}},
		{one(`{name: d, max: 1}`),
			[]string{lim + ".window: is required: a limit counts in a rolling window (e.g. 24h) or per calendar period (calendar: day, week or month)"}},
		{one(`{name: d, calendar: fortnight, max: 1}`),
			[]string{lim + `.calendar: "fortnight" is not one of day, week, month`}},
		{one(`{name: d, window: 1d, calendar: fortnight, max: 1}`), []string{
			lim + `.calendar: "fortnight" is not one of day, week, month`,
			lim + ": has both window and calendar: a limit is rolling or calendar, not both",
		}},
		{one(`{name: d, window: 30s, max: 1}`), []string{lim + ".window: 30s out of range [1m0s, 744h0m0s]"}},
		{one(`{name: d, window: 32d, max: 1}`), []string{lim + ".window: 768h0m0s out of range [1m0s, 744h0m0s]"}},
		{one(`{name: d, window: 90500ms, max: 1}`), []string{lim + ".window: 1m30.5s is not a whole number of seconds"}},
		// max
		{one(`{name: d, window: 1d}`), []string{lim + ".max: is required (0 means never)"}},
		{one(`{name: d, window: 1d, max: -1}`), []string{lim + ".max: must not be negative, got -1"}},
		{one(`{name: d, window: 1d, max: 10001}`), []string{lim + ".max: 10001 is above 10000"}},
		// reserve
		{one(`{name: d, window: 1d, max: 3, reserve: {slots: 3}}`),
			[]string{lim + ".reserve.slots: 3 must be from 1 to max-1 (2): reserved slots leave at least one for everyone"}},
		{one(`{name: d, window: 1d, max: 3, reserve: {slots: 0, below: high}}`),
			[]string{lim + ".reserve.slots: 0 must be from 1 to max-1 (2): reserved slots leave at least one for everyone"}},
		{one(`{name: d, window: 1d, max: 3, reserve: {slots: -1}}`),
			[]string{lim + ".reserve.slots: -1 must be from 1 to max-1 (2): reserved slots leave at least one for everyone"}},
		{one(`{name: d, window: 1d, max: 3, reserve: {}}`),
			[]string{lim + ".reserve.slots: 0 must be from 1 to max-1 (2): reserved slots leave at least one for everyone"}},
		{one(`{name: d, window: 1d, reserve: {slots: 2}}`), []string{lim + ".max: is required (0 means never)"}},
		{one(`{name: d, window: 1d, reserve: {slots: 0}}`), []string{
			lim + ".max: is required (0 means never)",
			lim + ".reserve.slots: 0 must be at least 1",
		}},
		{one(`{name: d, window: 1d, max: 3, reserve: {slots: 1, below: 0}}`),
			[]string{lim + `.reserve.below: "0" is not low, normal, high or a whole number from 1 to 100 (intents below it may use only max - slots): 0 reserves nothing, no priority is below it`}},
		{one(`{name: d, window: 1d, max: 3, reserve: {slots: 1, below: urgent}}`),
			[]string{lim + `.reserve.below: "urgent" is not low, normal, high or a whole number from 1 to 100 (intents below it may use only max - slots)`}},
		{one(`{name: d, window: 1d, max: 3, reserve: {slots: 1, below: 101}}`),
			[]string{lim + `.reserve.below: "101" is not low, normal, high or a whole number from 1 to 100 (intents below it may use only max - slots)`}},
		// per
		{one(`{name: d, window: 1d, max: 1, per: channel}`), []string{lim + `.per: "channel" is not one of user, campaign`}},
		// where and the legacy channel
		{one(`{name: d, window: 1d, max: 1, where: {channels: [email, fax]}}`),
			[]string{lim + `.where.channels[1]: "fax" is not one of the channels`}},
		{one(`{name: d, window: 1d, max: 1, channel: fax}`), []string{lim + `.channel: "fax" is not one of the channels`}},
		{one(`{name: d, window: 1d, max: 1, channel: sms, where: {channels: [sms]}}`),
			[]string{lim + ".channel: and where.channels are the same filter: keep where.channels"}},
		{one(`{name: d, window: 1d, max: 1, where: {categories: [news]}}`),
			[]string{lim + `.where.categories[0]: "news" is not one of the categories`}},
		{one(`{name: d, window: 1d, max: 1, where: {tags: [ok, "has space", ""]}}`), []string{
			lim + `.where.tags[1]: "has space" must be 1 to 64 bytes of printable characters`,
			lim + `.where.tags[2]: "" must be 1 to 64 bytes of printable characters`,
		}},
		{one(`{name: d, window: 1d, max: 1, where: {campaigns: [""]}}`), []string{lim + ".where.campaigns[0]: is empty"}},
		// names
		{one(`{name: "a b", window: 1d, max: 1}`),
			[]string{`segments[0] (segment "a").limits[0] (limit "a b").name: "a b" must be non-empty, at most 64 bytes, without spaces, braces or colons`}},
		{"segments: [{name: none, limits: [{name: d, window: 1d, max: 1}]}]",
			[]string{`segments[0] (segment "none").name: "none" is reserved for users in no segment (they get default_policy)`}},
		{"segments: [{name: Big, limits: [{name: d, window: 1d, max: 1}]}]",
			[]string{`segments[0] (segment "Big").name: segment name "Big" is invalid (want ^[a-z0-9][a-z0-9_-]{0,62}$)`}},
		{"segments: [{name: a, limits: [{name: d, window: 1d, max: 1}]}, {name: a, limits: [{name: d, window: 1d, max: 1}]}]",
			[]string{`segments[1] (segment "a").name: segment "a" is listed twice`}},
		{"segments: [{limits: [{name: d, window: 1d, max: 1}]}]", []string{`segments[0] (segment "").name: is required`}},
		{"segments: [{name: a}]", []string{`segments[0] (segment "a").limits: at least one limit is required`}},
		// ordered by the path's items, not by what a name says
		{`segments: [{name: "limits[5]", limits: [{name: d, window: 30s, max: 1}, {name: e, window: 1d}]}]`, []string{
			`segments[0] (segment "limits[5]").name: segment name "limits[5]" is invalid (want ^[a-z0-9][a-z0-9_-]{0,62}$)`,
			`segments[0] (segment "limits[5]").limits[0] (limit "d").window: 30s out of range [1m0s, 744h0m0s]`,
			`segments[0] (segment "limits[5]").limits[1] (limit "e").max: is required (0 means never)`,
		}},
		// lists of names
		{"default_category: news", []string{`default_category: "news" is not one of the categories (marketing, transactional)`}},
		{"exempt_categories: [news]", []string{`exempt_categories[0]: "news" is not one of the categories`}},
		{"overrides: {categories: [marketing, news]}", []string{`overrides.categories[1]: "news" is not one of the categories`}},
		{"overrides: {campaigns: [a, a]}", []string{`overrides.campaigns[1]: "a" is listed twice`}},
		{"channels: []", []string{"channels: at least one is required"}},
		{"categories: [marketing, transactional, marketing]", []string{`categories[2]: "marketing" is listed twice`}},
		// time
		{"time_zone: Mars/Olympus_Mons", []string{`time_zone: "Mars/Olympus_Mons" is not a time zone of the IANA database (e.g. UTC, Europe/Paris)`}},
		{"time_zone: Local", []string{`time_zone: "Local" is the zone of whichever machine runs capper: name the zone (e.g. UTC, Europe/Paris)`}},
		{`time_zone: ""`, []string{"time_zone: is required: an IANA time zone name such as UTC or Europe/Paris"}},
		{"week_start: Monday", []string{`week_start: "Monday" is not one of monday, tuesday, wednesday, thursday, friday, saturday, sunday`}},
		// all at once, also when a max is missing
		{"week_start: funday\n" + one(`{name: d, window: 1d}, {name: e, window: 30s, max: 1, channel: fax}`) +
			"\ndefault_policy: {limits: [{name: x, calendar: day, max: 1, per: team}]}", []string{
			`week_start: "funday" is not one of monday, tuesday, wednesday, thursday, friday, saturday, sunday`,
			lim + ".max: is required (0 means never)",
			`segments[0] (segment "a").limits[1] (limit "e").window: 30s out of range [1m0s, 744h0m0s]`,
			`segments[0] (segment "a").limits[1] (limit "e").channel: "fax" is not one of the channels`,
			`default_policy.limits[0] (limit "x").per: "team" is not one of user, campaign`,
		}},
	} {
		d, err := Parse([]byte(tc.doc))
		if err != nil {
			t.Errorf("%s: %v", tc.doc, err)
			continue
		}
		_, ps := d.Rules()
		var got []string
		for _, p := range ps {
			got = append(got, p.Error())
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s:\ngot  %q\nwant %q", tc.doc, got, tc.want)
		}
	}
}

// The rules of a document without problems pass the engine's validation:
// nothing the document accepts is refused later.
func TestNoProblemsMeansValidRules(t *testing.T) {
	d, err := Parse([]byte(`
segments:
  - name: a
    limits:
      - {name: d, window: 1d, max: 2, reserve: {slots: 1, below: normal}}
      - {name: w, calendar: week, max: 0}
      - {name: s, window: 1h, max: 1, channel: sms}
`))
	if err != nil {
		t.Fatal(err)
	}
	r, ps := d.Rules()
	if len(ps) > 0 {
		t.Fatal(ps.Err())
	}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := r.Segments[0].Limits[2].Where.Channels; !slices.Equal(got, []string{"sms"}) {
		t.Errorf("channel: sms gave where.channels %q", got)
	}
	if d.Problems().Err() != nil {
		t.Error("Problems differs from Rules")
	}
}
