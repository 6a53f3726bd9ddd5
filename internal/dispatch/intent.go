package dispatch

// Decoding and validating a send-intent against the event contract.

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	json "github.com/segmentio/encoding/json"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/clip"
	"github.com/capper-dev/capper/internal/pacing"
)

// Intent is the part of a send-intent capper reads. Everything else in the
// value (payload, unknown fields) is forwarded untouched with the original
// bytes.
type Intent struct {
	// ID is the idempotency key: the id's bytes exactly as the producer
	// wrote them inside the JSON string, escapes included.
	ID         string
	UserID     uint64
	CampaignID string
	Channel    string
	Category   string
	CreatedAt  time.Time // zero when absent
	// Tags are decoded from JSON; nil when absent, null or []. A tag
	// without escapes is a view of the value's bytes, like ID.
	Tags     []string
	Priority capping.Priority // Normal when absent
	// TimeZone is the user's, for calendar limits; nil when absent (the
	// policy's applies).
	TimeZone *time.Location
	// Override is what the intent asks of capping (the "capping" field);
	// the engine honours it only where the policy allows.
	Override capping.Override
	// SendBy: never delivered after it (campaign control cancels it, and
	// a deferral past it cancels instead); zero when absent.
	SendBy time.Time
	// Route is the provider or sender pool the intent goes out through
	// (fcm, apns, sms-us-shortcode): what a policy's budgets pace by; ""
	// when absent or null. Without escapes, a view of the value's bytes,
	// like ID.
	Route string
}

// Limits on fields, from the event contract (docs/reference/event-contract.md).
const (
	maxIDBytes       = capping.MaxIntentID
	maxCampaignBytes = 256
	maxCategoryBytes = 64
	// maxZoneBytes is well above the longest IANA name (32 bytes).
	maxZoneBytes  = 64
	maxRouteBytes = 64
)

// invalidFields are every InvalidError.Field the decoder uses (a bounded
// metric label: a key capper does not read is reported as "value").
var invalidFields = []string{"value", "key", "id", "user_id", "campaign_id", "channel", "category", "created_at",
	"tags", "priority", "time_zone", "capping", "send_by", "route"}

// InvalidError says why an intent cannot be decided. Its text goes into the
// dead-letter record's capper-error header, so it names the field.
type InvalidError struct {
	Field string // the JSON field, "value" or "key" (a metric label)
	// Elem is the element of the field at fault ("[2]" of tags), or "".
	Elem   string
	Reason string
}

func (e *InvalidError) Error() string { return e.Field + e.Elem + ": " + e.Reason }

func invalid(field, format string, args ...any) *InvalidError {
	// The reason becomes a Kafka header and may quote producer bytes: keep
	// it valid UTF-8.
	return &InvalidError{Field: field, Reason: strings.ToValidUTF8(fmt.Sprintf(format, args...), "\uFFFD")}
}

// DecoderOptions are the contract's configurable parts; all are required.
type DecoderOptions struct {
	Channels        []string // the channels an intent may name
	Categories      []string // the categories an intent may name
	DefaultCategory string   // the category of an intent that names none (one of Categories)
	MaxBytes        int      // the largest value accepted
}

// vocabulary is what the policy in force says an intent may name.
type vocabulary struct {
	channels        []string
	categories      []string
	defaultCategory string
}

func newVocabulary(channels, categories []string, def string) (*vocabulary, error) {
	switch {
	case len(channels) == 0:
		return nil, errors.New("dispatch: decoder: Channels is required")
	case len(categories) == 0:
		return nil, errors.New("dispatch: decoder: Categories is required")
	case !slices.Contains(categories, def):
		return nil, fmt.Errorf("dispatch: decoder: DefaultCategory %q is not one of Categories", def)
	}
	return &vocabulary{channels: slices.Clone(channels), categories: slices.Clone(categories), defaultCategory: def}, nil
}

// Decoder validates intents against the channels and categories of the
// policy in force and the size limit. It is safe for concurrent use.
type Decoder struct {
	vocab    atomic.Pointer[vocabulary]
	maxBytes int
	zones    zoneCache
}

// NewDecoder returns a Decoder.
func NewDecoder(o DecoderOptions) (*Decoder, error) {
	if o.MaxBytes <= 0 {
		return nil, fmt.Errorf("dispatch: decoder: MaxBytes %d must be above 0", o.MaxBytes)
	}
	d := &Decoder{maxBytes: o.MaxBytes}
	if err := d.SetVocabulary(o.Channels, o.Categories, o.DefaultCategory); err != nil {
		return nil, err
	}
	return d, nil
}

