package capping

// What a caller asks (Request) and what the engine answers (Decision).

import (
	"errors"
	"fmt"
	"time"

	"github.com/capper-dev/capper/internal/control"
)

// MaxIntentID is the longest intent id, in bytes (the event contract's limit;
// the decoder enforces it with this constant).
const MaxIntentID = 128

// Request is one send-intent to decide.
type Request struct {
	UserID uint64
	// Segment names the user's policy; a segment without one (including
	// the snapshot's "none" for users in no segment) gets Rules.Default.
	Segment  string
	IntentID string // the idempotency key (1-MaxIntentID bytes)
	Campaign string
	Channel  string
	Category string // required; an exempt one bypasses capping
	Tags     []string
	Priority Priority
	// TimeZone is the user's, for calendar limits; nil: Rules.TimeZone.
	TimeZone *time.Location
	// Override is what the intent asks of capping; it is honoured only for
	// the campaigns and categories of Rules.Overrides.
	Override Override
	// Redelivered: the intent may have been decided before by another
	// worker (a record that existed when this worker took its partition
	// over). The refusal cache does not answer it: only Redis knows whether
	// that worker allowed it, and then it is a duplicate, not capped.
	Redelivered bool
	// DeferredSince is when the intent was first deferred (zero: never):
	// it may wait at most its limit's max_defer from then.
	DeferredSince time.Time
	// Planned are the campaign plans whose audience holds the user (the
	// worker's active plans); those of a higher priority book slots the
	// intent cannot take (plans.go).
	Planned []Planned
	// SendBy is the intent's own send-by (zero: none): it is never
	// delivered after it (control.go).
	SendBy time.Time
	// ReleaseAt, for an intent its budget would hold (send pacing), is
	// the earliest its lane could release it: past its send-by by then,
	// it is cancelled now (expired) rather than when it comes due. Zero:
	// not paced, or released.
	ReleaseAt time.Time
	// Control is the campaign control state it is decided by (nil: every
	// campaign active; its own send-by still holds).
	Control *Campaigns
	At      time.Time // decision time from the caller's clock
}

// RetryAfter says when a capped intent could be allowed. Never is a field of
// its own, so that "never" cannot be lost in a conversion of the duration.
type RetryAfter struct {
	// Never: the denying limit has max 0, no slot will ever free.
	Never bool
	// In: otherwise, the time until the denying window (or calendar period)
	// frees a slot if no other intent is allowed meanwhile.
	In time.Duration
}

// Decision is the engine's answer for one request.
type Decision struct {
	Outcome Outcome // Allowed, Capped, Duplicate, Exempt or Deferred
	// Policy is the version of the policy that decided (Options.PolicyVersion
	// or SetPolicy's); every decision of a batch has the same.
	Policy string
	// Limit is the name of the first limit (policy order) that capped.
	Limit string
	// HeldFor (Capped): the campaign plan whose booking held the intent
	// back (the limit had room without the bookings), the one whose
	// window ends first when several book it.
	HeldFor string
	// RetryAfter (Capped): when a slot frees.
	RetryAfter RetryAfter
	// At is the time the intent counts at: the request's decision time, or
	// for a Duplicate the time it was first allowed (whole seconds: Redis
	// keeps times in seconds).
	At time.Time
	// Override is the override honoured: Bypass (Allowed, recorded without
	// checking) or BypassUncounted (Exempt). OverrideRefused: the intent
	// asked for one it may not have and was decided normally.
	Override        Override
	OverrideRefused bool
	// NotBefore (Deferred) is when to decide the intent again: when the
	// slot frees, or quiet hours end (jittered).
	NotBefore time.Time
	// Reason says why it was deferred or cancelled, or that a deferred
	// intent was capped because it would wait past max_defer (verdicts.go).
	Reason Reason
	// UserLimit: Limit is one of the user's own (a tier's or a channel's,
	// users.go), not the policy's: shadow mode enforces it (Shadowed).
	UserLimit bool
	// Replaced (Cancelled, ReasonExpired) is the reason of the deferral
	// past the send-by that the cancellation replaced (NoReason: none):
	// shadow mode treats it as that deferral (Shadowed).
	Replaced Reason
	// Control is the control record that decided it: a stop, a pause, or
	// the campaign's send-by that is its deadline (nil: none).
	Control *control.Position
	// Err is a per-request failure; the other fields are meaningless then.
	// Invalid requests wrap ErrInvalidRequest (they will never succeed);
	// anything else is a Redis failure worth retrying later.
	Err error
}

// ErrInvalidRequest is wrapped by Decision.Err for a request that can never
// be decided (unknown channel or category, bad intent id, no time).
var ErrInvalidRequest = errors.New("invalid request")

// InvalidRequestError is a request that no retry can decide; it is
// ErrInvalidRequest (errors.Is). Field names the intent's field at fault
// (the event contract's name), for the dead-letter record.
type InvalidRequestError struct {
	Field, Reason string
}

func (e *InvalidRequestError) Error() string { return ErrInvalidRequest.Error() + ": " + e.Reason }

// Is makes every InvalidRequestError an ErrInvalidRequest.
func (e *InvalidRequestError) Is(target error) bool { return target == ErrInvalidRequest }

func invalidRequest(field, format string, args ...any) error {
	return &InvalidRequestError{Field: field, Reason: fmt.Sprintf(format, args...)}
}
