package dispatch

// Delivery statuses: what the delivery service reports about a send, read
// from the delivery-status topic. A status that refunds gives the send's
// slot back (capping.Engine.Refund); a throttled one slows its budget.

import (
	"strconv"
	"strings"
	"time"

	"github.com/capper-dev/capper/internal/clip"
	"github.com/capper-dev/capper/internal/pacing"
)

// Status is one delivery-status record: {"id", "user_id", "status", "at"},
// and a throttled one's "lane", "retry_after" and "delivery".
type Status struct {
	ID     string // the intent's id
	UserID uint64
	Status string // e.g. delivered, failed, bounced, rejected, throttled
	At     time.Time
	// Throttled: a throttled status's budget (the delivery's capper-lane,
	// budget/lane: "" when it was not paced) and the provider's
	// Retry-After (0: none).
	Budget     string
	RetryAfter time.Duration
	// Back: a throttled send its sender hands back to be held again
	// (handback.go); nil: none.
	Back *HandBack
}

// DecodeStatus validates a delivery-status record: the same rules as an
// intent's value (UTF-8, one JSON object, no key twice), then its fields.
// Other fields are allowed and ignored.
func (d *Decoder) DecodeStatus(value []byte) (Status, error) {
	var f fields
	if err := d.scan(value, "a delivery status", &f); err != nil {
		return Status{}, err
	}
	var s Status
	var err error
	if s.ID, s.UserID, err = f.who(); err != nil {
		return Status{}, err
	}
	if s.Status, err = f.str("status", f.status, false); err != nil {
		return Status{}, err
	}
	if s.Status == "" || len(s.Status) > 64 {
		return Status{}, invalid("status", "must be 1 to 64 bytes (e.g. delivered, failed, bounced)")
	}
	at, err := f.str("at", f.at, false)
	if err != nil {
		return Status{}, err
	}
	if s.At, err = time.Parse(time.RFC3339Nano, at); err != nil {
		return Status{}, invalid("at", "%q is not an RFC 3339 time (required)", clip.String(at, 40))
	}
	if s.Status == pacing.StatusThrottled {
		err = f.throttled(&s)
	}
	if err == nil && f.delivery != nil && !f.delivery.Null() {
		if s.Status != pacing.StatusThrottled {
			return Status{}, invalid("delivery", "only a throttled status hands a delivery back (status %q)", clip.String(s.Status, 40))
		}
		s.Back, err = handBackOf(value, &s)
	}
	return s, err
}

// throttled reads a throttled status's lane and retry_after.
func (f *fields) throttled(s *Status) error {
	lane, err := f.str("lane", f.lane, false)
	if err != nil {
		return err
	}
	if lane != "" {
		budget, _, ok := strings.Cut(lane, "/")
		if !ok || !pacing.NamePattern.MatchString(budget) {
			return invalid("lane", "%q is not a capper-lane header (budget/lane)", clip.String(lane, 40))
		}
		s.Budget = strings.Clone(budget)
	}
	if f.retryAfter == nil || string(f.retryAfter) == "null" {
		return nil
	}
	sec, err := strconv.ParseFloat(string(f.retryAfter), 64)
	if err != nil || !(sec > 0) || sec > pacing.MaxRetryAfter.Seconds() {
		return invalid("retry_after", "%s is not a number of seconds above 0 and at most %d (the provider's Retry-After)",
			clip.String(string(f.retryAfter), 40), int(pacing.MaxRetryAfter.Seconds()))
	}
	s.RetryAfter = time.Duration(sec * float64(time.Second))
	return nil
}