// SetVocabulary replaces the channels and categories intents may name and
// the default category: a new policy's, swapped in while intents are
// decoded. (An intent decoded under the old ones and decided under the new
// policy is checked again by the engine.)
func (d *Decoder) SetVocabulary(channels, categories []string, defaultCategory string) error {
	v, err := newVocabulary(channels, categories, defaultCategory)
	if err != nil {
		return err
	}
	d.vocab.Store(v)
	return nil
}

// Decode validates one record. key is the record key, which the contract
// says is the user id in decimal: a mismatch would put the user's intents on
// different partitions and lose their order, so it is rejected too.
//
// The value must be valid UTF-8 throughout (a JSON decoder would turn every
// invalid byte into U+FFFD, and two ids that differ only there would be one
// idempotency key), valid JSON, one object, and name no top-level key twice
// (which one would count is a matter of the reader).
func (d *Decoder) Decode(key, value []byte) (Intent, error) {
	return d.decode(key, value, true)
}

// DecodeValue validates a value that comes without its record key (a
// saved intent, one per line): everything Decode checks but the key.
func (d *Decoder) DecodeValue(value []byte) (Intent, error) {
	return d.decode(nil, value, false)
}

func (d *Decoder) decode(key, value []byte, keyed bool) (Intent, error) {
	var f fields
	if err := d.scan(value, "an intent", &f); err != nil {
		return Intent{}, err
	}
	return d.validate(key, keyed, &f)
}

// scan checks what every record capper reads must be (a JSON object of
// valid UTF-8, not too large, no key twice) and finds its fields.
func (d *Decoder) scan(value []byte, what string, f *fields) error {
	switch {
	case len(value) == 0:
		// kafka-go reads a null and a 0-byte value alike.
		return invalid("value", "empty: a null or 0-byte value is not %s", what)
	case len(value) > d.maxBytes:
		return invalid("value", "%d bytes, above the limit of %d (kafka.max_intent_bytes)", len(value), d.maxBytes)
	}
	if i := invalidUTF8(value); i >= 0 {
		return invalid("value", "not valid UTF-8: byte %#02x at offset %d", value[i], i)
	}
	if !json.Valid(value) {
		return invalid("value", "not valid JSON: %s", syntaxError(value))
	}
	return f.scan(value)
}

// validate reads the scanned fields into an intent, checking each in the
// contract's order (the first wrong one is the error), then the key.
func (d *Decoder) validate(key []byte, keyed bool, f *fields) (Intent, error) {
	var in Intent
	var err error
	if in.ID, in.UserID, err = f.who(); err != nil {
		return Intent{}, err
	}
	if in.CampaignID, err = campaignOf(f); err != nil {
		return Intent{}, err
	}
	v := d.vocab.Load()
	if in.Channel, err = v.channelOf(f); err != nil {
		return Intent{}, err
	}
	if in.Category, err = v.categoryOf(f); err != nil {
		return Intent{}, err
	}
	if in.Tags, err = tagList(f.tags); err != nil {
		return Intent{}, err
	}
	if in.Priority, err = priorityOf(f); err != nil {
		return Intent{}, err
	}
	if in.TimeZone, err = d.timeZoneOf(f); err != nil {
		return Intent{}, err
	}
	if in.Override, err = oneOf(f, "capping", f.override, capping.NoOverride, capping.ParseOverride); err != nil {
		return Intent{}, err
	}
	if in.CreatedAt, err = timeOf(f, "created_at", f.createdAt); err != nil {
		return Intent{}, err
	}
	if in.SendBy, err = timeOf(f, "send_by", f.sendBy); err != nil {
		return Intent{}, err
	}
	if in.Route, err = routeOf(f); err != nil {
		return Intent{}, err
	}
	var buf [20]byte
	if keyed && !bytes.Equal(key, strconv.AppendUint(buf[:0], in.UserID, 10)) {
		return Intent{}, invalid("key", "%q is not the user_id %d in decimal (intents are keyed by user)", clip.String(string(key), 40), in.UserID)
	}
	return in, nil
}

// campaignOf reads the campaign id: required, at most maxCampaignBytes.
func campaignOf(f *fields) (string, error) {
	c, err := f.str("campaign_id", f.campaignID, false)
	switch {
	case err != nil:
		return "", err
	case c == "":
		return "", invalid("campaign_id", "is required (1 to %d bytes)", maxCampaignBytes)
	case len(c) > maxCampaignBytes:
		return "", invalid("campaign_id", "must be 1 to %d bytes, got %d", maxCampaignBytes, len(c))
	}
	return c, nil
}

