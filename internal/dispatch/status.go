package dispatch

// Delivery statuses: what the delivery service reports about a send, read
// from the delivery-status topic. A status that refunds gives the send's
// slot back (capping.Engine.Refund).

import (
	"time"

	"github.com/capper-dev/capper/internal/clip"
)

// Status is one delivery-status record: {"id", "user_id", "status", "at"}.
type Status struct {
	ID     string // the intent's id
	UserID uint64
	Status string // e.g. delivered, failed, bounced, rejected
	At     time.Time
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
	return s, nil
}
