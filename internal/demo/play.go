package demo

// The demo's timeline once the worker runs: users' tiers, the blast (and,
// in the middle of it, users' snoozes and the stop of a campaign), the
// failed deliveries and the emails sent after them, send pacing (a blast
// held for a budget, then a provider that throttles), then the clock moved
// on past the hours the held intents wait.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/capper-dev/capper/internal/kafka"

	"github.com/capper-dev/capper/internal/app"
	"github.com/capper-dev/capper/internal/audit"
	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/control"
)

// play is the demo's timeline: what it produces, when, and what it does
// meanwhile (the stop, the failed deliveries, the clock's steps).
type play struct {
	runner
	clk     *clock
	sec     *sections
	cfg     *config.Config
	brokers []string
	log     *slog.Logger
	step    func(format string, args ...any)
}

// run plays the timeline: the tiers, the blast, the refunds, later. It
// returns the blast's throughput and cart-rescue's intents (produced
// later).
func (p *play) run(ctx context.Context, msgs, early, late []kafka.Message) (throughput, []kafka.Message, error) {
	if err := p.tiers(ctx); err != nil {
		return throughput{}, nil, err
	}
	tp, err := p.blast(ctx, msgs, early, late)
	if err != nil {
		return throughput{}, nil, err
	}
	if err := p.refunds(ctx); err != nil {
		return throughput{}, nil, err
	}
	if err := p.pacing(ctx); err != nil {
		return throughput{}, nil, err
	}
	if err := p.throttle(ctx); err != nil {
		return throughput{}, nil, err
	}
	cart, err := p.later(ctx)
	if err != nil {
		return throughput{}, nil, err
	}
	return tp, cart, nil
}

// tiers writes the tier of the readers who chose fewer to the user-limits
// topic, as a preference service does, and waits until the worker applied
// them: before the blast, which brings their first intents.
func (p *play) tiers(ctx context.Context) error {
	recs, err := p.sec.tierRecords(p.clk.Now())
	if err != nil {
		return err
	}
	if err := p.produceTo(ctx, topicUsers, recs); err != nil {
		return err
	}
	if p.sec.own.tierApplied, err = p.userLimitsApplied(ctx, len(recs)); err != nil {
		return err
	}
	p.step("tier %s for readers %s written to %s, applied by the worker at %s", tierFewer, p.sec.fewer, topicUsers, stamp(p.sec.own.tierApplied))
	return nil
}

// blast produces the blast in two parts: the first third with the
// sections' first intents (half of flash-sale's and the readers' first
// deals among them), then the rest with flash-sale's other half and the
// readers' second deals in its second half, behind thousands of the
// blast's. It arrives while the worker runs, as a campaign's would (a
// backlog that was there when a worker took its partitions over is decided
// by Redis alone: see docs/operations/refusal-cache.md). Once the first
// part is decided and the rest is in the input topic, readers snooze (the
// user-limits topic), then flash-sale is stopped, as capper campaign stop
// does it.
func (p *play) blast(ctx context.Context, msgs, early, late []kafka.Message) (throughput, error) {
	third, mid := len(msgs)/3, len(msgs)/3+(len(msgs)-len(msgs)/3)/2
	partA := interleave(msgs[:third], early)
	partB := append(slices.Clone(msgs[third:mid]), interleave(msgs[mid:], late)...)
	t0 := time.Now()
	if err := p.produce(ctx, partA); err != nil {
		return throughput{}, err
	}
	if _, err := p.settle(ctx, "deciding", decidedAll, 0); err != nil {
		return throughput{}, err
	}
	if err := p.produce(ctx, partB); err != nil {
		return throughput{}, err
	}
	p.step("produced %d send-intents (%d campaigns; tags, priorities and users' time zones; repeats, malformed, transactional and override-asking ones) and %d of the sections",
		len(msgs), 6, len(early)+len(late))
	if err := p.snooze(ctx); err != nil {
		return throughput{}, err
	}
	written, err := app.SetCampaign(ctx, p.cfg, app.CampaignChange{Campaign: campFlash, State: control.Stopped,
		Reason: "wrong price in the push", By: "capper-demo", Now: p.clk.Now()}, p.log)
	if err != nil {
		return throughput{}, fmt.Errorf("demo: stop %s: %w", campFlash, err)
	}
	p.sec.stopRecord = written.Position.String()
	if p.sec.stopApplied, err = p.applied(ctx, written.Position); err != nil {
		return throughput{}, err
	}
	if c := p.counts(); c.produced > c.final+c.waiting() {
		p.sec.stopBacklog = c.produced - c.final - c.waiting()
	}
	p.step("%s stopped (record %s), applied by the worker at %s", campFlash, p.sec.stopRecord, stamp(p.sec.stopApplied))
	c, err := p.settle(ctx, "deciding", decidedAll, 0)
	if err != nil {
		return throughput{}, err
	}
	return throughput{intents: p.produced, elapsed: time.Since(t0), batches: uint64(c.batches)}, nil
}

