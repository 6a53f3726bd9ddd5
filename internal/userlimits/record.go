// Package userlimits carries users' own limits from the user-limits topic
// (kafka.topics.user_limits) into Redis: the record format (record.go,
// each kind's field in fields.go), the applier every worker runs in a
// consumer group of its own, which checks each record against the policy
// in force and writes it with the engine (applier.go), and the follower
// every worker runs outside any group, which drops what its refusal cache
// holds about a user whose record changed or was erased (follower.go). The decision side (the
// policy's user_limits section, the stored form and the script that
// enforces it) is internal/capping's.
//
// A record is keyed by the user id in decimal and holds the user's whole
// state, as JSON:
//
//	{"user_id": 42, "snooze": {"until": "2026-12-04T00:00:00Z", "channels": ["push"]},
//	 "tier": "fewer", "channels": {"sms": 0, "push": 2},
//	 "quiet_hours": {"from": "22:00", "to": "07:00"}, "updated_at": "2026-11-27T08:00:00Z"}
//
// Every field but user_id may be left out (or null): that limit is not
// set, so {"user_id": 42} clears them all. updated_at is informational. A
// null value (a tombstone) erases the user: their send log and their
// limits (capper user forget writes one). An empty value is read as a
// tombstone too: kafka-go's reader does not tell them apart.
package userlimits

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/problems"
)

// Record is one record of the topic, decoded.
type Record struct {
	UserID uint64
	// Erase: the record is a tombstone (the user is forgotten); Limits is
	// zero.
	Erase  bool
	Limits capping.UserLimits
	// UpdatedAt is the record's updated_at (zero: not given).
	UpdatedAt time.Time
}

// Reason says why a record was refused (the label of
// capper_user_limits_refused_total).
type Reason string

const (
	// ReasonKey: the key is not a user id in decimal.
	ReasonKey Reason = "key"
	// ReasonJSON: the value is not a JSON object.
	ReasonJSON Reason = "json"
	// ReasonField: a field is missing, unknown or wrong.
	ReasonField Reason = "field"
	// ReasonPolicy: the limits do not fit the policy in force (a tier it
	// does not name, a channel users may not turn down, ...).
	ReasonPolicy Reason = "policy"
)

// Reasons are every Reason, in the order above.
var Reasons = []Reason{ReasonKey, ReasonJSON, ReasonField, ReasonPolicy}

