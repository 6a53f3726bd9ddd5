package demo

// Send pacing's throttle feedback: a simulated FCM that accepts fewer
// pushes a second than the budget, answering the rest "throttled": the
// sender hands each back with a delivery status carrying the delivery (as
// a sender reports its provider's 429s), and capper holds it again ahead
// of its lane; then FCM accepts all of them. The budget's effective rate,
// one in Redis for every worker, follows it down and back up, and every
// push is accepted once.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/capper-dev/capper/internal/app"
	"github.com/capper-dev/capper/internal/audit"
	"github.com/capper-dev/capper/internal/kafka"
	"github.com/capper-dev/capper/internal/pacing"
)

// The throttle part: app-news, a push to every member through FCM, which
// accepts provLow a second for provLowFor (by the wall clock, from its
// first answer), or until the budget's rate has come within 10% of it if
// that takes longer (a loaded machine decides fewer pushes a second, so
// fewer are throttled), provLowMax at most; then paceRate.
const (
	campNews   = "app-news"
	provLow    = 120
	provLowFor = 8 * time.Second
	provLowMax = 30 * time.Second
	// followFor bounds the part: provLowMax, the climb back (about 12 s),
	// the last pushes, and room for a loaded machine.
	followFor = 90 * time.Second
)

// throttleRun is what the throttle part saw (wall-clock spans).
type throttleRun struct {
	answered, throttled int
	// once: the pushes FCM accepted exactly once; twice: more than once
	// (of members members).
	once, twice, members int
	lowest               float64       // the lowest effective rate seen
	lowFor               time.Duration // how long FCM accepted provLow a second
	downIn               time.Duration // from the first throttled answer to within 10% of provLow
	backIn               time.Duration // from FCM's raise to within 10% of the rate
	done                 bool          // the part ran
}

// provider is the simulated FCM.
type provider struct {
	mu         sync.Mutex
	fcm        audit.Provider
	accepted   map[string]int   // per push (its id): how many times FCM accepted it
	read       map[int]int64    // per deliveries partition: the offset after the last record answered
	pending    []kafka.Message  // throttled statuses to write
	now        func() time.Time // the demo's clock, for the statuses' at
	handedBack *atomic.Int64    // statuses written: inputs of their own (runner.handedBack)
}

