package dispatch

// Scanning an event's JSON: the top-level fields capper reads, as raw
// tokens, and the checks every field shares (UTF-8, kinds, user ids).

import (
	"bytes"
	stdjson "encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"

	json "github.com/segmentio/encoding/json"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/clip"
)

// fields are the raw JSON tokens of the top-level keys capper reads (nil
// when absent): a scalar token as written, an array whole, or the opening
// delimiter of an object.
type fields struct {
	id, userID, campaignID, channel, category, createdAt json.RawValue
	tags, priority, timeZone, override, sendBy, route    json.RawValue
	status, at, lane, retryAfter, delivery               json.RawValue // a delivery status's
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
	case "send_by":
		return &f.sendBy
	case "route":
		return &f.route
	case "status":
		return &f.status
	case "at":
		return &f.at
	case "lane":
		return &f.lane
	case "retry_after":
		return &f.retryAfter
	case "delivery":
		return &f.delivery
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

// who reads the id (its exact bytes) and user_id that intents and delivery
// statuses share.
func (f *fields) who() (id string, user uint64, err error) {
	if id, err = f.str("id", f.id, true); err != nil {
		return "", 0, err
	}
	switch {
	case len(id) == 0:
		return "", 0, invalid("id", "is required (1 to %d bytes)", maxIDBytes)
	case len(id) > maxIDBytes:
		return "", 0, invalid("id", "must be 1 to %d bytes, got %d", maxIDBytes, len(id))
	}
	user, err = parseUserID(f.userID)
	return id, user, err
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
