package dispatch

import (
	"context"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/capper-dev/capper/internal/kafka"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/control"
	"github.com/capper-dev/capper/internal/objstore"
	"github.com/capper-dev/capper/internal/plans"
)

// documentedHeader is one row of the header table of
// docs/reference/event-contract.md.
type documentedHeader struct {
	on     map[string]bool // "deliveries", "suppressed", "dead-letter"
	values []string        // the backticked values of the value column
}

// readmeHeaders parses the header table of docs/reference/event-contract.md
// ("| `capper-...` | on | value |").
func readmeHeaders(t *testing.T) map[string]documentedHeader {
	t.Helper()
	data, err := os.ReadFile("../../docs/reference/event-contract.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| `(capper-[a-z-]+)` \\| ([^|]+) \\| (.+) \\|$")
	tick := regexp.MustCompile("`([^`]+)`")
	out := map[string]documentedHeader{}
	for _, line := range strings.Split(string(data), "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		h := documentedHeader{on: map[string]bool{}}
		for _, topic := range []string{"deliveries", "suppressed", "dead-letter"} {
			h.on[topic] = strings.Contains(m[2], topic)
		}
		for _, v := range tick.FindAllStringSubmatch(m[3], -1) {
			h.values = append(h.values, v[1])
		}
		out[m[1]] = h
	}
	if len(out) < 10 {
		t.Fatalf("found %d header rows in docs/reference/event-contract.md; the table moved?", len(out))
	}
	return out
}

