package main

// BenchmarkPacing's reading of the output topics and Redis, and the
// figures computed from them.

import (
	"cmp"
	"context"
	"errors"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/capper-dev/capper/internal/app"
	"github.com/capper-dev/capper/internal/audit"
	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/dispatch"
)

// pacingOutputs is what the output topics say, reduced to what the
// figures need.
type pacingOutputs struct {
	laneRel      []int64 // released-at (Unix ms) of every delivery that waited in a lane
	exemptDec    []int64 // decided-at of the transactional deliveries
	normalRel    []int64 // released-at of the normal lane's deliveries
	high         []heldSpan
	lastLaneRec  int64             // the last released-at of any lane record (delivered or not)
	lastTokenRel int64             // ... of a lane delivery
	txnIn        []time.Time       // each transactional input's record timestamp
	txnLatency   []time.Duration   // first delivery's record timestamp - its input's
	txnLatencyIn []time.Time       // ... of the input written then
	deliveries   []providerArrival // every delivery, by record timestamp
	blastDel     []bool            // per blast intent: delivered
	blastCanc    []bool            // per blast intent: cancelled
	blastRel     []int64           // released-at of each blast delivery
	blastOther   int               // blast outcomes neither delivered nor cancelled
	duplicates   int
	deadLetters  int
	urgentDel    int
	handedBack   int // deliveries of intents a throttled status handed back
}

type heldSpan struct{ held, rel int64 }

type providerArrival struct {
	at  int64 // record timestamp, Unix ms
	txn int   // transactional: its index, else -1
}

func readPacingOutputs(b *testing.B, addrs []string, sc pacingScale, txnIn []time.Time) pacingOutputs {
	b.Helper()
	o := pacingOutputs{blastDel: make([]bool, sc.blast), blastCanc: make([]bool, sc.blast), txnIn: txnIn}
	txnSeen := make([]bool, len(txnIn))
	ms := func(m *kafka.Message, key string) int64 {
		v := headerOf(m, key)
		if v == "" {
			return 0
		}
		t, err := time.Parse(dispatch.TimeLayout, v)
		if err != nil {
			b.Fatalf("%s %q: %v", key, v, err)
		}
		return t.UnixMilli()
	}
	scanTopic(b, addrs, "deliveries", func(m *kafka.Message) {
		campaign, i := intentOf(b, m)
		if headerOf(m, "capper-duplicate") == "true" {
			o.duplicates++
		}
		if headerOf(m, dispatch.HeaderHandedBack) != "" {
			o.handedBack++
		}
		o.deliveries = append(o.deliveries, providerArrival{at: m.Time.UnixMilli(), txn: -1})
		if lane := headerOf(m, dispatch.HeaderLane); lane != "" {
			rel := ms(m, dispatch.HeaderReleasedAt)
			o.laneRel = append(o.laneRel, rel)
			o.lastLaneRec, o.lastTokenRel = max(o.lastLaneRec, rel), max(o.lastTokenRel, rel)
			waited, err := strconv.ParseInt(headerOf(m, dispatch.HeaderWaited), 10, 64)
			if err != nil {
				b.Fatalf("%s: %v", dispatch.HeaderWaited, err)
			}
			switch lane {
			case paceBudget + "/high":
				o.high = append(o.high, heldSpan{held: rel - waited, rel: rel})
			case paceBudget + "/normal":
				o.normalRel = append(o.normalRel, rel)
			default:
				b.Fatalf("delivery from lane %q", lane)
			}
		}
		switch campaign {
		case paceBlast:
			o.blastDel[i] = true
			if rel := ms(m, dispatch.HeaderReleasedAt); rel > 0 {
				o.blastRel = append(o.blastRel, rel)
			}
		case paceUrgent:
			o.urgentDel++
		case paceReceipts:
			o.exemptDec = append(o.exemptDec, ms(m, "capper-decided-at"))
			o.deliveries[len(o.deliveries)-1].txn = i
			if !txnSeen[i] {
				txnSeen[i] = true
				o.txnLatency = append(o.txnLatency, m.Time.Sub(txnIn[i]))
				o.txnLatencyIn = append(o.txnLatencyIn, txnIn[i])
			}
		}
	})
	scanTopic(b, addrs, "suppressed", func(m *kafka.Message) {
		if headerOf(m, dispatch.HeaderLane) != "" {
			o.lastLaneRec = max(o.lastLaneRec, ms(m, dispatch.HeaderReleasedAt))
		}
		if campaign, i := intentOf(b, m); campaign == paceBlast {
			if headerOf(m, "capper-decision") == dispatch.DecisionCancelled {
				o.blastCanc[i] = true
			} else {
				o.blastOther++
			}
		}
	})
	scanTopic(b, addrs, "send-intents-dlq", func(*kafka.Message) { o.deadLetters++ })
	slices.SortStableFunc(o.deliveries, func(x, y providerArrival) int { return cmp.Compare(x.at, y.at) })
	return o
}