// answer takes one delivery: accepted while fewer than its capacity were
// this second, else handed back (a throttled status with the delivery). A
// duplicate is dropped: its first was answered.
func (p *provider) answer(m kafka.Message) error {
	if headerOf(m, "capper-duplicate") == "true" {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fcm.Answer(time.Now()) {
		p.accepted[jsonString(m.Value, "id")]++
		return nil
	}
	v, err := audit.HandBackStatus(m, p.now())
	if err != nil {
		return fmt.Errorf("demo: hand a throttled push back: %w", err)
	}
	p.pending = append(p.pending, kafka.Message{Key: m.Key, Value: v})
	return nil
}

// follow answers app-news' deliveries of partition from offset on.
func (p *provider) follow(ctx context.Context, t *kafka.Tail, partition int, offset int64) {
	for {
		m, err := t.Read(ctx, partition, offset)
		if err != nil {
			return
		}
		offset = m.Offset + 1
		if jsonString(m.Value, "campaign_id") == campNews {
			if err := p.answer(m); err != nil {
				return
			}
		}
		p.mu.Lock()
		p.read[partition] = offset
		p.mu.Unlock()
	}
}

// answeredAll reports whether the provider answered every delivery the
// topic holds now.
func (p *provider) answeredAll(ctx context.Context, tail *kafka.Tail) bool {
	ends, err := tail.Ends(ctx)
	if err != nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for part, end := range ends {
		if p.read[part] < end {
			return false
		}
	}
	return true
}

// flush writes the throttled statuses every 100 ms.
func (p *provider) flush(ctx context.Context, brokers []string) error {
	for {
		p.mu.Lock()
		out := p.pending
		p.pending = nil
		p.mu.Unlock()
		if len(out) > 0 {
			if err := produce(context.WithoutCancel(ctx), brokers, topicStatus, out); err != nil {
				return err
			}
			p.handedBack.Add(int64(len(out))) // each an input, whose outcome the demo waits for
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// throttle plays the part: app-news produced, FCM answering, the
// effective rate read from Redis every 100 ms until every push is decided
// and the rate is back within 10% of the budget's.
func (p *play) throttle(ctx context.Context) error {
	wall := time.Now()
	tail, err := kafka.NewTail(kafka.ToolOptions(p.brokers), topicDel)
	if err != nil {
		return fmt.Errorf("demo: follow %s: %w", topicDel, err)
	}
	defer tail.Close()
	ends, err := tail.Ends(ctx)
	if err != nil {
		return fmt.Errorf("demo: follow %s: %w", topicDel, err)
	}
	prov := &provider{fcm: audit.Provider{Low: provLow, High: paceRate, LowFor: provLowMax},
		now: p.clk.Now, accepted: map[string]int{}, read: map[int]int64{}, handedBack: &p.handedBack}
	pctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for part, off := range ends {
		wg.Go(func() { prov.follow(pctx, tail, part, off) })
	}
	flushErr := make(chan error, 1)
	wg.Go(func() { flushErr <- prov.flush(pctx, p.brokers) })
	defer func() { stop(); wg.Wait() }()
	news := p.sec.pushes(campNews, "", "", 0, 1, p.clk.Now())
	if err := p.produce(ctx, news); err != nil {
		return err
	}
	r, err := p.followRate(ctx, prov, tail)
	if err != nil {
		return err
	}
	stop()
	wg.Wait()
	if err := <-flushErr; err != nil {
		return err
	}
	prov.mu.Lock()
	accepted, throttled := prov.fcm.Answers()
	r.answered, r.throttled = accepted+throttled, throttled
	r.lowFor = prov.fcm.Raised.Sub(prov.fcm.First)
	for _, n := range prov.accepted {
		if n == 1 {
			r.once++
		} else {
			r.twice++
		}
	}
	prov.mu.Unlock()
	// The pushes delivered (not handed back), each FCM's to accept once.
	dels, err := audit.ReadTopic(ctx, p.brokers, topicDel)
	if err != nil {
		return fmt.Errorf("demo: read %s: %w", topicDel, err)
	}
	sts, err := audit.ReadTopic(ctx, p.brokers, topicStatus)
	if err != nil {
		return fmt.Errorf("demo: read %s: %w", topicStatus, err)
	}
	for _, m := range audit.Delivered(dels, sts) {
		if jsonString(m.Value, "campaign_id") == campNews && headerOf(m, "capper-duplicate") != "true" {
			r.members++
		}
	}
	p.sec.throttle = r
	p.step("throttle feedback: %d %s pushes; FCM throttled %d; %s's effective rate down to %.0f/s and back to %d/s; %s",
		len(news), campNews, r.throttled, budgetName, r.lowest, paceRate, time.Since(wall).Round(time.Millisecond))
	return nil
}

// followRate samples the budget's effective rate until every input is
// decided (the statuses that handed pushes back among them), FCM answered
// every delivery (tail's topic: nothing to hand back left), and the rate
// is back within 10% of the budget's (followFor at most).
func (p *play) followRate(ctx context.Context, prov *provider, tail *kafka.Tail) (throttleRun, error) {
	rdb, err := app.NewRedisClient(p.cfg)
	if err != nil {
		return throttleRun{}, err
	}
	defer rdb.Close()
	l := &pacing.RedisLeaser{Client: rdb, Prefix: p.cfg.Capping.KeyPrefix}
	b := &pacing.Budget{Name: budgetName, Rate: paceRate}
	r := throttleRun{lowest: paceRate, done: true}
	deadline := time.Now().Add(followFor)
	for {
		e, err := l.Effective(ctx, b)
		if err != nil {
			return r, fmt.Errorf("demo: read %s's effective rate: %w", budgetName, err)
		}
		now := time.Now()
		prov.mu.Lock()
		from, raised, pending := prov.fcm.ThrottledFrom, prov.fcm.Raised, len(prov.pending)
		r.lowest = min(r.lowest, e.Rate)
		if r.downIn == 0 && !from.IsZero() && e.Rate <= 1.1*provLow {
			r.downIn = now.Sub(from)
			// Followed: FCM accepts paceRate from provLowFor on, or now.
			prov.fcm.LowFor = min(prov.fcm.LowFor, max(provLowFor, now.Sub(prov.fcm.First)))
		}
		prov.mu.Unlock()
		if r.backIn == 0 && !raised.IsZero() && r.downIn > 0 && e.Rate >= 0.9*paceRate {
			r.backIn = now.Sub(raised)
		}
		if r.backIn > 0 && pending == 0 && decidedAll(p.counts()) && prov.answeredAll(ctx, tail) {
			return r, nil
		}
		if now.After(deadline) {
			c := p.counts()
			return r, fmt.Errorf("demo: %s after %s began, %s's effective rate is %.0f/s (lowest %.0f/s), %d handed back not written yet, %d of %d inputs decided: it did not follow FCM down and back up, or not every push was sent",
				followFor, campNews, budgetName, e.Rate, r.lowest, pending, c.final+c.waiting(), c.produced)
		}
		select {
		case <-ctx.Done():
			return r, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