// channelOf reads the channel: required, one of the policy's.
func (v *vocabulary) channelOf(f *fields) (string, error) {
	c, err := f.str("channel", f.channel, false)
	switch {
	case err != nil:
		return "", err
	case c == "":
		return "", invalid("channel", "is required")
	case !slices.Contains(v.channels, c):
		return "", invalid("channel", "%q is not a configured channel (%s)", clip.String(c, 40), strings.Join(v.channels, ", "))
	}
	return c, nil
}

// categoryOf reads the category: the policy's default when absent or
// empty, else one of the policy's, at most maxCategoryBytes.
func (v *vocabulary) categoryOf(f *fields) (string, error) {
	c, err := f.str("category", f.category, false)
	switch {
	case err != nil:
		return "", err
	case c == "":
		return v.defaultCategory, nil
	case len(c) > maxCategoryBytes:
		return "", invalid("category", "must be at most %d bytes, got %d", maxCategoryBytes, len(c))
	case !slices.Contains(v.categories, c):
		return "", invalid("category", "%q is not a configured category (%s)", clip.String(c, 40), strings.Join(v.categories, ", "))
	}
	return c, nil
}

// routeOf reads the optional route: "" when absent or null (unlike the
// other string fields, null is no route), else 1 to maxRouteBytes of a-z,
// 0-9, '.', '_' and '-', starting with a letter or digit (a policy's
// budgets name routes alike), its escapes decoded.
func routeOf(f *fields) (string, error) {
	if f.route == nil || f.route.Null() {
		return "", nil
	}
	r, err := f.str("route", f.route, false)
	switch {
	case err != nil:
		return "", err
	case len(r) > maxRouteBytes:
		return "", invalid("route", "must be 1 to %d bytes, got %d", maxRouteBytes, len(r))
	case !validRoute(r):
		return "", invalid("route", "%q must be 1 to %d bytes of a-z, 0-9, '.', '_' and '-', starting with a letter or digit", clip.String(r, 40), maxRouteBytes)
	}
	return r, nil
}

// Pacing is what budgets match the intent on (pacing/match.go): a
// dimension budgets match on is filled in here.
func (in *Intent) Pacing() pacing.Intent {
	return pacing.Intent{Channel: in.Channel, Route: in.Route, Priority: in.Priority}
}

// validRoute reports whether r matches ^[a-z0-9][a-z0-9._-]*$ (its length
// is checked before), without a regexp: it runs for every intent.
func validRoute(r string) bool {
	if r == "" || r[0] == '.' || r[0] == '_' || r[0] == '-' {
		return false
	}
	for i := 0; i < len(r); i++ {
		if c := r[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// timeZoneOf reads the optional IANA time zone (nil when absent).
func (d *Decoder) timeZoneOf(f *fields) (*time.Location, error) {
	if f.timeZone == nil {
		return nil, nil
	}
	z, err := f.str("time_zone", f.timeZone, false)
	if err != nil {
		return nil, err
	}
	loc, ok := d.zones.load(z)
	if !ok {
		return nil, invalid("time_zone", "%q is not an IANA time zone", clip.String(z, 40))
	}
	return loc, nil
}

// timeOf reads the optional RFC 3339 time of field name (the zero time
// when absent or empty).
func timeOf(f *fields, name string, v json.RawValue) (time.Time, error) {
	s, err := f.str(name, v, false)
	if err != nil || s == "" {
		return time.Time{}, err
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, invalid(name, "%q is not an RFC 3339 time", clip.String(s, 40))
	}
	return t, nil
}

// NewRequest is the engine's request for a decoded intent of a user in
// segment (the snapshot's Lookup), without its decision time (the caller's
// clock) and Redelivered (where the worker's refusal cache may answer). The worker
// and capper replay build requests with it alike.
func NewRequest(in *Intent, segment string) capping.Request {
	return capping.Request{
		UserID: in.UserID, Segment: segment, IntentID: in.ID,
		Campaign: in.CampaignID, Channel: in.Channel, Category: in.Category,
		Tags: in.Tags, Priority: in.Priority, TimeZone: in.TimeZone, Override: in.Override,
	}
}

// priorityOf reads the priority: a name or a whole number from 0 to
// capping.MaxPriority, as a JSON string or number; absent, normal.
func priorityOf(f *fields) (capping.Priority, error) {
	if v := f.priority; len(v) > 0 && v[0] >= '0' && v[0] <= '9' {
		p, err := capping.ParsePriority(view(v))
		if err != nil {
			return 0, invalid("priority", "%v", err)
		}
		return p, nil
	}
	return oneOf(f, "priority", f.priority, capping.Normal, capping.ParsePriority)
}
