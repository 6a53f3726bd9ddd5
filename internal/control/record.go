// Package control owns campaign control: the records of the control topic
// (one per campaign, the latest wins: stopped, paused or active, who, why,
// when, and an optional send-by), the state every worker builds from the
// whole topic, the verdict for one intent (go on, wait for a pause, or
// cancel: stopped, or past its send-by) and the follower that keeps the
// state current. The check is an in-memory lookup; the worker applies it
// before the engine, so a cancelled or paused intent is never counted.
package control

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// State is what a campaign may do.
type State uint8

const (
	// Active: its intents are decided as usual (also a campaign with no
	// record).
	Active State = iota
	// Paused: its intents wait in the delay tiers, uncounted, and are
	// decided once it is active again (or cancelled when the pause lasts
	// past control.max_pause or their send-by).
	Paused
	// Stopped: its intents are cancelled, and its campaign plans book
	// nothing.
	Stopped
)

var stateNames = [...]string{Active: "active", Paused: "paused", Stopped: "stopped"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", s)
}

// ParseState reads stopped, paused or active.
func ParseState(s string) (State, error) {
	for i, n := range stateNames {
		if n == s {
			return State(i), nil
		}
	}
	return 0, fmt.Errorf("%q is not one of stopped, paused, active", s)
}

// Limits of a record's fields.
const (
	MaxCampaign = 256  // as the event contract's campaign_id
	MaxReason   = 1024 // free text
	MaxBy       = 256
)

// AllKey is the key of the incident switch: a record that pauses (or
// resumes) every intent that is not of an exempt category. Campaign
// records are keyed "campaign/<id>", so no campaign id can collide with it.
const AllKey = "all"

// Record is one record of the control topic: the whole state of one
// campaign (or of the incident switch), as the latest record of its key
// says.
type Record struct {
	// Campaign is the campaign id its intents carry; empty for the switch.
	Campaign string
	// All: the incident switch (every non-exempt intent); only paused or
	// active.
	All    bool
	State  State
	Reason string // why (free text); required to stop or pause
	By     string // who
	// At is when the record was written; Since when the campaign entered
	// State (the same, unless the record only changed the reason or the
	// send-by).
	At, Since time.Time
	// SendBy: none of the campaign's intents is delivered after it (zero:
	// no deadline).
	SendBy time.Time
}

// Key is the record's Kafka key: compaction keeps the latest per key.
func (r *Record) Key() string {
	if r.All {
		return AllKey
	}
	return "campaign/" + r.Campaign
}

// FieldError is a problem with one field of a record.
type FieldError struct{ Field, Reason string }

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// Check returns the record's first problem, naming the field.
func (r *Record) Check() error {
	switch {
	case r.All && r.Campaign != "":
		return &FieldError{"campaign", "a record for every intent (all) names no campaign"}
	case !r.All && r.Campaign == "":
		return &FieldError{"campaign", "is required (or all)"}
	case len(r.Campaign) > MaxCampaign:
		return &FieldError{"campaign", fmt.Sprintf("%d bytes, at most %d", len(r.Campaign), MaxCampaign)}
	case !utf8.ValidString(r.Campaign):
		return &FieldError{"campaign", "not valid UTF-8"}
	case r.State > Stopped:
		return &FieldError{"state", fmt.Sprintf("%d is not stopped, paused or active", r.State)}
	case r.All && r.State == Stopped:
		return &FieldError{"state", "every intent can be paused and resumed, not stopped: stop campaigns one by one"}
	case r.State != Active && strings.TrimSpace(r.Reason) == "":
		return &FieldError{"reason", fmt.Sprintf("is required to mark a campaign %s: say why", r.State)}
	case len(r.Reason) > MaxReason:
		return &FieldError{"reason", fmt.Sprintf("%d bytes, at most %d", len(r.Reason), MaxReason)}
	case len(r.By) > MaxBy:
		return &FieldError{"by", fmt.Sprintf("%d bytes, at most %d", len(r.By), MaxBy)}
	case r.At.IsZero():
		return &FieldError{"at", "is required"}
	case r.Since.IsZero() || r.Since.After(r.At):
		return &FieldError{"since", "is required, and not after at"}
	case r.All && !r.SendBy.IsZero():
		return &FieldError{"send_by", "is a campaign's: the switch has none"}
	}
	return nil
}

// wire is a record's JSON value.
type wire struct {
	Campaign string `json:"campaign,omitempty"`
	All      bool   `json:"all,omitempty"`
	State    string `json:"state"`
	Reason   string `json:"reason,omitempty"`
	By       string `json:"by,omitempty"`
	At       string `json:"at"`
	Since    string `json:"since"`
	SendBy   string `json:"send_by,omitempty"`
}

const timeLayout = time.RFC3339Nano

// Marshal is the record's value.
func (r *Record) Marshal() ([]byte, error) {
	if err := r.Check(); err != nil {
		return nil, err
	}
	w := wire{Campaign: r.Campaign, All: r.All, State: r.State.String(), Reason: r.Reason, By: r.By,
		At: r.At.UTC().Format(timeLayout), Since: r.Since.UTC().Format(timeLayout)}
	if !r.SendBy.IsZero() {
		w.SendBy = r.SendBy.UTC().Format(timeLayout)
	}
	return json.Marshal(w)
}

// ErrMalformed is wrapped by Parse's errors: the record is not one capper
// wrote (or a later version did, in a form this one does not read).
var ErrMalformed = errors.New("malformed control record")

// Parse reads a record from its key and value, checking both.
func Parse(key, value []byte) (*Record, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
	}
	if len(value) == 0 {
		return nil, bad("value: empty (a tombstone: the control topic keeps every campaign's latest state; resume it instead)")
	}
	var w wire
	dec := json.NewDecoder(strings.NewReader(string(value)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return nil, bad("value: %v", err)
	}
	r := &Record{Campaign: w.Campaign, All: w.All, Reason: w.Reason, By: w.By}
	var err error
	if r.State, err = ParseState(w.State); err != nil {
		return nil, bad("state: %v", err)
	}
	for _, t := range []struct {
		field, v string
		dst      *time.Time
		optional bool
	}{{"at", w.At, &r.At, false}, {"since", w.Since, &r.Since, false}, {"send_by", w.SendBy, &r.SendBy, true}} {
		if t.v == "" && t.optional {
			continue
		}
		if *t.dst, err = time.Parse(time.RFC3339Nano, t.v); err != nil {
			return nil, bad("%s: %q is not an RFC 3339 time", t.field, t.v)
		}
	}
	if err := r.Check(); err != nil {
		return nil, bad("%v", err)
	}
	if string(key) != r.Key() {
		return nil, bad("key: %q, but the value is of %q", key, r.Key())
	}
	return r, nil
}