// Error is a refused record: why, and what is wrong. Its Error names the
// user when it helps (the user_id that does not match the key); Public
// never does, for the logs at warn level.
type Error struct {
	Reason Reason
	Err    error
	public string
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Public is the error without user ids.
func (e *Error) Public() string {
	if e.public != "" {
		return e.public
	}
	return e.Err.Error()
}

// ReasonOf is the reason of a refused record's error ("" for any other
// error).
func ReasonOf(err error) Reason {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}

// Key is the record key of a user: the id in decimal.
func Key(uid uint64) []byte { return strconv.AppendUint(nil, uid, 10) }

// ParseKey reads a record key: a user id in decimal, as Key writes it
// (no sign, no leading zero, no spaces).
func ParseKey(key []byte) (uint64, error) {
	uid, err := strconv.ParseUint(string(key), 10, 64)
	if err != nil || !bytes.Equal(Key(uid), key) {
		return 0, &Error{Reason: ReasonKey, Err: fmt.Errorf("key %q is not a user id in decimal", key),
			public: fmt.Sprintf("the key (%d bytes) is not a user id in decimal", len(key))}
	}
	return uid, nil
}

// Decode reads a record: its key, and its value (nil or empty: a
// tombstone). Every
// problem of the value is reported at once, each at its field's path
// (snooze.until, channels.sms, quiet_hours.from); the error is an *Error.
func Decode(key, value []byte) (Record, error) {
	uid, err := ParseKey(key)
	if err != nil {
		return Record{}, err
	}
	if len(value) == 0 {
		return Record{UserID: uid, Erase: true}, nil
	}
	r, err := DecodeValue(value)
	if err != nil {
		return Record{}, err
	}
	if r.UserID != uid {
		return Record{}, &Error{Reason: ReasonField, Err: fmt.Errorf("user_id: %d does not match the key %d", r.UserID, uid),
			public: "user_id: does not match the key"}
	}
	return r, nil
}

// DecodeValue reads a record's value (not a tombstone) without its key.
func DecodeValue(value []byte) (Record, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(value, &top); err != nil || top == nil {
		msg := "the value is not a JSON object"
		if err != nil {
			msg += ": " + err.Error()
		}
		return Record{}, &Error{Reason: ReasonJSON, Err: errors.New(msg)}
	}
	d := &decoder{}
	r := Record{}
	in := d.object(nil, top, fieldNames()...)
	if raw, ok := in["user_id"]; ok && !isNull(raw) {
		r.UserID = d.userID(raw)
	} else {
		d.ps.Add(problems.Key("user_id"), "is required")
	}
	for _, f := range fields {
		if raw := in[f.name]; !isNull(raw) {
			f.decode(d, raw, &r.Limits)
		}
	}
	if raw := in["updated_at"]; !isNull(raw) {
		r.UpdatedAt = d.time(problems.Key("updated_at"), raw)
	}
	if len(d.ps) > 0 {
		return Record{}, &Error{Reason: ReasonField, Err: d.ps.Err(), public: d.public().Error()}
	}
	return r, nil
}

// decoder collects the problems of one value.
type decoder struct {
	ps problems.List
	// badUserID is the public text of a user_id that is no id (ps quotes
	// it: it may be the user's id, written wrong).
	badUserID string
}

// public is the problems as a log line above debug may show them: the
// user_id's value left out.
func (d *decoder) public() error {
	out := slices.Clone(d.ps)
	for i := range out {
		if d.badUserID != "" && out[i].Path.String() == "user_id" {
			out[i].Msg = d.badUserID
		}
	}
	return out.Err()
}

func isNull(raw json.RawMessage) bool { return raw == nil || string(raw) == "null" }

// object returns the fields of an object, reporting every key not in
// known as unknown (in order) and a value that is no object.
func (d *decoder) object(at problems.Path, fields map[string]json.RawMessage, known ...string) map[string]json.RawMessage {
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		if !slices.Contains(known, k) {
			d.ps.Add(at.Key(k), "unknown field (known: %s)", strings.Join(known, ", "))
		}
	}
	return fields
}

// sub decodes the object at path (nil and a problem when it is not one).
func (d *decoder) sub(at problems.Path, raw json.RawMessage, known ...string) map[string]json.RawMessage {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		d.ps.Add(at, "%s is not an object", short(raw))
		return nil
	}
	return d.object(at, fields, known...)
}

func (d *decoder) userID(raw json.RawMessage) uint64 {
	uid, err := strconv.ParseUint(string(raw), 10, 64)
	if err != nil {
		const want = "is not a user id (a whole number from 0 to 18446744073709551615)"
		d.ps.Add(problems.Key("user_id"), "%s %s", short(raw), want)
		d.badUserID = jsonKind(raw) + " " + want
	}
	return uid
}

// jsonKind says what a JSON value is without showing it.
func jsonKind(raw json.RawMessage) string {
	v := bytes.TrimSpace(raw)
	if len(v) == 0 {
		return "nothing"
	}
	switch v[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "a list"
	case 't', 'f':
		return "a boolean"
	case '-':
		return "a negative number"
	}
	if bytes.ContainsAny(v, ".eE") {
		return "a number with a fraction or an exponent"
	}
	return "a number too large"
}

