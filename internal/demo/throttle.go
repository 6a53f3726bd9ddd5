package demo

// Send pacing's throttle feedback: a simulated FCM that accepts fewer
// pushes a second than the budget, answering the rest "throttled" with a
// delivery status each (as a sender reports its provider's 429s), then
// all of them; the budget's effective rate, one in Redis for every
// worker, follows it down and back up.

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/capper-dev/capper/internal/app"
	"github.com/capper-dev/capper/internal/dispatch"
	"github.com/capper-dev/capper/internal/kafka"
	"github.com/capper-dev/capper/internal/pacing"
)

// The throttle part: app-news, a push to every member through FCM, which
// accepts provLow a second for provLowFor (by the wall clock, from its
// first answer), then paceRate.
const (
	campNews   = "app-news"
	provLow    = 120
	provLowFor = 8 * time.Second
)

// throttleRun is what the throttle part saw (wall-clock spans).
type throttleRun struct {
	answered, throttled int
	lowest              float64       // the lowest effective rate seen
	downIn              time.Duration // from the first throttled answer to within 10% of provLow
	backIn              time.Duration // from FCM's raise to within 10% of the rate
	done                bool          // the part ran
}

// provider is the simulated FCM.
type provider struct {
	mu                    sync.Mutex
	first, firstThrottled time.Time
	raised                time.Time
	second                int64
	inSecond              int
	answered, throttled   int
	pending               []kafka.Message  // throttled statuses to write
	now                   func() time.Time // the demo's clock, for the statuses' at
}

// answer takes one delivery: accepted while fewer than its capacity were
// this second, else a throttled status.
func (p *provider) answer(m kafka.Message) {
	wall := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.first.IsZero() {
		p.first = wall
	}
	capacity := provLow
	if wall.Sub(p.first) >= provLowFor {
		capacity = paceRate
		if p.raised.IsZero() {
			p.raised = wall
		}
	}
	if s := wall.Unix(); s != p.second {
		p.second, p.inSecond = s, 0
	}
	p.answered++
	if p.inSecond < capacity {
		p.inSecond++
		return
	}
	p.throttled++
	if p.firstThrottled.IsZero() {
		p.firstThrottled = wall
	}
	v, _ := json.Marshal(map[string]any{"id": jsonString(m.Value, "id"), "user_id": json.RawMessage(m.Key), "status": pacing.StatusThrottled,
		"at": p.now().UTC().Format(time.RFC3339), "lane": headerOf(m, dispatch.HeaderLane)})
	p.pending = append(p.pending, kafka.Message{Key: m.Key, Value: v})
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
			p.answer(m)
		}
	}
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
	prov := &provider{now: p.clk.Now}
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
	r, err := p.followRate(ctx, prov)
	if err != nil {
		return err
	}
	stop()
	wg.Wait()
	if err := <-flushErr; err != nil {
		return err
	}
	prov.mu.Lock()
	r.answered, r.throttled = prov.answered, prov.throttled
	prov.mu.Unlock()
	p.sec.throttle = r
	p.step("throttle feedback: %d %s pushes; FCM throttled %d; %s's effective rate down to %.0f/s and back to %d/s; %s",
		len(news), campNews, r.throttled, budgetName, r.lowest, paceRate, time.Since(wall).Round(time.Millisecond))
	return nil
}

// followRate samples the budget's effective rate until every input is
// decided and the rate is back within 10% of the budget's (60 s at most).
func (p *play) followRate(ctx context.Context, prov *provider) (throttleRun, error) {
	rdb, err := app.NewRedisClient(p.cfg)
	if err != nil {
		return throttleRun{}, err
	}
	defer rdb.Close()
	l := &pacing.RedisLeaser{Client: rdb, Prefix: p.cfg.Capping.KeyPrefix}
	b := &pacing.Budget{Name: budgetName, Rate: paceRate}
	r := throttleRun{lowest: paceRate, done: true}
	deadline := time.Now().Add(60 * time.Second)
	for {
		e, err := l.Effective(ctx, b)
		if err != nil {
			return r, fmt.Errorf("demo: read %s's effective rate: %w", budgetName, err)
		}
		now := time.Now()
		prov.mu.Lock()
		from, raised := prov.firstThrottled, prov.raised
		prov.mu.Unlock()
		r.lowest = min(r.lowest, e.Rate)
		if r.downIn == 0 && !from.IsZero() && e.Rate <= 1.1*provLow {
			r.downIn = now.Sub(from)
		}
		if r.backIn == 0 && !raised.IsZero() && r.downIn > 0 && e.Rate >= 0.9*paceRate {
			r.backIn = now.Sub(raised)
		}
		if r.backIn > 0 && decidedAll(p.counts()) {
			return r, nil
		}
		if now.After(deadline) {
			return r, fmt.Errorf("demo: %s's effective rate %.0f/s 60s after %s began (lowest %.0f/s): it did not follow FCM down and back up", budgetName, e.Rate, campNews, r.lowest)
		}
		select {
		case <-ctx.Done():
			return r, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
