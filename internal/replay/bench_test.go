package replay_test

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/capper-dev/capper/configs"
	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/demo"
	"github.com/capper-dev/capper/internal/dispatch"
	"github.com/capper-dev/capper/internal/objstore"
	"github.com/capper-dev/capper/internal/policy"
	"github.com/capper-dev/capper/internal/replay"
	"github.com/capper-dev/capper/internal/segments"
)

var benchUsers = flag.Int("replay.users", 1_000_000, "distinct users of BenchmarkReplay's stream")

// Targets of capper replay, printed as ratios beside the figures.
const (
	targetRate    = 500_000 // intents/s on one core, decode + lookup + decide
	targetPerUser = 200     // bytes per distinct user
)

// benchStream is a week of realistic traffic: every user gets 1-5 intents
// (3 on average) at random times, over 40 campaigns, the four channels,
// tags, priorities, five time zones, 5% transactional, 3% repeated ids;
// the users are in the demo's segments (configs/policy.yaml).
type benchStream struct {
	dir     string
	path    string // intents.jsonl
	lines   int
	users   int
	reqs    []capping.Request // the same intents, decoded, with segments
	policy  replay.Policy
	lookup  func(uint64) string
	version string
}

var (
	streamOnce sync.Once
	stream     *benchStream
	streamErr  error
)

func getStream(b *testing.B) *benchStream {
	b.Helper()
	streamOnce.Do(func() { stream, streamErr = makeStream(*benchUsers) })
	if streamErr != nil {
		b.Fatal(streamErr)
	}
	return stream
}

func makeStream(users int) (*benchStream, error) {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "replay-bench-")
	if err != nil {
		return nil, err
	}
	s := &benchStream{dir: dir, path: filepath.Join(dir, "intents.jsonl"), users: users}
	st, err := objstore.Open(ctx, filepath.Join(dir, "snapshot"), objstore.Options{})
	if err != nil {
		return nil, err
	}
	if _, err := demo.BuildSnapshot(ctx, st, users, 1, time.Now); err != nil {
		return nil, err
	}
	snap, err := segments.Load(ctx, st, segments.LoadOptions{})
	if err != nil {
		return nil, err
	}
	s.lookup, s.version = snap.Lookup, snap.Version()
	d, err := policy.Parse(configs.ExamplePolicy())
	if err != nil {
		return nil, err
	}
	rules, problems := d.Rules()
	if err := problems.Err(); err != nil {
		return nil, err
	}
	s.policy = replay.Policy{Name: "configs/policy.yaml", Rules: rules, Decoder: dispatch.DecoderOptions{
		Channels: d.Channels, Categories: d.Categories, DefaultCategory: d.DefaultCategory, MaxBytes: config.Default().Kafka.MaxIntentBytes}}

	type event struct {
		at   int64 // ms
		user uint64
		n    int
	}
	r := rand.New(rand.NewPCG(7, 8))
	start := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC).UnixMilli()
	week := int64(7 * 24 * time.Hour / time.Millisecond)
	var events []event
	for u := range users {
		for k := range 1 + r.IntN(5) {
			events = append(events, event{at: start + r.Int64N(week), user: uint64(u), n: k})
		}
	}
	slices.SortFunc(events, func(a, b event) int { return int(a.at - b.at) })
	f, err := os.Create(s.path)
	if err != nil {
		return nil, err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	channels := []string{"push", "push", "email", "email", "email", "inapp", "sms"}
	tags := []string{`,"tags":["promo"]`, `,"tags":["sale","flash"]`, `,"tags":["newsletter"]`, "", "", ""}
	zones := []string{"", `,"time_zone":"Asia/Singapore"`, `,"time_zone":"America/New_York"`, `,"time_zone":"Europe/Berlin"`, `,"time_zone":"Asia/Kolkata"`}
	dec, err := dispatch.NewDecoder(s.policy.Decoder)
	if err != nil {
		return nil, err
	}
	var line []byte
	for i, e := range events {
		camp := "campaign-" + strconv.Itoa(r.IntN(40))
		id := camp + "-" + strconv.FormatUint(e.user, 10) + "-" + strconv.Itoa(e.n)
		if r.IntN(100) < 3 && i > 0 { // a scheduler's retry
			id = "retry-" + strconv.FormatUint(e.user, 10)
		}
		cat := "marketing"
		if r.IntN(100) < 5 {
			cat = "transactional"
		}
		line = append(line[:0], `{"id":"`...)
		line = append(line, id...)
		line = append(line, `","user_id":`...)
		line = strconv.AppendUint(line, e.user, 10)
		line = append(line, `,"campaign_id":"`...)
		line = append(line, camp...)
		line = append(line, `","channel":"`...)
		line = append(line, channels[r.IntN(len(channels))]...)
		line = append(line, `","category":"`...)
		line = append(line, cat...)
		line = append(line, `","created_at":"`...)
		line = time.UnixMilli(e.at).UTC().AppendFormat(line, "2006-01-02T15:04:05.000Z07:00")
		line = append(line, '"')
		line = append(line, tags[r.IntN(len(tags))]...)
		line = append(line, zones[e.user%uint64(len(zones))]...)
		line = append(line, `,"payload":{"template":"t1"}}`...)
		in, err := dec.DecodeValue(line)
		if err != nil {
			return nil, fmt.Errorf("generated %s: %w", line, err)
		}
		in.ID, in.CampaignID, in.Channel, in.Category = string([]byte(in.ID)), string([]byte(in.CampaignID)), string([]byte(in.Channel)), string([]byte(in.Category))
		in.Tags = slices.Clone(in.Tags)
		for k, t := range in.Tags {
			in.Tags[k] = string([]byte(t))
		}
		req := dispatch.NewRequest(&in, s.lookup(in.UserID))
		req.At = in.CreatedAt
		s.reqs = append(s.reqs, req)
		line = append(line, '\n')
		if _, err := w.Write(line); err != nil {
			return nil, err
		}
	}
	s.lines = len(events)
	if err := w.Flush(); err != nil {
		return nil, err
	}
	return s, f.Close()
}

