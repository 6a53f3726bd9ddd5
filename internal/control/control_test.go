package control

import (
	"errors"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 25, 18, 0, 0, 0, time.UTC)

func TestRecordRoundTrip(t *testing.T) {
	for _, r := range []Record{
		{Campaign: "spring-sale", State: Stopped, Reason: "wrong price", By: "alice@host", At: t0, Since: t0},
		{Campaign: "flash", State: Active, At: t0.Add(time.Hour), Since: t0, SendBy: t0.Add(2 * time.Hour)},
		{All: true, State: Paused, Reason: "incident 4411", By: "oncall", At: t0, Since: t0},
	} {
		v, err := r.Marshal()
		if err != nil {
			t.Fatalf("%+v: %v", r, err)
		}
		got, err := Parse([]byte(r.Key()), v)
		if err != nil {
			t.Fatalf("parse %s: %v", v, err)
		}
		if got.Campaign != r.Campaign || got.All != r.All || got.State != r.State || got.Reason != r.Reason || got.By != r.By ||
			!got.At.Equal(r.At) || !got.Since.Equal(r.Since) || !got.SendBy.Equal(r.SendBy) {
			t.Fatalf("round trip: %+v, want %+v", got, r)
		}
	}
}

// TestBadRecords: every bad record is refused naming its field; one read
// from the topic is ErrMalformed.
func TestBadRecords(t *testing.T) {
	good := Record{Campaign: "c", State: Stopped, Reason: "why", At: t0, Since: t0}
	for _, tc := range []struct {
		name string
		edit func(*Record)
		want string
	}{
		{"no campaign", func(r *Record) { r.Campaign = "" }, "campaign: is required"},
		{"oversize campaign", func(r *Record) { r.Campaign = strings.Repeat("x", MaxCampaign+1) }, "campaign: 257 bytes, at most 256"},
		{"campaign and all", func(r *Record) { r.All = true }, "campaign: a record for every intent"},
		{"stop every intent", func(r *Record) { r.Campaign, r.All = "", true }, "state: every intent can be paused and resumed, not stopped"},
		{"stop without a reason", func(r *Record) { r.Reason = "  " }, "reason: is required to mark a campaign stopped"},
		{"pause without a reason", func(r *Record) { r.State, r.Reason = Paused, "" }, "reason: is required to mark a campaign paused"},
		{"oversize reason", func(r *Record) { r.Reason = strings.Repeat("x", MaxReason+1) }, "reason: 1025 bytes"},
		{"oversize by", func(r *Record) { r.By = strings.Repeat("x", MaxBy+1) }, "by: 257 bytes"},
		{"unknown state", func(r *Record) { r.State = 9 }, "state: 9 is not stopped, paused or active"},
		{"since after at", func(r *Record) { r.Since = t0.Add(time.Second) }, "since: is required, and not after at"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := good
			tc.edit(&r)
			err := r.Check()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Check() = %v, want %q", err, tc.want)
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("%v is not a FieldError", err)
			}
		})
	}
	for _, tc := range []struct {
		name, key, value, want string
	}{
		{"empty value", "campaign/c", "", "value: empty"},
		{"not json", "campaign/c", "{", "value:"},
		{"unknown field", "campaign/c", `{"campaign":"c","state":"stopped","reason":"x","at":"2026-11-25T18:00:00Z","since":"2026-11-25T18:00:00Z","color":"red"}`, `unknown field "color"`},
		{"unknown state", "campaign/c", `{"campaign":"c","state":"halted","at":"2026-11-25T18:00:00Z","since":"2026-11-25T18:00:00Z"}`, `state: "halted" is not one of stopped, paused, active`},
		{"bad time", "campaign/c", `{"campaign":"c","state":"active","at":"yesterday","since":"2026-11-25T18:00:00Z"}`, `at: "yesterday" is not an RFC 3339 time`},
		{"key of another campaign", "campaign/d", `{"campaign":"c","state":"active","at":"2026-11-25T18:00:00Z","since":"2026-11-25T18:00:00Z"}`, `key: "campaign/d", but the value is of "campaign/c"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.key), []byte(tc.value))
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse() = %v, want ErrMalformed with %q", err, tc.want)
			}
		})
	}
}

// TestSnapshot: what a snapshot says of campaigns (capping's
// control_test.go tests the verdicts taken from it).
func TestSnapshot(t *testing.T) {
	e := func(r Record) *Entry { return &Entry{Record: r, Pos: Position{Topic: "ctl", Offset: 7}} }
	s := newSnapshot(map[string]*Entry{
		"stopped": e(Record{Campaign: "stopped", State: Stopped, Since: t0}),
		"paused":  e(Record{Campaign: "paused", State: Paused, Since: t0}),
		"due":     e(Record{Campaign: "due", State: Active, Since: t0, SendBy: t0.Add(time.Hour)}),
	}, nil)
	if !s.Stopped("stopped") || s.Stopped("paused") || (*Snapshot)(nil).Stopped("x") {
		t.Fatalf("Stopped")
	}
	if s.Count(Stopped) != 1 || s.Count(Paused) != 1 || s.Count(Active) != 1 {
		t.Fatalf("counts %v", s.counts)
	}
}
