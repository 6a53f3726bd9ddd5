package dispatch

// Decoding and validating a send-intent against the event contract.

import (
	"bytes"
	stdjson "encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
	"unsafe"

	json "github.com/segmentio/encoding/json"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/clip"
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
}

// Limits on fields, from the event contract (README, "The event contract").
const (
	maxIDBytes       = capping.MaxIntentID
	maxCampaignBytes = 256
	maxCategoryBytes = 64
	// maxZoneBytes is well above the longest IANA name (32 bytes).
	maxZoneBytes = 64
)

// invalidFields are every InvalidError.Field the decoder uses (a bounded
// metric label: a key capper does not read is reported as "value").
var invalidFields = []string{"value", "key", "id", "user_id", "campaign_id", "channel", "category", "created_at",
	"tags", "priority", "time_zone", "capping"}

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

// Decoder validates intents against the configured channels, categories and
// size limit. It is safe for concurrent use.
type Decoder struct {
	channels        []string
	categories      []string
	defaultCategory string
	maxBytes        int
	zones           zoneCache
}

// NewDecoder returns a Decoder.
func NewDecoder(o DecoderOptions) (*Decoder, error) {
	switch {
	case len(o.Channels) == 0:
		return nil, errors.New("dispatch: decoder: Channels is required")
	case len(o.Categories) == 0:
		return nil, errors.New("dispatch: decoder: Categories is required")
	case !slices.Contains(o.Categories, o.DefaultCategory):
		return nil, fmt.Errorf("dispatch: decoder: DefaultCategory %q is not one of Categories", o.DefaultCategory)
	case o.MaxBytes <= 0:
		return nil, fmt.Errorf("dispatch: decoder: MaxBytes %d must be above 0", o.MaxBytes)
	}
	return &Decoder{channels: slices.Clone(o.Channels), categories: slices.Clone(o.Categories),
		defaultCategory: o.DefaultCategory, maxBytes: o.MaxBytes}, nil
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

func (d *Decoder) validate(key []byte, keyed bool, f *fields) (Intent, error) {
	var in Intent
	id, err := f.str("id", f.id, true)
	if err != nil {
		return Intent{}, err
	}
	switch {
	case len(id) == 0:
		return Intent{}, invalid("id", "is required (1 to %d bytes)", maxIDBytes)
	case len(id) > maxIDBytes:
		return Intent{}, invalid("id", "must be 1 to %d bytes, got %d", maxIDBytes, len(id))
	}
	in.ID = id
	if in.UserID, err = parseUserID(f.userID); err != nil {
		return Intent{}, err
	}
	if in.CampaignID, err = f.str("campaign_id", f.campaignID, false); err != nil {
		return Intent{}, err
	}
	switch {
	case in.CampaignID == "":
		return Intent{}, invalid("campaign_id", "is required (1 to %d bytes)", maxCampaignBytes)
	case len(in.CampaignID) > maxCampaignBytes:
		return Intent{}, invalid("campaign_id", "must be 1 to %d bytes, got %d", maxCampaignBytes, len(in.CampaignID))
	}
	if in.Channel, err = f.str("channel", f.channel, false); err != nil {
		return Intent{}, err
	}
	switch {
	case in.Channel == "":
		return Intent{}, invalid("channel", "is required")
	case !slices.Contains(d.channels, in.Channel):
		return Intent{}, invalid("channel", "%q is not a configured channel (%s)", clip.String(in.Channel, 40), strings.Join(d.channels, ", "))
	}
	if in.Category, err = f.str("category", f.category, false); err != nil {
		return Intent{}, err
	}
	switch {
	case in.Category == "":
		in.Category = d.defaultCategory
	case len(in.Category) > maxCategoryBytes:
		return Intent{}, invalid("category", "must be at most %d bytes, got %d", maxCategoryBytes, len(in.Category))
	case !slices.Contains(d.categories, in.Category):
		return Intent{}, invalid("category", "%q is not a configured category (%s)", clip.String(in.Category, 40), strings.Join(d.categories, ", "))
	}
	if in.Tags, err = tagList(f.tags); err != nil {
		return Intent{}, err
	}
	if in.Priority, err = oneOf(f, "priority", f.priority, capping.Normal, capping.ParsePriority); err != nil {
		return Intent{}, err
	}
	if f.timeZone != nil {
		z, err := f.str("time_zone", f.timeZone, false)
		if err != nil {
			return Intent{}, err
		}
		var ok bool
		if in.TimeZone, ok = d.zones.load(z); !ok {
			return Intent{}, invalid("time_zone", "%q is not an IANA time zone", clip.String(z, 40))
		}
	}
	if in.Override, err = oneOf(f, "capping", f.override, capping.NoOverride, capping.ParseOverride); err != nil {
		return Intent{}, err
	}
	createdAt, err := f.str("created_at", f.createdAt, false)
	if err != nil {
		return Intent{}, err
	}
	if createdAt != "" {
		t, err := time.Parse(time.RFC3339Nano, createdAt)
		if err != nil {
			return Intent{}, invalid("created_at", "%q is not an RFC 3339 time", clip.String(createdAt, 40))
		}
		in.CreatedAt = t
	}
	var buf [20]byte
	if keyed && !bytes.Equal(key, strconv.AppendUint(buf[:0], in.UserID, 10)) {
		return Intent{}, invalid("key", "%q is not the user_id %d in decimal (intents are keyed by user)", clip.String(string(key), 40), in.UserID)
	}
	return in, nil
}

// fields are the raw JSON tokens of the top-level keys capper reads (nil
// when absent): a scalar token as written, an array whole, or the opening
// delimiter of an object.
type fields struct {
	id, userID, campaignID, channel, category, createdAt json.RawValue
	tags, priority, timeZone, override                   json.RawValue
	status, at                                           json.RawValue // a delivery status's
}

func (f *fields) slot(name []byte) *json.RawValue {
	switch string(name) {
	case "id":
		return &f.id
	case "user_id":
		return &f.userID
	case "campaign_id":
		return &f.campaignID
	case "channel":
		return &f.channel
	case "category":
		return &f.category
	case "created_at":
		return &f.createdAt
	case "tags":
		return &f.tags
	case "priority":
		return &f.priority
	case "time_zone":
		return &f.timeZone
	case "capping":
		return &f.override
	case "status":
		return &f.status
	case "at":
		return &f.at
	}
	return nil
}

// scan walks a valid JSON value once: it must be an object, and no
// top-level key may appear twice.
func (f *fields) scan(value []byte) error {
	var t json.Tokenizer
	t.Reset(value)
	if !t.Next() || t.Delim != '{' {
		return invalid("value", "not a JSON object (%s)", kindOf(t.Value))
	}
	var seen [16][]byte // top-level keys; a map past 16
	var more map[string]bool
	n := 0
	var cur *json.RawValue
	var arr *json.RawValue // a field's array being read; from arrStart
	arrStart := 0
	for t.Next() {
		if t.Depth != 1 {
			continue // inside a value: payload and the like, forwarded as is
		}
		switch {
		case t.IsKey:
			name := t.String()
			dup := false
			if n < len(seen) {
				for _, s := range seen[:n] {
					dup = dup || bytes.Equal(s, name)
				}
				seen[n] = name
			} else {
				if more == nil {
					more = make(map[string]bool)
					for _, s := range seen {
						more[string(s)] = true
					}
				}
				dup = more[string(name)]
				more[string(name)] = true
			}
			n++
			cur = f.slot(name)
			if dup && cur != nil {
				return invalid(string(name), "is given twice (a duplicate key)")
			}
			if dup {
				// Not a field capper reads: the error names it, the
				// metric label stays "value" (bounded).
				return invalid("value", "key %q is given twice (a duplicate key)", clip.String(string(name), 40))
			}
		case t.Delim == ':' || t.Delim == ',':
		case t.Delim == ']' && arr != nil:
			// The matching ']': the tokenizer reports it at the depth of
			// its '[' (the inner ones are deeper).
			*arr, arr = value[arrStart:len(value)-t.Remaining()], nil
		case cur != nil && t.Delim == '[':
			arr, arrStart, cur = cur, len(value)-t.Remaining()-1, nil
		case cur != nil:
			*cur, cur = t.Value, nil
		}
	}
	if t.Err != nil {
		return invalid("value", "not valid JSON: %v", t.Err)
	}
	return nil
}

// str reads a string field. raw keeps the bytes as written (escapes
// included); otherwise JSON escapes are decoded. Absent is "".
func (f *fields) str(name string, v json.RawValue, raw bool) (string, error) {
	if v == nil {
		return "", nil
	}
	if !v.String() {
		return "", invalid(name, "must be a JSON string, got %s", kindOf(v))
	}
	inner := v[1 : len(v)-1]
	if raw || bytes.IndexByte(inner, '\\') < 0 {
		return view(inner), nil
	}
	return string(v.Unquote()), nil
}

// tagList reads tags: a JSON array of up to MaxTags strings, each a valid
// tag once its escapes are decoded; null and [] are no tags.
func tagList(v json.RawValue) ([]string, error) {
	switch {
	case v == nil || v.Null():
		return nil, nil
	case v[0] != '[':
		return nil, invalid("tags", "must be a JSON array of strings, got %s", kindOf(v))
	}
	var tags []string
	n := 0
	var t json.Tokenizer
	t.Reset(v)
	for t.Next() {
		// Elements are at depth 1: values, or the '[' or '{' that opens
		// one (their closing delimiters come back at depth 1 too).
		if t.Depth != 1 || (t.Delim != 0 && t.Delim != '[' && t.Delim != '{') {
			continue
		}
		i := n
		n++
		if n > capping.MaxTags {
			continue // counted for the message only
		}
		if !t.Value.String() {
			return nil, invalidElem("tags", i, "must be a JSON string, got %s", kindOf(t.Value))
		}
		tag := view(t.Value[1 : len(t.Value)-1])
		if strings.IndexByte(tag, '\\') >= 0 {
			tag = string(t.Value.Unquote())
		}
		if !capping.ValidTag(tag) {
			return nil, invalidElem("tags", i, "%q must be 1 to %d bytes of printable characters without spaces", clip.String(tag, 40), capping.MaxTagBytes)
		}
		if tags == nil {
			tags = make([]string, 0, 4)
		}
		tags = append(tags, tag)
	}
	if t.Err != nil {
		return nil, invalid("tags", "not valid JSON: %v", t.Err)
	}
	if n > capping.MaxTags {
		return nil, invalid("tags", "%d tags, at most %d", n, capping.MaxTags)
	}
	return tags, nil
}

func invalidElem(field string, i int, format string, args ...any) *InvalidError {
	e := invalid(field, format, args...)
	e.Elem = "[" + strconv.Itoa(i) + "]"
	return e
}

// oneOf reads a string field that is one of a few names, with capping's
// parser (which owns the names); absent is def.
func oneOf[T any](f *fields, name string, v json.RawValue, def T, parse func(string) (T, error)) (T, error) {
	if v == nil {
		return def, nil
	}
	s, err := f.str(name, v, false)
	if err != nil {
		return def, err
	}
	x, err := parse(s)
	if err != nil {
		// The message quotes the producer's value: parse it clipped (no
		// name ends in "...") for a message of bounded size.
		_, err = parse(clip.String(s, 40))
		return def, invalid(name, "%v", err)
	}
	return x, nil
}

// zoneCache holds the time zones intents named: time.LoadLocation parses
// the zone's tzdata on every call. Only names that loaded are kept, so junk
// cannot grow it beyond the zones that exist. Readers take no lock: the map
// is replaced, never changed, when a zone is added.
type zoneCache struct {
	mu     sync.Mutex // serialises additions
	byName atomic.Pointer[map[string]*time.Location]
}

// load returns the zone of an IANA name; false: name is none.
func (c *zoneCache) load(name string) (*time.Location, bool) {
	if m := c.byName.Load(); m != nil {
		if loc, ok := (*m)[name]; ok {
			return loc, true
		}
	}
	if !zoneShaped(name) {
		return nil, false
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	next := map[string]*time.Location{}
	if old := c.byName.Load(); old != nil {
		if l, ok := (*old)[name]; ok {
			return l, true // added meanwhile
		}
		next = maps.Clone(*old)
	}
	// name may be a view of a record's bytes: the cache keeps a copy.
	next[strings.Clone(name)] = loc
	c.byName.Store(&next)
	return loc, true
}

// zoneShaped reports whether name has the shape of an IANA zone name
// (Area/Location, or a legacy name such as UTC or EST5EDT): ASCII letters,
// digits, '_', '-', '+', components separated by '/' that start with a
// capital letter. It keeps junk from reaching the file system through
// time.LoadLocation, and rules out what it would load that is no zone of
// the database: "" and "Local" (UTC and the host's zone), and the host's
// files "localtime", "posixrules", "posix/...".
func zoneShaped(name string) bool {
	if len(name) == 0 || len(name) > maxZoneBytes || name == "Local" {
		return false
	}
	start := true
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case start && (c < 'A' || c > 'Z'):
			return false
		case c == '/':
			start = true
			continue
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '-', c == '+':
		default:
			return false
		}
		start = false
	}
	return !start
}

