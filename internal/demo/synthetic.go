package demo

// The demo's synthetic data: a segment snapshot and a campaign blast.

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/capper-dev/capper/internal/kafka"

	"github.com/capper-dev/capper/internal/objstore"
	"github.com/capper-dev/capper/internal/segbuild"
	"github.com/capper-dev/capper/internal/segments"
)

// Segment mix of the synthetic snapshot: a realistic app has few new users,
// many active and a long dormant tail; the rest are in no segment.
var segmentMix = []struct {
	name  string
	share float64
}{{"new", 0.15}, {"active", 0.50}, {"dormant", 0.30}}

// BuildSnapshot publishes a synthetic snapshot of users [0, users) to st
// with the segment-builder's code path (segbuild.Builder and Publish).
func BuildSnapshot(ctx context.Context, st objstore.Store, users int, seed uint64, now func() time.Time) (*segments.Manifest, error) {
	return buildSnapshot(ctx, st, users, seed, now, nil)
}

// userRange is a segment of users [from, to), beside the synthetic mix.
type userRange struct {
	segment  string
	from, to int
}

// buildSnapshot is BuildSnapshot with more segments of given users (the
// demo's sections, above the blast's users): users [0, users) are drawn
// as BuildSnapshot draws them.
func buildSnapshot(ctx context.Context, st objstore.Store, users int, seed uint64, now func() time.Time, extra []userRange) (*segments.Manifest, error) {
	names := make([]string, len(segmentMix))
	for i, s := range segmentMix {
		names[i] = s.name
	}
	for _, e := range extra {
		if !slices.Contains(names, e.segment) {
			names = append(names, e.segment)
		}
	}
	b := segbuild.NewBuilder(segbuild.BuilderOptions{Segments: names})
	r := rand.New(rand.NewPCG(seed, 1))
	for u := 0; u < users; u++ {
		x := r.Float64()
		for _, s := range segmentMix {
			if x < s.share {
				if err := b.Add(uint64(u), s.name, segbuild.Position{Source: "synthetic", Line: int64(u + 1)}); err != nil {
					return nil, fmt.Errorf("synthetic snapshot: %w", err)
				}
				break
			}
			x -= s.share
		}
	}
	for _, e := range extra {
		for u := e.from; u < e.to; u++ {
			if err := b.Add(uint64(u), e.segment, segbuild.Position{Source: "synthetic", Line: int64(u + 1)}); err != nil {
				return nil, fmt.Errorf("synthetic snapshot: %w", err)
			}
		}
	}
	build, err := b.Finish(ctx)
	if err != nil {
		return nil, fmt.Errorf("synthetic snapshot: %w", err)
	}
	m, err := segbuild.Publish(ctx, st, build, segbuild.PublishOptions{Now: now})
	if err != nil {
		return nil, fmt.Errorf("synthetic snapshot: %w", err)
	}
	return m, nil
}

// BlastOptions shapes a campaign blast.
type BlastOptions struct {
	Users     int
	Intents   int
	Campaigns int      // default 6
	Channels  []string // default email, push, sms, inapp
	// Shares of the intents (defaults: 4% repeats of an earlier id, 1%
	// malformed, 5% transactional).
	RepeatShare, MalformedShare, TransactionalShare float64
	Seed                                            uint64
	Now                                             time.Time
}

