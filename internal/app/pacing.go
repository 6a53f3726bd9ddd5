package app

// Send pacing's wiring (internal/pacing): the pacer with its Redis leases,
// the lanes' gate and writers, and what each policy version's budgets
// change in the running worker.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/dispatch"
	capkafka "github.com/capper-dev/capper/internal/kafka"
	"github.com/capper-dev/capper/internal/pacing"
	"github.com/capper-dev/capper/internal/policy"
)

// pacer is a worker's pacing: nil without kafka.topics.lanes.
type pacer struct {
	*pacing.Pacer
	prefix string
	gate   *pacing.Gate
	admin  *capkafka.Admin

	mu      sync.Mutex
	writers []closingWriter
}

func newPacer(cfg *config.Config, rdb redis.UniversalClient, admin *capkafka.Admin, reg prometheus.Registerer, log *slog.Logger, now func() time.Time) (*pacer, error) {
	prefix := cfg.Kafka.Topics.Lanes
	if prefix == "" {
		return nil, nil
	}
	p, err := pacing.New(pacing.Options{Leaser: &pacing.RedisLeaser{Client: rdb, Prefix: cfg.Capping.KeyPrefix},
		Now: now, Logger: log, Registerer: reg})
	if err != nil {
		return nil, err
	}
	pc := &pacer{Pacer: p, prefix: prefix, admin: admin}
	pc.gate = &pacing.Gate{Pacer: p, Prefix: prefix, Stamp: dispatch.StampReleased, Held: dispatch.HeldSince}
	return pc, nil
}

// startPacer is the worker's pacing (nil without kafka.topics.lanes) with
// the budgets of the first policy version, and the delay group's lanes and
// gate in copts.
func startPacer(ctx context.Context, cfg *config.Config, pol *policy.Loaded, rdb redis.UniversalClient, admin *capkafka.Admin,
	copts *dispatch.ConsumerOptions, reg prometheus.Registerer, log *slog.Logger, now func() time.Time) (*pacer, error) {
	pc, err := newPacer(cfg, rdb, admin, reg, log, now)
	if pc == nil || err != nil {
		return nil, err
	}
	set := budgets(pol)
	if err := pc.checkLanes(ctx, set); err != nil {
		return nil, configError{err}
	}
	if copts.Lanes, err = pc.toRead(ctx, set); err != nil {
		return nil, err
	}
	pc.SetBudgets(set)
	copts.LanePrefix, copts.Gate = pc.prefix, pc.gate.Pass
	return pc, nil
}

// budgets is the set of a policy version, with its exempt categories.
func budgets(l *policy.Loaded) *pacing.Set {
	return l.Budgets.WithExempt(l.Rules.ExemptCategories)
}

// lanes are the lane topics of set, by what names them in a message.
func (p *pacer) lanes(set *pacing.Set) map[string]string {
	topics := map[string]string{}
	for _, b := range set.Budgets() {
		for _, l := range b.Lanes {
			topics[fmt.Sprintf("budget %q lane %q", b.Name, l.Name)] = pacing.Topic(p.prefix, b.Name, l.Name)
			topics[fmt.Sprintf("budget %q lane %q retry", b.Name, l.Name)] = pacing.RetryTopic(p.prefix, b.Name, l.Name)
		}
	}
	return topics
}

// checkLanes refuses budgets whose lane topics (or their retry topics) are
// missing: their intents would stall on the first write.
func (p *pacer) checkLanes(ctx context.Context, set *pacing.Set) error {
	topics := p.lanes(set)
	if len(topics) == 0 {
		return nil
	}
	err := p.admin.CheckTopics(ctx, topics)
	if errors.Is(err, capkafka.ErrMissingTopic) {
		return fmt.Errorf("lane topics (create them: capper topics create --config FILE --policy FILE): %w", err)
	}
	return err
}

