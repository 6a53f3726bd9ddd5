package dispatch

// Decoding and validating a send-intent against the event contract.

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	json "github.com/segmentio/encoding/json"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/clip"
)

// Intent is the part of a send-intent capper reads. Everything else in the
// value (payload, unknown fields) is forwarded untouched with the original
// bytes.
type Intent struct {
	ID         string
	UserID     uint64
	CampaignID string
	Channel    string
	Category   string
	CreatedAt  time.Time // zero when absent
}

// Limits on fields, from the event contract (README, "The event contract").
const (
	maxIDBytes       = capping.MaxIntentID
	maxCampaignBytes = 256
	maxCategoryBytes = 64
)

// InvalidError says why an intent cannot be decided. Its text goes into the
// dead-letter record's capper-error header, so it names the field.
type InvalidError struct {
	Field  string // the JSON field, "value" or "key"
	Reason string
}

func (e *InvalidError) Error() string { return e.Field + ": " + e.Reason }

func invalid(field, format string, args ...any) *InvalidError {
	// The reason becomes a Kafka header and may quote producer bytes (the
	// JSON decoder echoes the offending byte): keep it valid UTF-8.
	return &InvalidError{Field: field, Reason: strings.ToValidUTF8(fmt.Sprintf(format, args...), "\uFFFD")}
}

// DecoderOptions are the contract's configurable parts; all are required.
type DecoderOptions struct {
	Channels        []string // the channels an intent may name
	DefaultCategory string   // the category of an intent that names none
	MaxBytes        int      // the largest value accepted
}

// Decoder validates intents against the configured channels and size limit.
type Decoder struct {
	channels        []string
	defaultCategory string
	maxBytes        int
}

// NewDecoder returns a Decoder.
func NewDecoder(o DecoderOptions) (*Decoder, error) {
	switch {
	case len(o.Channels) == 0:
		return nil, errors.New("dispatch: decoder: Channels is required")
	case o.DefaultCategory == "":
		return nil, errors.New("dispatch: decoder: DefaultCategory is required")
	case o.MaxBytes <= 0:
		return nil, fmt.Errorf("dispatch: decoder: MaxBytes %d must be above 0", o.MaxBytes)
	}
	return &Decoder{channels: slices.Clone(o.Channels), defaultCategory: o.DefaultCategory, maxBytes: o.MaxBytes}, nil
}

// wire is the JSON shape. It is parsed with segmentio/encoding/json (a
// drop-in for encoding/json at about twice its speed: decoding is the
// largest CPU cost per intent) in zero-copy mode: the strings point into the
// record's value, which lives as long as its batch and is never modified. A
// missing and an empty string are the same here (both "required").
// user_id stays raw because the contract accepts a number or a decimal
// string, and a float64 would silently round ids above 2^53.
type wire struct {
	ID         string          `json:"id"`
	UserID     json.RawMessage `json:"user_id"`
	CampaignID string          `json:"campaign_id"`
	Channel    string          `json:"channel"`
	Category   string          `json:"category"`
	CreatedAt  string          `json:"created_at"`
}

// Decode validates one record. key is the record key, which the contract
// says is the user id in decimal: a mismatch would put the user's intents on
// different partitions and lose their order, so it is rejected too.
func (d *Decoder) Decode(key, value []byte) (Intent, error) {
	if len(value) > d.maxBytes {
		return Intent{}, invalid("value", "%d bytes, above the limit of %d (kafka.max_intent_bytes)", len(value), d.maxBytes)
	}
	var w wire
	rest, err := json.Parse(value, &w, json.ZeroCopy)
	if err == nil && len(rest) != 0 {
		err = fmt.Errorf("invalid character %q after top-level value", rest[0])
	}
	if err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return Intent{}, invalid(te.Field, "must be a JSON %s", te.Type.Kind())
		}
		return Intent{}, invalid("value", "not a JSON object: %s", clip.String(err.Error(), 120))
	}
	var in Intent
	switch {
	case w.ID == "":
		return Intent{}, invalid("id", "is required (1 to %d bytes)", maxIDBytes)
	case len(w.ID) > maxIDBytes:
		return Intent{}, invalid("id", "must be 1 to %d bytes, got %d", maxIDBytes, len(w.ID))
	}
	in.ID = w.ID
	uid, err := parseUserID(w.UserID)
	if err != nil {
		return Intent{}, err
	}
	in.UserID = uid
	switch {
	case w.CampaignID == "":
		return Intent{}, invalid("campaign_id", "is required (1 to %d bytes)", maxCampaignBytes)
	case len(w.CampaignID) > maxCampaignBytes:
		return Intent{}, invalid("campaign_id", "must be 1 to %d bytes, got %d", maxCampaignBytes, len(w.CampaignID))
	}
	in.CampaignID = w.CampaignID
	switch {
	case w.Channel == "":
		return Intent{}, invalid("channel", "is required")
	case !slices.Contains(d.channels, w.Channel):
		return Intent{}, invalid("channel", "%q is not a configured channel (%s)", clip.String(w.Channel, 40), strings.Join(d.channels, ", "))
	}
	in.Channel = w.Channel
	in.Category = d.defaultCategory
	if w.Category != "" {
		if len(w.Category) > maxCategoryBytes {
			return Intent{}, invalid("category", "must be at most %d bytes, got %d", maxCategoryBytes, len(w.Category))
		}
		in.Category = w.Category
	}
	if w.CreatedAt != "" {
		t, err := time.Parse(time.RFC3339Nano, w.CreatedAt)
		if err != nil {
			return Intent{}, invalid("created_at", "%q is not an RFC 3339 time", clip.String(w.CreatedAt, 40))
		}
		in.CreatedAt = t
	}
	var buf [20]byte
	if !bytes.Equal(key, strconv.AppendUint(buf[:0], in.UserID, 10)) {
		return Intent{}, invalid("key", "%q is not the user_id %d in decimal (intents are keyed by user)", clip.String(string(key), 40), in.UserID)
	}
	return in, nil
}

// parseUserID reads a JSON number or decimal string of digits only: no
// sign, fraction, exponent, leading zero or escape; at most 2^64-1.
func parseUserID(raw []byte) (uint64, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, invalid("user_id", "is required")
	}
	b := raw
	if b[0] == '"' {
		if len(b) < 2 || b[len(b)-1] != '"' {
			return 0, invalid("user_id", "%s is not an unsigned 64-bit integer", clip.String(string(raw), 40))
		}
		b = b[1 : len(b)-1]
	}
	bad := len(b) == 0 || len(b) > 20 || (len(b) > 1 && b[0] == '0')
	var v uint64
	for i := 0; !bad && i < len(b); i++ {
		c := b[i]
		if c < '0' || c > '9' {
			bad = true
			break
		}
		d := uint64(c - '0')
		if v > (math.MaxUint64-d)/10 {
			bad = true
			break
		}
		v = v*10 + d
	}
	if bad {
		return 0, invalid("user_id", "%s is not an unsigned 64-bit integer", clip.String(string(raw), 40))
	}
	return v, nil
}