// intentOf reads an intent's campaign and index from its id
// (<campaign>-<i>).
func intentOf(b *testing.B, m *kafka.Message) (string, int) {
	v := string(m.Value)
	i := strings.Index(v, `"id":"`)
	if i < 0 {
		b.Fatalf("no id in %q", v)
	}
	v = v[i+len(`"id":"`):]
	id := v[:strings.IndexByte(v, '"')]
	dash := strings.LastIndexByte(id, '-')
	n, err := strconv.Atoi(id[dash+1:])
	if err != nil {
		b.Fatalf("id %q", id)
	}
	return id[:dash], n
}

func headerOf(m *kafka.Message, key string) string {
	for _, h := range m.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// scanTopic calls f with every record of topic, partition by partition,
// up to the high watermark as of the call (without a group).
func scanTopic(b *testing.B, addrs []string, topic string, f func(m *kafka.Message)) {
	b.Helper()
	ctx := context.Background()
	conn, err := kafka.Dial("tcp", addrs[0])
	if err != nil {
		b.Fatal(err)
	}
	parts, err := conn.ReadPartitions(topic)
	conn.Close()
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range parts {
		c, err := kafka.DialLeader(ctx, "tcp", addrs[0], topic, p.ID)
		if err != nil {
			b.Fatal(err)
		}
		first, last, err := c.ReadOffsets()
		if err != nil {
			b.Fatal(err)
		}
		for next := first; next < last; {
			if _, err := c.Seek(next, kafka.SeekAbsolute); err != nil {
				b.Fatal(err)
			}
			_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
			batch := c.ReadBatch(1, 16<<20)
			for next < last {
				m, err := batch.ReadMessage()
				if err != nil {
					if !errors.Is(err, io.EOF) {
						b.Fatalf("read %s/%d: %v", topic, p.ID, err)
					}
					break
				}
				f(&m)
				next = m.Offset + 1
			}
			_ = batch.Close()
		}
		c.Close()
	}
}

// redisCheck: cancelled blast intents' users, read back from Redis with
// the engine's inspect API (their records count every delivered intent);
// delivered ones as a control.
type redisCheck struct {
	cancelled, cancelledCounted int
	delivered, deliveredCounted int
}

func checkCancelledUncounted(b *testing.B, cfg *config.Config, sc pacingScale, o *pacingOutputs) redisCheck {
	b.Helper()
	ctx := context.Background()
	rdb, err := app.NewRedisClient(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer rdb.Close()
	pol, err := app.LoadPolicy(ctx, cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	eng, err := app.NewEngine(ctx, cfg, pol, rdb, prometheus.NewRegistry(), nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	var canc, del []int
	for i := range sc.blast {
		switch {
		case o.blastDel[i]:
			del = append(del, i)
		case o.blastCanc[i]:
			canc = append(canc, i)
		}
	}
	var r redisCheck
	count := func(i int) int {
		states, err := eng.Inspect(ctx, uint64(1000+i), "none", capping.InspectOptions{At: time.Now()})
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for _, s := range states {
			n += s.Count
		}
		return n
	}
	for k := range min(sc.sample, len(canc)) {
		r.cancelled++
		if count(canc[k*len(canc)/min(sc.sample, len(canc))]) > 0 {
			r.cancelledCounted++
		}
	}
	for k := range min(sc.sample/10, len(del)) {
		r.delivered++
		if count(del[k*len(del)/min(sc.sample/10, len(del))]) > 0 {
			r.deliveredCounted++
		}
	}
	return r
}

// mostInOneSecond is the most of times (ms) within any 1 s.
func mostInOneSecond(ts []int64) int {
	most, _ := audit.BusiestSecond(audit.UnixMillis(ts))
	return most
}

func sortedInts(parts ...[]int64) []int64 {
	var all []int64
	for _, p := range parts {
		all = append(all, p...)
	}
	slices.Sort(all)
	return all
}

// overtaken counts, over the normal lane's releases at r, the high-lane
// intents held before r - 100 ms and released after r (pairs), and the
// releases with at least one. spans not counted: skip reports one to leave
// out.
func overtaken(normal []int64, high []heldSpan, skip func(heldSpan) bool) (pairs, releases int) {
	// Each high intent is "waiting too long" over (held+100ms, rel).
	var from, to []int64
	for _, h := range high {
		if skip != nil && skip(h) {
			continue
		}
		if s := h.held + goalOvertake.Milliseconds(); s < h.rel {
			from, to = append(from, s), append(to, h.rel)
		}
	}
	slices.Sort(from)
	slices.Sort(to)
	for _, r := range normal {
		// started before r, not yet released at r
		started, _ := slices.BinarySearch(from, r) // from < r
		ended, found := slices.BinarySearch(to, r+1)
		_ = found // to <= r
		if n := started - ended; n > 0 {
			pairs += n
			releases++
		}
	}
	return pairs, releases
}

// secondsTable prints, with CAPPER_BENCH_PACING_SECONDS=1, the paced
// run second by second from t0: releases of each lane, exempt sends, and
// p50 releases while a p75 had waited longer than goalOvertake, and the
// slowest transactional push written in that second (input to delivery).
func secondsTable(line func(string, ...any), r *pacingRun) {
	o := &r.out
	var from, to []int64
	for _, h := range o.high {
		if s := h.held + goalOvertake.Milliseconds(); s < h.rel {
			from, to = append(from, s), append(to, h.rel)
		}
	}
	slices.Sort(from)
	slices.Sort(to)
	t0 := r.t0.UnixMilli()
	type row struct {
		high, normal, exempt, bad int
		txnMax                    time.Duration
	}
	rows := map[int64]*row{}
	at := func(ms int64) *row {
		k := (ms - t0) / 1000
		if rows[k] == nil {
			rows[k] = &row{}
		}
		return rows[k]
	}
	for _, h := range o.high {
		at(h.rel).high++
	}
	for _, n := range o.normalRel {
		at(n).normal++
		started, _ := slices.BinarySearch(from, n)
		ended, _ := slices.BinarySearch(to, n+1)
		if started > ended {
			at(n).bad++
		}
	}
	for _, e := range o.exemptDec {
		at(e).exempt++
	}
	for i, in := range o.txnLatencyIn {
		x := at(in.UnixMilli())
		x.txnMax = max(x.txnMax, o.txnLatency[i])
	}
	keys := slices.Sorted(maps.Keys(rows))
	line("   second  high  normal  exempt  p50-while-p75-waited  slowest transactional written then")
	for _, k := range keys {
		x := rows[k]
		line("   %6d  %4d  %6d  %6d  %20d  %s", k, x.high, x.normal, x.exempt, x.bad, x.txnMax.Round(time.Millisecond))
	}
}

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(math.Ceil(q*float64(len(s))))-1)]
}

// providerLatency models a provider that takes deliveries in the order
// they were written, at rate/s: a delivery goes at its arrival or one
// interval after the one before it, whichever is later. It returns each
// transactional delivery's wait from its input's timestamp.
func providerLatency(o *pacingOutputs, rate float64) []time.Duration {
	step := 1000 / rate
	next := math.Inf(-1)
	seen := map[int]bool{}
	var out []time.Duration
	for _, d := range o.deliveries {
		at := math.Max(float64(d.at), next)
		next = at + step
		if d.txn >= 0 && !seen[d.txn] {
			seen[d.txn] = true
			out = append(out, time.UnixMilli(int64(at)).Sub(o.txnIn[d.txn]))
		}
	}
	return out
}