func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkReplay: one core (GOMAXPROCS 1). decide: the decoded requests
// through a Memory; jsonl: the whole replay from an intents.jsonl file
// (read, decode, snapshot lookup, decide, report). Each iteration is one
// pass over the stream; B/user is the heap the replay holds per distinct
// user at the end of a pass (decide: the Memory alone; jsonl: both
// policies' Memory and the per-user counts of a baseline + candidate run).
func BenchmarkReplay(b *testing.B) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	s := getStream(b)
	b.Logf("stream: %d intents of %d users over a week, snapshot %s", s.lines, s.users, s.version)

	b.Run("decide", func(b *testing.B) {
		var perUser float64
		for range b.N {
			b.StopTimer()
			before := heapAlloc()
			mem, err := capping.NewMemory(capping.MemoryOptions{Rules: s.policy.Rules, IdempotencyWindow: 24 * time.Hour})
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			for i := range s.reqs {
				mem.Decide(&s.reqs[i])
			}
			b.StopTimer()
			perUser = float64(heapAlloc()-before) / float64(s.users)
			runtime.KeepAlive(mem)
			b.StartTimer()
		}
		report(b, s.lines, perUser)
	})
	for _, sides := range []int{1, 2} {
		b.Run(fmt.Sprintf("jsonl/%d-policies", sides), func(b *testing.B) {
			var perUser float64
			for range b.N {
				b.StopTimer()
				before := heapAlloc()
				src, err := replay.OpenJSONL(s.path)
				if err != nil {
					b.Fatal(err)
				}
				o := replay.Options{Candidate: s.policy, Lookup: s.lookup, Snapshot: s.version, IdempotencyWindow: 24 * time.Hour,
					Progress: func(n int64) {
						if n == int64(s.lines) { // the end: every side's state is still held
							b.StopTimer()
							perUser = float64(heapAlloc()-before) / float64(s.users)
							b.StartTimer()
						}
					}}
				if sides == 2 {
					base := s.policy
					o.Baseline = &base
				}
				b.StartTimer()
				rep, err := replay.Run(context.Background(), src, o)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				src.Close()
				if rep.Sides[0].Intents != int64(s.lines) {
					b.Fatalf("%d intents replayed of %d", rep.Sides[0].Intents, s.lines)
				}
				b.StartTimer()
			}
			report(b, s.lines, perUser)
		})
	}
}

func report(b *testing.B, lines int, perUser float64) {
	rate := float64(lines) * float64(b.N) / b.Elapsed().Seconds()
	b.ReportMetric(rate, "intents/s")
	b.ReportMetric(perUser, "B/user")
	b.ReportMetric(rate/targetRate, "x-rate-target")
	b.ReportMetric(targetPerUser/perUser, "x-memory-target")
	b.Logf("%.0f intents/s (%.2fx the %d target), %.0f B/user (target %d: %.2fx)", rate, rate/targetRate, targetRate, perUser, targetPerUser, targetPerUser/perUser)
}
