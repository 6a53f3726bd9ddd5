package capping

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// T0 is the start of simulated time in most tests.
var T0 = time.Date(2026, 11, 21, 16, 0, 0, 0, time.UTC)

const day = 24 * time.Hour

// mustZone loads an IANA time zone or fails the test.
func mustZone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("time zone %s: %v", name, err)
	}
	return loc
}

// testRules covers every key of the policy model: rolling and calendar
// limits, where on each dimension, per campaign, reserved slots, max 0, a
// short window, overrides, the default policy.
func testRules() Rules {
	return Rules{
		Segments: []Segment{
			{Name: "new", Policy: Policy{Limits: []Limit{
				{Name: "daily", Window: day, Max: 1},
				{Name: "weekly", Window: 7 * day, Max: 3},
			}}},
			{Name: "active", Policy: Policy{Limits: []Limit{
				{Name: "promo-day", Calendar: Day, Max: 2, Where: Where{Tags: []string{"promo"}, Channels: []string{"push"}}},
				{Name: "daily", Window: day, Max: 5, Reserve: Reserve{Slots: 2, Below: High}},
				{Name: "weekly", Window: 7 * day, Max: 10},
				{Name: "sms-weekly", Window: 7 * day, Max: 1, Where: Where{Channels: []string{"sms"}}},
				{Name: "same-campaign", Window: 7 * day, Max: 1, Per: PerCampaign},
			}}},
			{Name: "chatty", Policy: Policy{Limits: []Limit{
				{Name: "push-10m", Window: 10 * time.Minute, Max: 1, Where: Where{Channels: []string{"push"}}},
				{Name: "hourly", Window: time.Hour, Max: 4, Reserve: Reserve{Slots: 2, Below: Normal}},
				{Name: "daily", Window: day, Max: 12},
				{Name: "email-day", Calendar: Day, Max: 2, Where: Where{Channels: []string{"email"}}},
				{Name: "news-week", Calendar: Week, Max: 2, Where: Where{Tags: []string{"newsletter", "news"}}},
				{Name: "month", Calendar: Month, Max: 30},
			}}},
			{Name: "blocked", Policy: Policy{Limits: []Limit{
				{Name: "no-sms", Window: time.Hour, Max: 0, Where: Where{Channels: []string{"sms"}}},
				{Name: "flash", Window: 4 * time.Hour, Max: 1, Where: Where{Campaigns: []string{"flash-sale"}, Categories: []string{"marketing"}}},
				{Name: "lifecycle-camp-day", Calendar: Day, Max: 1, Per: PerCampaign, Where: Where{Categories: []string{"lifecycle"}}},
				{Name: "daily", Window: day, Max: 2},
			}}},
		},
		Default: Policy{Limits: []Limit{
			{Name: "daily", Window: day, Max: 2, Reserve: Reserve{Slots: 1, Below: High}},
			{Name: "camp-week", Calendar: Week, Max: 1, Per: PerCampaign, Where: Where{Categories: []string{"marketing"}}},
		}},
		Channels:         []string{"email", "push", "sms", "inapp"},
		Categories:       []string{"marketing", "lifecycle", "transactional"},
		ExemptCategories: []string{"transactional"},
		Overrides:        Overrides{Campaigns: []string{"alert"}, Categories: []string{"lifecycle"}},
		TimeZone:         newYork,
		WeekStart:        time.Monday,
	}
}

// newYork is the test rules' time zone: DST on 2026-03-08 and 2026-11-01.
// (The zone database is embedded: see calendar.go. Were it missing, the
// rules would fail validation, loudly.)
var newYork, _ = time.LoadLocation("America/New_York")

func testSegments() []string { return []string{"new", "active", "chatty", "blocked", "none"} }

// testOptions fills what the tests leave out with the configuration's
// defaults (internal/config owns them; this package cannot import it).
func testOptions(o Options) Options {
	if o.Rules.Segments == nil && o.Rules.Default.Limits == nil {
		o.Rules = testRules()
	}
	if o.Rules.Channels == nil {
		o.Rules.Channels = []string{"email", "push", "sms", "inapp"}
	}
	if o.Rules.Categories == nil {
		o.Rules.Categories = []string{"marketing", "transactional"}
	}
	if o.Rules.ExemptCategories == nil {
		o.Rules.ExemptCategories = []string{"transactional"}
	}
	if o.Rules.TimeZone == nil {
		o.Rules.TimeZone = time.UTC
	}
	if o.KeyPrefix == "" {
		o.KeyPrefix = "capper"
	}
	if o.IdempotencyWindow == 0 {
		o.IdempotencyWindow = 24 * time.Hour
	}
	if o.SkewWarn == 0 {
		o.SkewWarn = 500 * time.Millisecond
	}
	return o
}

func newEngine(t testing.TB, c redis.UniversalClient, o Options) *Engine {
	t.Helper()
	o.Client = c
	e, err := New(context.Background(), testOptions(o))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return e
}

// counterValue reads a counter or gauge (summed over labels matching
// labels) from a registry.
func counterValue(t testing.TB, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for k, v := range labels {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == k && lp.GetValue() == v {
						found = true
					}
				}
				if !found {
					continue metric
				}
			}
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			}
		}
	}
	return sum
}

// crc16 is Redis Cluster's key hash (XMODEM).
func crc16(b string) uint16 {
	var crc uint16
	for i := 0; i < len(b); i++ {
		crc ^= uint16(b[i]) << 8
		for j := 0; j < 8; j++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// userSlot is the cluster slot of a user's record (the hash tag is the
// user's bucket).
func userSlot(uid uint64) int {
	return int(crc16("b"+strconv.FormatUint(uid/bucketSize, 10)) % 16384)
}

// cmdStat is one line of INFO commandstats.
type cmdStat struct {
	calls       int64
	usec        int64
	usecPerCall float64
}

// commandStat reads INFO commandstats of one node for a command (lower case).
func commandStat(c *redis.Client, name string) (cmdStat, error) {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		return cmdStat{}, err
	}
	var s cmdStat
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+name+":")
		if !ok {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "calls":
				s.calls, _ = strconv.ParseInt(v, 10, 64)
			case "usec":
				s.usec, _ = strconv.ParseInt(v, 10, 64)
			case "usec_per_call":
				s.usecPerCall, _ = strconv.ParseFloat(v, 64)
			}
		}
	}
	return s, nil
}

// evalCalls is the number of EVALSHA and EVAL calls a node has run.
func evalCalls(t testing.TB, c *redis.Client) int64 {
	t.Helper()
	var n int64
	for _, cmd := range []string{"evalsha", "eval"} {
		s, err := commandStat(c, cmd)
		if err != nil {
			t.Fatalf("commandstats: %v", err)
		}
		n += s.calls
	}
	return n
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// readMark is a bucket's mark (layout.go: xField) of this version.
func readMark(m string) (x, y int64, ok bool) {
	if len(m) != markSize || m[0] != 0 {
		return 0, 0, false
	}
	return u32(m, 1), u32(m, 1+timeSize), true
}