func (d *decoder) snooze(raw json.RawMessage) (time.Time, []string) {
	at := problems.Key("snooze")
	fields := d.sub(at, raw, "until", "channels")
	if fields == nil {
		return time.Time{}, nil
	}
	var until time.Time
	if u, ok := fields["until"]; ok && !isNull(u) {
		until = d.time(at.Key("until"), u)
	} else {
		d.ps.Add(at.Key("until"), "is required (an RFC 3339 time)")
	}
	var channels []string
	if c := fields["channels"]; !isNull(c) {
		if err := json.Unmarshal(c, &channels); err != nil {
			d.ps.Add(at.Key("channels"), "%s is not a list of channel names", short(c))
			return until, nil
		}
		for i, ch := range channels {
			switch {
			case ch == "":
				d.ps.Add(at.Key("channels").Index(i), "a channel name is required")
			case slices.Index(channels, ch) < i:
				d.ps.Add(at.Key("channels").Index(i), "%q is listed twice", ch)
			}
		}
		if len(channels) == 0 {
			channels = nil // every channel
		}
	}
	return until, channels
}

func (d *decoder) tier(raw json.RawMessage) string {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		d.ps.Add(problems.Key("tier"), "%s is not a tier name", short(raw))
		return ""
	}
	if s == "" {
		d.ps.Add(problems.Key("tier"), `"" is not a tier name (leave the field out for no tier)`)
	}
	return s
}

func (d *decoder) channels(raw json.RawMessage) map[string]int {
	at := problems.Key("channels")
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		d.ps.Add(at, "%s is not an object of channels and their max", short(raw))
		return nil
	}
	var out map[string]int
	for _, c := range slices.Sorted(maps.Keys(fields)) {
		v := fields[c]
		if c == "" {
			d.ps.Add(at, "a channel name is required")
			continue
		}
		n, err := strconv.Atoi(string(v))
		switch {
		case err != nil:
			d.ps.Add(at.Key(c), "%s is not a whole number (a max per the policy's channel window; 0: off)", short(v))
		case n < 0:
			d.ps.Add(at.Key(c), "%d is below 0 (0 turns the channel off)", n)
		default:
			if out == nil {
				out = map[string]int{}
			}
			out[c] = n
		}
	}
	return out
}

func (d *decoder) quiet(raw json.RawMessage) *capping.UserQuiet {
	at := problems.Key("quiet_hours")
	fields := d.sub(at, raw, "from", "to")
	if fields == nil {
		return nil
	}
	q := &capping.UserQuiet{}
	for _, f := range []struct {
		name string
		dst  *int
	}{{"from", &q.From}, {"to", &q.To}} {
		v, ok := fields[f.name]
		if !ok || isNull(v) {
			d.ps.Add(at.Key(f.name), "is required (HH:MM, the user's time of day)")
			continue
		}
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			d.ps.Add(at.Key(f.name), "%s is not HH:MM", short(v))
			continue
		}
		m, err := ParseClock(s)
		if err != nil {
			d.ps.Add(at.Key(f.name), "%s", err)
			continue
		}
		*f.dst = m
	}
	return q
}

func (d *decoder) time(at problems.Path, raw json.RawMessage) time.Time {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			return t.UTC()
		}
	}
	d.ps.Add(at, "%s is not an RFC 3339 time (e.g. 2026-12-04T00:00:00Z)", short(raw))
	return time.Time{}
}

// short is a value as a message quotes it, cut at 40 bytes.
func short(raw json.RawMessage) string {
	s := string(raw)
	if len(s) > 40 {
		s = s[:40] + "..."
	}
	return s
}

// ParseClock reads a time of day, HH:MM (00:00 to 23:59), as minutes
// after midnight.
func ParseClock(s string) (int, error) {
	bad := fmt.Errorf("%q is not HH:MM (00:00 to 23:59)", s)
	if len(s) != 5 || s[2] != ':' {
		return 0, bad
	}
	h, err1 := strconv.Atoi(s[:2])
	m, err2 := strconv.Atoi(s[3:])
	if err1 != nil || err2 != nil || s[0] == '+' || s[0] == '-' || s[3] == '+' || s[3] == '-' || h > 23 || m > 59 {
		return 0, bad
	}
	return h*60 + m, nil
}

// FormatClock writes minutes after midnight as HH:MM.
func FormatClock(m int) string { return fmt.Sprintf("%02d:%02d", m/60, m%60) }
