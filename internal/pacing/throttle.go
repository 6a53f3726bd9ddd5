package pacing

// Throttle feedback: a provider that answers "throttled" accepts less than
// its budget's rate. Each budget has one effective rate for every worker,
// kept with its tokens in Redis: a throttled send cuts it by a tenth (at
// most once a second, however many sends were throttled), it climbs back
// by a fiftieth of the rate a second (AIMD, as TCP's congestion window),
// never above the rate nor below the budget's min_rate; a Retry-After
// holds the budget's every lane at least that long.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// StatusThrottled is the delivery status of a send its provider throttled
// (HTTP 429 and the like): it slows the send's budget; the send stays
// counted, and its sender sends it again.
const StatusThrottled = "throttled"

// The feedback's constants (docs/concepts/pacing.md, "Throttle feedback").
const (
	// throttleCut: a throttled send leaves this much of the effective
	// rate, at most once per throttleEvery.
	throttleCut   = 0.9
	throttleEvery = time.Second
	// throttleRise of the rate a second is what the effective rate climbs
	// back by.
	throttleRise = 0.02
	// MaxRetryAfter is the longest Retry-After a status may pass on.
	MaxRetryAfter = time.Hour
	// throttleGap: a worker reports a budget's throttles at most this
	// often (the rate drops at most once a second anyway); a longer
	// Retry-After is reported at once.
	throttleGap = 100 * time.Millisecond
)

// bucketLifeMs: a budget's hash outlives its last call by an hour (its
// effective rate too: a budget idle for an hour starts at its rate).
const bucketLifeMs = "3600000"

// effectiveLua sets eff, the budget's effective rate now (nil: its
// rate), from s (the hash's tok, ts, eff, eat fields), now and rate: the
// rate written at eat, climbed back since.
var effectiveLua = strings.NewReplacer("RISE", strconv.FormatFloat(throttleRise, 'g', -1, 64)).Replace(`
local eff = tonumber(s[3])
if eff then
  local eat = tonumber(s[4]) or now
  if now > eat then eff = eff + (now - eat) * rate * RISE / 1000 end
  if eff >= rate then eff = nil end
end`)