// Blast returns the send-intents of several campaigns over a Zipf-skewed user
// population, so that many users get several intents, with some repeated ids
// (a scheduler retrying), malformed records and transactional intents. The
// intents use the policy's vocabulary: tags (promo, sale, newsletter),
// priorities, users' time zones, and an outage notice that may bypass the
// caps (campaign service-outage), beside campaigns that ask to and may not.
func Blast(o BlastOptions) []kafka.Message {
	if o.Campaigns <= 0 {
		o.Campaigns = 6
	}
	if len(o.Channels) == 0 {
		o.Channels = []string{"email", "push", "sms", "inapp"}
	}
	if o.RepeatShare == 0 && o.MalformedShare == 0 && o.TransactionalShare == 0 {
		o.RepeatShare, o.MalformedShare, o.TransactionalShare = 0.04, 0.01, 0.05
	}
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	r := rand.New(rand.NewPCG(o.Seed, 2))
	zipf := rand.NewZipf(rand.New(rand.NewPCG(o.Seed, 3)), 1.2, 4, uint64(max(o.Users-1, 1)))
	// Channel weights: push and email dominate marketing traffic.
	channelWeights := []float64{0.35, 0.45, 0.05, 0.15}
	out := make([]kafka.Message, 0, o.Intents)
	created := o.Now.UTC().Format(time.RFC3339)
	for i := 0; i < o.Intents; i++ {
		x := r.Float64()
		switch {
		case x < o.MalformedShare:
			out = append(out, malformed(r, i))
			continue
		case x < o.MalformedShare+o.RepeatShare && len(out) > 0:
			prev := out[r.IntN(len(out))]
			out = append(out, kafka.Message{Key: prev.Key, Value: prev.Value})
			continue
		}
		user := zipf.Uint64()
		campaign := fmt.Sprintf("campaign-%d", r.IntN(o.Campaigns)+1)
		category := "marketing"
		if r.Float64() < o.TransactionalShare {
			category = "transactional"
		}
		ch := o.Channels[pick(r, channelWeights, len(o.Channels))]
		intent := map[string]any{
			"id": fmt.Sprintf("%s-%d", campaign, i), "user_id": user, "campaign_id": campaign,
			"channel": ch, "category": category, "created_at": created,
			"payload": map[string]string{"template": campaign + "-" + ch},
		}
		switch x := r.Float64(); {
		case x < 0.35:
			intent["tags"] = []string{"promo"}
		case x < 0.45:
			intent["tags"] = []string{"sale", "flash"}
		case x < 0.55:
			intent["tags"] = []string{"newsletter"}
		}
		switch x := r.Float64(); {
		case x < 0.10:
			intent["priority"] = "high"
		case x < 0.25:
			intent["priority"] = "low"
		}
		if z := timeZones[user%uint64(len(timeZones))]; z != "" {
			intent["time_zone"] = z
		}
		switch x := r.Float64(); {
		case x < 0.01: // the outage notice: listed in capping.overrides
			intent["id"], intent["campaign_id"], intent["capping"] = fmt.Sprintf("outage-%d", i), "service-outage", "bypass"
		case x < 0.015: // asks, may not
			intent["capping"] = "bypass"
		}
		v, _ := json.Marshal(intent)
		out = append(out, kafka.Message{Key: []byte(strconv.FormatUint(user, 10)), Value: v})
	}
	return out
}

// timeZones of the users, by id ("" the policy's).
var timeZones = []string{"", "Asia/Singapore", "America/New_York", "Europe/Berlin", "Pacific/Kiritimati"}

func pick(r *rand.Rand, weights []float64, n int) int {
	if n != len(weights) {
		return r.IntN(n)
	}
	x := r.Float64()
	for i, w := range weights {
		if x < w {
			return i
		}
		x -= w
	}
	return n - 1
}

// malformed returns one of the ways a producer gets an intent wrong.
func malformed(r *rand.Rand, i int) kafka.Message {
	id := strconv.Itoa(i)
	switch r.IntN(5) {
	case 0:
		return kafka.Message{Key: []byte("1"), Value: []byte(`{"id":"broken-` + id + `",`)}
	case 1:
		return kafka.Message{Key: []byte("1"), Value: []byte(`{"id":"nochan-` + id + `","user_id":1,"campaign_id":"c"}`)}
	case 2:
		return kafka.Message{Key: []byte("1"), Value: []byte(`{"id":"fax-` + id + `","user_id":1,"campaign_id":"c","channel":"fax"}`)}
	case 3:
		return kafka.Message{Key: []byte("-5"), Value: []byte(`{"id":"neg-` + id + `","user_id":-5,"campaign_id":"c","channel":"push"}`)}
	default:
		return kafka.Message{Key: []byte("1"), Value: []byte(`{"id":"big-` + id + `","user_id":1,"campaign_id":"c","channel":"push","payload":"` + strings.Repeat("x", 70<<10) + `"}`)}
	}
}

// SaveIntents writes the values of msgs to path, one per line, gzipped
// when path ends in .gz. The blast's values are compact JSON (or malformed
// on purpose, without a newline), so a line is a record.
func SaveIntents(path string, msgs []kafka.Message) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("demo: --save-intents: %w", err)
	}
	defer func() {
		if cerr := f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("demo: --save-intents: %w", cerr)
		}
	}()
	var w io.Writer = f
	var gz *gzip.Writer
	if strings.HasSuffix(path, ".gz") {
		gz = gzip.NewWriter(f)
		w = gz
	}
	bw := bufio.NewWriter(w)
	for _, m := range msgs {
		bw.Write(m.Value)
		bw.WriteByte('\n')
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("demo: --save-intents %s: %w", path, err)
	}
	if gz != nil {
		if err := gz.Close(); err != nil {
			return fmt.Errorf("demo: --save-intents %s: %w", path, err)
		}
	}
	return nil
}
