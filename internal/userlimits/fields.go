package userlimits

// Each kind of users' limits as a field of the record's JSON, one row a
// kind (capping's userkinds.go has the rest of a kind): how the field is
// read, every problem at its path, and written back.

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/capper-dev/capper/internal/capping"
)

// field is a kind's field of the record.
type field struct {
	name string // capping.UserKinds' name
	// decode reads a non-null value into u, reporting its problems in d.
	decode func(d *decoder, raw json.RawMessage, u *capping.UserLimits)
	// encode is the value Decode reads back (ok false: not set).
	encode func(u capping.UserLimits) (v any, ok bool)
}

var fields = []field{
	{
		name: "snooze",
		decode: func(d *decoder, raw json.RawMessage, u *capping.UserLimits) {
			u.SnoozeUntil, u.SnoozeChannels = d.snooze(raw)
		},
		encode: func(u capping.UserLimits) (any, bool) {
			return wireSnooze{Until: u.SnoozeUntil.UTC().Format(time.RFC3339Nano), Channels: u.SnoozeChannels}, !u.SnoozeUntil.IsZero()
		},
	},
	{
		name:   "tier",
		decode: func(d *decoder, raw json.RawMessage, u *capping.UserLimits) { u.Tier = d.tier(raw) },
		encode: func(u capping.UserLimits) (any, bool) { return u.Tier, u.Tier != "" },
	},
	{
		name:   "channels",
		decode: func(d *decoder, raw json.RawMessage, u *capping.UserLimits) { u.Channels = d.channels(raw) },
		encode: func(u capping.UserLimits) (any, bool) { return u.Channels, len(u.Channels) > 0 },
	},
	{
		name:   "quiet_hours",
		decode: func(d *decoder, raw json.RawMessage, u *capping.UserLimits) { u.Quiet = d.quiet(raw) },
		encode: func(u capping.UserLimits) (any, bool) {
			if q := u.Quiet; q != nil {
				return wireQuiet{From: FormatClock(q.From), To: FormatClock(q.To)}, true
			}
			return nil, false
		},
	},
}

type wireSnooze struct {
	Until    string   `json:"until"`
	Channels []string `json:"channels,omitempty"`
}

type wireQuiet struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// fieldNames are the record's fields, in order.
func fieldNames() []string {
	names := []string{"user_id"}
	for _, f := range fields {
		names = append(names, f.name)
	}
	return append(names, "updated_at")
}

// DecodeField reads the record field of one kind of limit (a kind's name,
// capping.UserKinds) into u: what `capper user set --limit` gives.
func DecodeField(name string, raw json.RawMessage, u *capping.UserLimits) error {
	i := slices.IndexFunc(fields, func(f field) bool { return f.name == name })
	if i < 0 {
		return fmt.Errorf("%q is not a kind of user limit (%v)", name, capping.UserKinds())
	}
	d := &decoder{}
	if !isNull(raw) {
		fields[i].decode(d, raw, u)
	}
	return d.ps.Err()
}