// writer makes a lane topic's writer (a tier's kind: the record goes to
// the partition of its user's input partition).
func (p *pacer) writer(o capkafka.Options) func(topic string) (dispatch.Writer, error) {
	return func(topic string) (dispatch.Writer, error) {
		w, err := capkafka.NewTierWriter(o, topic)
		if err != nil {
			return nil, fmt.Errorf("writer for lane %s: %w", topic, err)
		}
		p.mu.Lock()
		p.writers = append(p.writers, w)
		p.mu.Unlock()
		return w, nil
	}
}

func (p *pacer) close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range p.writers {
		_ = w.Close()
	}
}

// apply makes a checked version's budgets the ones in use: the delay
// group reads their lanes, and the worker holds intents for them.
func (p *pacer) apply(ctx context.Context, reader *dispatch.Consumer, version string, set *pacing.Set) error {
	lanes, err := p.toRead(ctx, set)
	if err != nil {
		return fmt.Errorf("policy %s: %w", version, err)
	}
	if err := reader.SetLanes(lanes); err != nil {
		return fmt.Errorf("policy %s: %w", version, err)
	}
	p.SetBudgets(set)
	return nil
}

// toRead are the lane topics the delay group reads: set's, and every other
// topic with the lanes' prefix on the brokers (a budget a later policy
// dropped, or renamed: what waits there drains, unpaced).
func (p *pacer) toRead(ctx context.Context, set *pacing.Set) ([]string, error) {
	lanes := append(set.Topics(p.prefix), set.RetryTopics(p.prefix)...)
	names, err := p.admin.TopicNames(ctx)
	if err != nil {
		return nil, fmt.Errorf("list the lane topics: %w", err)
	}
	var other []string
	for _, t := range names {
		if strings.HasPrefix(t, p.prefix+".") && !slices.Contains(lanes, t) {
			other = append(other, t)
		}
	}
	all := append(lanes, other...)
	slices.Sort(all) // the same topics in another order are no reason to join again
	return all, nil
}

// followWaiting refreshes how many intents wait in each lane (the delay
// group's lag on the lane topics) every interval until ctx ends: the
// metrics' drain estimates, and the worker's estimate of when a new
// intent would be released (an intent past its send-by by then is
// cancelled at once).
func (p *pacer) followWaiting(ctx context.Context, group string, interval time.Duration, log *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	failures := 0
	for {
		if err := p.refreshWaiting(ctx, group); err != nil && ctx.Err() == nil {
			if failures++; failures == 1 || failures%10 == 0 {
				log.Warn("pacing: lanes' waiting intents not refreshed", "failures", failures, "error", err)
			}
		} else {
			failures = 0
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (p *pacer) refreshWaiting(ctx context.Context, group string) error {
	var errs []error
	for _, b := range p.Budgets().Budgets() {
		lanes := make([]int64, len(b.Lanes))
		for i, l := range b.Lanes {
			n, _, _, err := laneLag(ctx, p.admin, group, p.prefix, b.Name, l.Name)
			if err != nil {
				errs = append(errs, err)
			}
			lanes[i] = n
		}
		p.SetWaiting(b.Name, lanes)
	}
	return errors.Join(errs...)
}

// laneLag is the group's lag on a lane's topic and its retry topic (whose
// records wait ahead of the lane's); missing, retryMissing: the brokers
// lack that topic (it counts nothing).
func laneLag(ctx context.Context, admin *capkafka.Admin, group, prefix, budget, lane string) (n int64, missing, retryMissing bool, err error) {
	topic, retry := pacing.Topic(prefix, budget, lane), pacing.RetryTopic(prefix, budget, lane)
	for _, t := range []string{topic, retry} {
		lags, err := admin.Lags(ctx, group, t)
		switch {
		case errors.Is(err, capkafka.ErrUnknownTopic):
			missing, retryMissing = missing || t == topic, retryMissing || t == retry
		case err != nil:
			return n, missing, retryMissing, err
		}
		for _, l := range lags {
			n += l
		}
	}
	return n, missing, retryMissing, nil
}