// TestHeadersMatchREADME runs every kind of outcome through real workers
// (enforcing, shadow, failing open) and checks each capper-* header of each
// output record against the event contract's table: documented, on a topic the
// table says, with a value of the documented form; and every documented
// header shows up where it is documented. A max-0 limit says -1.
func TestHeadersMatchREADME(t *testing.T) {
	doc := readmeHeaders(t)
	e := newEnv(t)
	e.engine = e.newEngineWith(t, capping.Rules{
		Default: capping.Policy{Limits: []capping.Limit{
			{Name: "no-sms", Window: time.Hour, Max: 0, Where: capping.Where{Channels: []string{"sms"}}},
			{Name: "daily", Window: 24 * time.Hour, Max: 2},
		}},
		Channels: testChannels, Categories: testCategories, ExemptCategories: []string{"transactional"},
		Overrides: capping.Overrides{Campaigns: []string{"outage"}},
		TimeZone:  time.UTC,
	})
	run := func(in []kafka.Message, total int, mut func(*Options)) {
		t.Helper()
		e.kafka.Produce(t, tIn, in)
		r := e.start(mut)
		e.waitOutcomes(total)
		r.cancel()
		if err := r.wait(t); err != nil {
			t.Fatal(err)
		}
	}
	msg := func(user int, value []byte) kafka.Message {
		return kafka.Message{Key: []byte(strconv.Itoa(user)), Value: value}
	}
	first := []kafka.Message{
		msg(1, intentValue("a1", 1, "push", "")), msg(1, intentValue("a2", 1, "push", "")), // allowed
		msg(1, intentValue("a3", 1, "push", "")),                                       // capped: daily
		msg(1, intentValue("a1", 1, "push", "")),                                       // duplicate
		msg(2, intentValue("s1", 2, "sms", "")),                                        // capped: max 0
		msg(3, intentValue("t1", 3, "push", `,"category":"transactional"`)),            // exempt
		msg(4, intentValue("x1", 4, "fax", "")),                                        // invalid
		msg(4, intentValue("x2", 4, "push", `,"p":"`+strings.Repeat("z", 70_000)+`"`)), // oversize
		msg(7, intentOf("o1", 7, "outage", "sms", `,"capping":"bypass"`)),              // override: bypass
		msg(8, intentOf("o2", 8, "outage", "push", `,"capping":"bypass-uncounted"`)),   // override: bypass-uncounted
		msg(9, intentOf("o3", 9, "c", "sms", `,"capping":"bypass"`)),                   // override refused, capped
		msg(9, intentOf("o4", 9, "c", "push", `,"capping":"bypass"`)),                  // override refused, allowed
	}
	run(first, len(first), nil)
	second := []kafka.Message{msg(5, intentValue("b1", 5, "sms", ""))} // shadow-capped
	run(second, len(first)+len(second), func(o *Options) { o.Shadow = true })
	// Two campaign plans of a higher priority book both daily slots of
	// users 10 and 11: held (capper-held-for), and held in shadow mode.
	withPlans := func(o *Options) { o.Plans = heldPlans(t, 10, 11) }
	held := []kafka.Message{msg(10, intentValue("h1", 10, "push", ""))}
	run(held, len(first)+len(second)+len(held), withPlans)
	shadowHeld := []kafka.Message{msg(11, intentValue("h2", 11, "push", ""))}
	run(shadowHeld, len(first)+len(second)+len(held)+len(shadowHeld), func(o *Options) { withPlans(o); o.Shadow = true })
	// A stopped campaign's intent: cancelled, naming the control record.
	stopped := []kafka.Message{msg(12, intentOf("k1", 12, "spring-sale", "push", ""))}
	run(stopped, len(first)+len(second)+len(held)+len(shadowHeld)+len(stopped), func(o *Options) {
		o.Control = fixedControl{control.NewSnapshot([]*control.Entry{{
			Record: control.Record{Campaign: "spring-sale", State: control.Stopped, Reason: "wrong price"},
			Pos:    control.Position{Topic: "capper-control", Offset: 3}}}, nil)}
		o.MaxPause = time.Hour
		o.Tiers = []Tier{{Delay: time.Minute, Output: Output{"delay-1m", &kafka.Writer{}}}}
	})
	e.redis.Kill()
	third := []kafka.Message{msg(6, intentValue("c1", 6, "push", ""))} // failed open
	run(third, len(first)+len(second)+len(held)+len(shadowHeld)+len(stopped)+len(third), func(o *Options) { o.FailOpen = true })

	o := e.read()
	seen := map[string]map[string]bool{}
	overrides := map[string]bool{}
	source := regexp.MustCompile(`^` + tIn + `/\d+/\d+$`)
	for topic, list := range map[string][]kafka.Message{"deliveries": o.del, "suppressed": o.sup, "dead-letter": o.dlq} {
		for _, m := range list {
			for _, h := range m.Headers {
				if !strings.HasPrefix(h.Key, "capper-") {
					continue
				}
				d, ok := doc[h.Key]
				if !ok || !d.on[topic] {
					t.Errorf("%s on %s is not in the event contract's table for that topic", h.Key, topic)
					continue
				}
				if seen[h.Key] == nil {
					seen[h.Key] = map[string]bool{}
				}
				seen[h.Key][topic] = true
				v := string(h.Value)
				var bad bool
				switch h.Key {
				case HeaderDecision:
					bad = !slices.Contains(d.values, v)
				case HeaderOverride:
					bad = !slices.Contains(d.values, v)
					overrides[v] = true
				case HeaderRetryAfter:
					n, err := strconv.ParseInt(v, 10, 64)
					bad = err != nil || n < -1
					if headerValue(m, HeaderLimit) == "no-sms" && n != -1 {
						t.Errorf("retry-after of the max-0 limit is %q, want -1", v)
					}
				case HeaderDecidedAt:
					_, err := time.Parse(TimeLayout, v)
					bad = err != nil || !strings.HasSuffix(v, "Z") || len(v) != len("2026-11-21T16:00:00.000Z")
				case HeaderSource:
					bad = !source.MatchString(v)
				case HeaderDuplicate, HeaderUnchecked, HeaderTruncated:
					bad = v != "true"
				case HeaderHeldFor:
					bad = v != "flash" || headerValue(m, HeaderLimit) != "daily"
				}
				if bad {
					t.Errorf("%s on %s: %q is not of the documented form (%v)", h.Key, topic, v, d.values)
				}
			}
		}
	}
	for name, d := range doc {
		for topic, on := range d.on {
			if on && !seen[name][topic] {
				t.Errorf("%s is documented on %s but never appeared there", name, topic)
			}
		}
	}
	for _, v := range doc[HeaderOverride].values {
		if !overrides[v] {
			t.Errorf("%s: %s is documented but never appeared", HeaderOverride, v)
		}
	}
}

// heldPlans is a set of two high-priority plans, flash (ending first) and
// later, both pushes within the hour to users.
func heldPlans(t *testing.T, users ...uint32) *plans.Current {
	t.Helper()
	ctx := context.Background()
	st, err := objstore.Open(ctx, t.TempDir(), objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	aud, err := roaring.BitmapOf(users...).ToBytes()
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range []string{"flash", "later"} {
		spec := &plans.Spec{Campaign: c, Priority: "high", Starts: now, Ends: now.Add(time.Duration(i+1) * time.Hour),
			Message: plans.Message{Channel: "push", Category: "marketing"}}
		if _, err := plans.Publish(ctx, st, spec, capping.High, aud, uint64(len(users)), now); err != nil {
			t.Fatal(err)
		}
	}
	set, err := plans.Load(ctx, st, "", nil, now)
	if err != nil {
		t.Fatal(err)
	}
	var cur plans.Current
	cur.Store(set)
	return &cur
}

// fixedControl is a campaign control state that does not change.
type fixedControl struct{ s *control.Snapshot }

func (f fixedControl) Load() *control.Snapshot { return f.s }