// throttleScript cuts a budget's effective rate (unless it was cut less
// than throttleEvery ago) and holds its lanes until a Retry-After ends.
// KEYS[1] the budget's hash. ARGV: rate/s, min rate/s, Retry-After ms (0:
// none). Reply: {the effective rate in 1/1000 a second, 1 if it was cut}.
var throttleScript = redis.NewScript(strings.NewReplacer("CUT", strconv.FormatFloat(throttleCut, 'g', -1, 64),
	"EVERY", strconv.FormatInt(throttleEvery.Milliseconds(), 10)).Replace(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rate, floor, retry = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local s = redis.call('HMGET', KEYS[1], 'tok', 'ts', 'eff', 'eat', 'hold', 'ed')
` + effectiveLua + `
eff = eff or rate
local ed, cut = tonumber(s[6]), 0
if not ed or now - ed >= EVERY then
  eff, ed, cut = math.max(floor, eff * CUT), now, 1
end
eff = math.min(eff, rate)
redis.call('HSET', KEYS[1], 'eff', tostring(eff), 'eat', now, 'ed', ed)
local hold = tonumber(s[5])
if retry > 0 and (not hold or now + retry > hold) then redis.call('HSET', KEYS[1], 'hold', now + retry) end
redis.call('PEXPIRE', KEYS[1], ` + bucketLifeMs + `)
return {math.floor(eff * 1000), cut}
`))

// effectiveScript reads a budget's effective rate and what is left of its
// Retry-After (ms), writing nothing. ARGV: rate/s.
var effectiveScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rate = tonumber(ARGV[1])
local s = redis.call('HMGET', KEYS[1], 'tok', 'ts', 'eff', 'eat', 'hold')
` + effectiveLua + `
return {math.floor((eff or rate) * 1000), math.max(0, (tonumber(s[5]) or 0) - now)}
`)

// ThrottleRequest reports a throttled send of Budget.
type ThrottleRequest struct {
	Budget        string
	Rate, MinRate float64
	RetryAfter    time.Duration // 0: none
}

// Throttled is what a report did: the effective rate after it, and
// whether it cut it.
type Throttled struct {
	Effective float64
	Cut       bool
}

// Throttle reports a throttled send.
func (l *RedisLeaser) Throttle(ctx context.Context, r ThrottleRequest) (Throttled, error) {
	v, err := throttleScript.Run(ctx, l.Client, []string{l.Key(r.Budget)}, r.Rate, r.MinRate, r.RetryAfter.Milliseconds()).Int64Slice()
	if err != nil {
		return Throttled{}, fmt.Errorf("report a throttled send of budget %s: %w", r.Budget, err)
	}
	if len(v) != 2 {
		return Throttled{}, fmt.Errorf("report a throttled send of budget %s: reply %v is not {effective rate, cut}", r.Budget, v)
	}
	return Throttled{Effective: float64(v[0]) / 1000, Cut: v[1] == 1}, nil
}

// Effective is a budget's effective rate now, and what is left of a
// Retry-After its provider passed on (0: none).
type Effective struct {
	Rate    float64
	HeldFor time.Duration
}

// Effective reads budget b's effective rate.
func (l *RedisLeaser) Effective(ctx context.Context, b *Budget) (Effective, error) {
	v, err := effectiveScript.Run(ctx, l.Client, []string{l.Key(b.Name)}, b.Rate).Int64Slice()
	if err != nil {
		return Effective{}, fmt.Errorf("read the effective rate of budget %s: %w", b.Name, err)
	}
	if len(v) != 2 {
		return Effective{}, fmt.Errorf("read the effective rate of budget %s: reply %v is not {effective rate, held ms}", b.Name, v)
	}
	return Effective{Rate: float64(v[0]) / 1000, HeldFor: time.Duration(v[1]) * time.Millisecond}, nil
}

// Throttled reports that budget's provider throttled a send, passing on
// retryAfter (0: none): the budget's effective rate drops for every
// worker, and its lanes wait out the Retry-After. A worker reports a
// budget at most every throttleGap (the rate drops at most once a second
// whatever the number of reports), and at once a Retry-After that ends
// later than the one it reported. ok is false for a budget the policy
// does not have; an error is Redis' (the report is lost: the next
// throttled send reports again).
func (p *Pacer) Throttled(ctx context.Context, budget string, retryAfter time.Duration) (ok bool, err error) {
	bud, ok := p.set.Load().Budget(budget)
	if !ok {
		return false, nil
	}
	p.m.throttled.WithLabelValues(budget).Inc()
	b := p.bucket(budget)
	now := p.o.Now()
	b.mu.Lock()
	later := retryAfter > 0 && now.Add(retryAfter).After(b.heldUntil)
	if now.Sub(b.reported) < throttleGap && !later {
		b.mu.Unlock()
		return true, nil
	}
	was := b.reported
	b.reported = now
	if later {
		b.heldUntil = now.Add(retryAfter)
	}
	b.mu.Unlock()
	t, err := p.o.Leaser.Throttle(ctx, ThrottleRequest{Budget: budget, Rate: bud.Rate, MinRate: bud.MinRate, RetryAfter: retryAfter})
	if err != nil {
		b.mu.Lock()
		b.reported = was // the next report goes
		b.mu.Unlock()
		return true, err
	}
	p.setEffective(budget, t.Effective)
	return true, nil
}

// setEffective records a budget's effective rate as Redis said it.
func (p *Pacer) setEffective(budget string, rate float64) {
	p.m.effective.WithLabelValues(budget).Set(rate)
	p.mu.Lock()
	if p.effective == nil {
		p.effective = map[string]float64{}
	}
	p.effective[budget] = rate
	p.mu.Unlock()
}

// rateOf is the rate a budget releases at, as this worker last saw it
// (p.mu held).
func (p *Pacer) rateOf(b *Budget) float64 {
	if e, ok := p.effective[b.Name]; ok && e > 0 && e < b.Rate {
		return e
	}
	return b.Rate
}
