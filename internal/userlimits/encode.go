package userlimits

// Writing a record's value: the JSON Decode reads back to the same record.

import (
	"encoding/json"
	"time"
)

// wire is a record's value as Encode writes it.
type wire struct {
	UserID     uint64         `json:"user_id"`
	Snooze     *wireSnooze    `json:"snooze,omitempty"`
	Tier       string         `json:"tier,omitempty"`
	Channels   map[string]int `json:"channels,omitempty"`
	QuietHours *wireQuiet     `json:"quiet_hours,omitempty"`
	UpdatedAt  string         `json:"updated_at,omitempty"`
}

type wireSnooze struct {
	Until    string   `json:"until"`
	Channels []string `json:"channels,omitempty"`
}

type wireQuiet struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// Encode writes a record's value (nil for Erase: a tombstone). Decode
// reads it back to the same record.
func Encode(r Record) ([]byte, error) {
	if r.Erase {
		return nil, nil
	}
	w := wire{UserID: r.UserID, Tier: r.Limits.Tier, Channels: r.Limits.Channels}
	if len(w.Channels) == 0 {
		w.Channels = nil
	}
	if u := r.Limits; !u.SnoozeUntil.IsZero() {
		w.Snooze = &wireSnooze{Until: u.SnoozeUntil.UTC().Format(time.RFC3339Nano), Channels: u.SnoozeChannels}
	}
	if q := r.Limits.Quiet; q != nil {
		w.QuietHours = &wireQuiet{From: FormatClock(q.From), To: FormatClock(q.To)}
	}
	if !r.UpdatedAt.IsZero() {
		w.UpdatedAt = r.UpdatedAt.UTC().Format(time.RFC3339Nano)
	}
	return json.Marshal(w)
}