// view is b as a string without a copy: the record's value bytes live as
// long as its batch and nothing writes to them (capper forwards them
// untouched).
func view(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// kindOf names a JSON token's type for messages.
func kindOf(v json.RawValue) string {
	switch {
	case len(v) == 0:
		return "nothing"
	case v.String():
		return "a string"
	case v.Null():
		return "null"
	case v.True() || v.False():
		return "a boolean"
	case v[0] == '[':
		return "an array"
	case v[0] == '{':
		return "an object"
	}
	return "a number"
}

// syntaxError describes why value is not JSON, with the offset, in the
// standard library's words (only on this rare path).
func syntaxError(value []byte) string {
	var v any
	err := stdjson.Unmarshal(value, &v)
	var se *stdjson.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%s (offset %d)", se.Error(), se.Offset)
	}
	if err != nil {
		return err.Error()
	}
	return "rejected by the parser"
}

// invalidUTF8 returns the offset of the first byte that is not part of a
// valid UTF-8 sequence, or -1.
func invalidUTF8(b []byte) int {
	if utf8.Valid(b) {
		return -1
	}
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size == 1 {
			return i
		}
		i += size
	}
	return -1
}

// parseUserID reads a JSON number or decimal string of digits only: no
// sign, fraction, exponent, leading zero or escape; at most 2^64-1.
func parseUserID(raw []byte) (uint64, error) {
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return 0, invalid("user_id", "is required")
	case raw[0] == '[' || raw[0] == '{' || raw[0] == 't' || raw[0] == 'f':
		return 0, invalid("user_id", "must be a JSON number or a string of digits, got %s", kindOf(raw))
	}
	b := raw
	if b[0] == '"' {
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