// snooze writes the readers' snoozes to the user-limits topic, while the
// second part of the blast waits in the input topic, and waits until the
// worker applied them.
func (p *play) snooze(ctx context.Context) error {
	recs, err := p.sec.snoozeRecords(p.clk.Now())
	if err != nil {
		return err
	}
	if err := p.produceTo(ctx, topicUsers, recs); err != nil {
		return err
	}
	if p.sec.own.snoozeApplied, err = p.userLimitsApplied(ctx, p.sec.own.tierRecords+len(recs)); err != nil {
		return err
	}
	if c := p.counts(); c.produced > c.final+c.waiting() {
		p.sec.own.snoozeBacklog = c.produced - c.final - c.waiting()
	}
	p.step("readers %s snoozed (%d records to %s), applied by the worker at %s", span{p.sec.snoozeLong.from, p.sec.snoozeShort.to},
		len(recs), topicUsers, stamp(p.sec.own.snoozeApplied))
	return nil
}

// userLimitsApplied waits until the worker applied n records of the
// user-limits topic (capper_user_limits_applied_total: each counted once
// Redis acknowledged its write) and returns the demo's clock then: every
// decision after it reads them.
func (p *play) userLimitsApplied(ctx context.Context, n int) (time.Time, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		mfs, err := p.reg.Gather()
		if err != nil {
			return time.Time{}, fmt.Errorf("demo: metrics: %w", err)
		}
		got, refused, failed := 0, 0, 0
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				switch mf.GetName() {
				case "capper_user_limits_applied_total":
					got += int(m.GetCounter().GetValue())
				case "capper_user_limits_refused_total":
					refused += int(m.GetCounter().GetValue())
				case "capper_user_limits_errors_total":
					failed += int(m.GetCounter().GetValue())
				}
			}
		}
		if got >= n {
			return p.clk.Now(), nil
		}
		if time.Now().After(deadline) || refused > 0 {
			return time.Time{}, fmt.Errorf("demo: the worker applied %d user-limits records, not %d (%d refused, %d errors)", got, n, refused, failed)
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case err := <-p.done:
			return time.Time{}, fmt.Errorf("demo: worker stopped early: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// refunds reports a tenth of the welcome emails failed (read back from
// the deliveries) on the delivery-status topic, waits until the worker
// read the statuses, then sends the tips email to the same users.
func (p *play) refunds(ctx context.Context) error {
	dels, err := audit.ReadTopic(ctx, p.brokers, topicDel)
	if err != nil {
		return err
	}
	statuses := p.sec.failures(dels, p.clk.Now())
	if err := p.produceTo(ctx, topicStatus, statuses); err != nil {
		return err
	}
	if _, err := p.settle(ctx, "", func(c counts) bool { return c.statuses >= len(statuses) }, 0); err != nil {
		return err
	}
	tips := p.sec.intents(campTips, "email", "", p.sec.refund, 1, p.clk.Now(), nil)
	if err := p.produce(ctx, tips); err != nil {
		return err
	}
	if _, err := p.settle(ctx, "", decidedAll, 0); err != nil {
		return err
	}
	p.step("%d welcome emails reported failed, then %d tips emails", len(statuses), len(tips))
	return nil
}

// pacing plays the send pacing section, before the clock skips ahead: the
// budget's tokens come by Redis' clock (TIME: miniredis' is the wall
// clock), the worker's pacer sleeps on a timer and stamps its releases
// with the demo's clock, which runs at the wall clock's pace until later
// moves it on. The digest (a push to every member) waits in the bulk
// lane with receipts beside it; once the bulk lane released half a second
// of the budget, breaking news (high priority) and more receipts come;
// once breaking news is all released and the bulk lane released a quarter
// of a second more, the digest is stopped, with most of it still held.
func (p *play) pacing(ctx context.Context) error {
	sec := p.sec
	wall := time.Now()
	sec.pace.start = p.clk.Now()
	digest := sec.pushes(campDigest, "", "", 0, 1, sec.pace.start)
	receipts := sec.pushes(campReceipts, "", "transactional", 1, 2*paceReceiptEvery, sec.pace.start)
	if err := p.produce(ctx, interleave(digest, receipts)); err != nil {
		return err
	}
	if _, err := p.releasedAtLeast(ctx, laneBulk, paceBreakingAfter); err != nil {
		return err
	}
	sec.pace.breakingAt = p.clk.Now()
	breaking := sec.pushes(campBreaking, "high", "", 0, paceBreakingEvery, sec.pace.breakingAt)
	more := sec.pushes(campReceipts, "", "transactional", 1+paceReceiptEvery, 2*paceReceiptEvery, sec.pace.breakingAt)
	if err := p.produce(ctx, interleave(breaking, more)); err != nil {
		return err
	}
	if _, err := p.releasedAtLeast(ctx, laneUrgent, len(breaking)); err != nil {
		return err
	}
	bulk, err := p.releasedAtLeast(ctx, laneBulk, 0)
	if err != nil {
		return err
	}
	if _, err := p.releasedAtLeast(ctx, laneBulk, bulk+paceStopAfter); err != nil {
		return err
	}
	sec.pace.stopAt = p.clk.Now()
	written, err := app.SetCampaign(ctx, p.cfg, app.CampaignChange{Campaign: campDigest, State: control.Stopped,
		Reason: "sent to the wrong edition", By: "capper-demo", Now: sec.pace.stopAt}, p.log)
	if err != nil {
		return fmt.Errorf("demo: stop %s: %w", campDigest, err)
	}
	sec.pace.stopRecord = written.Position.String()
	if sec.pace.applied, err = p.applied(ctx, written.Position); err != nil {
		return err
	}
	if c, err := p.settle(ctx, "", decidedAll, 30*time.Second); errors.Is(err, errSlow) {
		return fmt.Errorf("demo: %d inputs of %d have an outcome 30s after %s was stopped", c.final+c.waiting(), c.produced, campDigest)
	} else if err != nil {
		return err
	}
	p.step("send pacing: %d digest pushes, %d breaking news and %d receipts through budget %s (%d/s); %s stopped (record %s), applied by the worker at %s; %s",
		len(digest), len(breaking), len(receipts)+len(more), budgetName, paceRate, campDigest, sec.pace.stopRecord, stamp(sec.pace.applied), time.Since(wall).Round(time.Millisecond))
	return nil
}

// releasedAtLeast waits until the budget's lane released n intents
// (capper_pacing_released_total), and returns how many it released.
func (p *play) releasedAtLeast(ctx context.Context, lane string, n int) (int, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		mfs, err := p.reg.Gather()
		if err != nil {
			return 0, fmt.Errorf("demo: metrics: %w", err)
		}
		got := 0
		for _, mf := range mfs {
			if mf.GetName() != "capper_pacing_released_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				if labelOf(m, "budget") == budgetName && labelOf(m, "lane") == lane {
					got = int(m.GetCounter().GetValue())
				}
			}
		}
		if got >= n {
			return got, nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("demo: budget %s's lane %s released %d intents in 30s, not %d", budgetName, lane, got, n)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case err := <-p.done:
			return 0, fmt.Errorf("demo: worker stopped early: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// later moves the clock on past the hours the held intents wait, in
// steps: to when they are due, then to the plan's window, where
// cart-rescue sends (its intents are returned). Anything still waiting
// then (a start where quiet hours last past the plan) is due within a
// day: the clock moves on an hour at a time until nothing waits.
func (p *play) later(ctx context.Context) ([]kafka.Message, error) {
	p.clk.advance(p.sec.due)
	p.step("the clock moves on to %s: the deferred and quiet-hours intents are due", stamp(p.sec.due))
	if _, err := p.settle(ctx, "", nothingWaits, 10*time.Second); err != nil && !errors.Is(err, errSlow) {
		return nil, err
	}
	p.clk.advance(p.sec.planStarts)
	cart := p.sec.intents(campCart, "push", "high", p.sec.cart, 1, p.clk.Now(), nil)
	if err := p.produce(ctx, cart); err != nil {
		return nil, err
	}
	p.step("the clock moves on to %s: cart-rescue's window opens, %d pushes", stamp(p.sec.planStarts), len(cart))
	c, err := p.settle(ctx, "", nothingWaits, 10*time.Second)
	for hours := 0; errors.Is(err, errSlow) && hours < 48; hours++ {
		p.clk.advance(p.clk.Now().Add(time.Hour))
		p.step("the clock moves on to %s: %d intents still wait", stamp(p.clk.Now()), c.waiting())
		c, err = p.settle(ctx, "", nothingWaits, 2*time.Second)
	}
	if errors.Is(err, errSlow) {
		return nil, fmt.Errorf("demo: %d intents still wait in the delay tiers at %s, and %d inputs of %d have an outcome",
			c.waiting(), stamp(p.clk.Now()), c.final, c.produced)
	}
	return cart, err
}

// produce writes intents to the input topic and counts them.
func (p *play) produce(ctx context.Context, msgs []kafka.Message) error {
	if err := p.produceTo(ctx, topicIn, msgs); err != nil {
		return err
	}
	p.produced += len(msgs)
	return nil
}

func (p *play) produceTo(ctx context.Context, topic string, msgs []kafka.Message) error {
	return produce(ctx, p.brokers, topic, msgs)
}
