package userlimits

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/capping"
)

// Every record in testdata is keyed 42, as a producer would key it.
const testKey = "42"

// goodRecords are what each *.good.json decodes to.
var goodRecords = map[string]Record{
	"full.good.json": {UserID: 42, Limits: capping.UserLimits{
		SnoozeUntil: time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC), SnoozeChannels: []string{"push"},
		Tier: "fewer", Channels: map[string]int{"sms": 0, "push": 2}, Quiet: &capping.UserQuiet{From: 22 * 60, To: 7 * 60}},
		UpdatedAt: time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)},
	"clear.good.json": {UserID: 42},
	"nulls.good.json": {UserID: 42},
	"snooze-every-channel.good.json": {UserID: 42, Limits: capping.UserLimits{
		SnoozeUntil: time.Date(2026, 12, 4, 8, 30, 0, 0, time.UTC)}},
	"channel-off.good.json": {UserID: 42, Limits: capping.UserLimits{Channels: map[string]int{"sms": 0}},
		UpdatedAt: time.Date(2026, 11, 27, 8, 0, 0, 250e6, time.UTC)},
	"quiet-same-day.good.json": {UserID: 42, Limits: capping.UserLimits{Quiet: &capping.UserQuiet{From: 0, To: 23*60 + 59}}},
}

// badRecords are the reason each *.bad.json is refused for, and what its
// error must say (every line of it: the problems are reported at once).
var badRecords = map[string]struct {
	reason Reason
	want   []string
}{
	"key-mismatch.bad.json":     {ReasonField, []string{"user_id: 41 does not match the key 42"}},
	"quiet-hour.bad.json":       {ReasonField, []string{`quiet_hours.from: "25:00" is not HH:MM`}},
	"quiet-missing.bad.json":    {ReasonField, []string{"quiet_hours.to: is required"}},
	"snooze-until.bad.json":     {ReasonField, []string{`snooze.until: "tomorrow" is not an RFC 3339 time`}},
	"snooze-no-until.bad.json":  {ReasonField, []string{"snooze.until: is required", `snooze.channels[1]: "push" is listed twice`}},
	"unknown-field.bad.json":    {ReasonField, []string{"colour: unknown field"}},
	"unknown-nested.bad.json":   {ReasonField, []string{"snooze.reason: unknown field"}},
	"no-user.bad.json":          {ReasonField, []string{"user_id: is required"}},
	"user-string.bad.json":      {ReasonField, []string{`user_id: "42" is not a user id`}},
	"channel-fraction.bad.json": {ReasonField, []string{"channels.email: \"2\" is not a whole number", "channels.push: -1 is below 0", "channels.sms: 1.5 is not a whole number"}},
	"empty-tier.bad.json":       {ReasonField, []string{`tier: "" is not a tier name`}},
	"not-an-object.bad.json":    {ReasonJSON, []string{"the value is not a JSON object"}},
	"truncated.bad.json":        {ReasonJSON, []string{"the value is not a JSON object: unexpected end of JSON input"}},
	"many.bad.json": {ReasonField, []string{"tier: 3 is not a tier name", `snooze: "soon" is not an object`,
		`quiet_hours.from: "7:00" is not HH:MM`, `quiet_hours.to: "07:60" is not HH:MM`, "updated_at: 1764230400 is not an RFC 3339 time"}},
}

func TestRecordFiles(t *testing.T) {
	files, err := filepath.Glob("testdata/*.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(goodRecords)+len(badRecords) {
		t.Errorf("%d files in testdata, %d expectations: every file needs one", len(files), len(goodRecords)+len(badRecords))
	}
	for _, f := range files {
		name := filepath.Base(f)
		value, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(name, func(t *testing.T) {
			r, err := Decode([]byte(testKey), value)
			if strings.HasSuffix(name, ".good.json") {
				want, ok := goodRecords[name]
				if !ok {
					t.Fatalf("no expected record for %s", name)
				}
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if !reflect.DeepEqual(r, want) {
					t.Fatalf("decoded %+v\nwant    %+v", r, want)
				}
				roundTrip(t, r)
				return
			}
			want, ok := badRecords[name]
			if !ok {
				t.Fatalf("no expected error for %s", name)
			}
			if err == nil {
				t.Fatalf("decoded %+v, want it refused", r)
			}
			if got := ReasonOf(err); got != want.reason {
				t.Errorf("reason %q, want %q (%v)", got, want.reason, err)
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(want.want) {
				t.Errorf("%d problems, want %d:\n%v", len(lines), len(want.want), err)
			}
			for _, w := range want.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// roundTrip: what Encode writes decodes to the same record.
func roundTrip(t *testing.T, r Record) {
	t.Helper()
	v, err := Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Decode(Key(r.UserID), v)
	if err != nil {
		t.Fatalf("Encode wrote %s, which Decode refuses: %v", v, err)
	}
	if !reflect.DeepEqual(again, r) {
		t.Fatalf("Encode wrote %s, which decodes to %+v, not %+v", v, again, r)
	}
}

func TestEncode(t *testing.T) {
	r := goodRecords["full.good.json"]
	v, err := Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"user_id":42,"snooze":{"until":"2026-12-04T00:00:00Z","channels":["push"]},"tier":"fewer",` +
		`"channels":{"push":2,"sms":0},"quiet_hours":{"from":"22:00","to":"07:00"},"updated_at":"2026-11-27T08:00:00Z"}`
	if string(v) != want {
		t.Errorf("Encode wrote\n%s\nwant\n%s", v, want)
	}
	if v, err := Encode(Record{UserID: 42, Erase: true}); v != nil || err != nil {
		t.Errorf("a tombstone encodes to %q, %v; want a null value", v, err)
	}
}

// TestEveryKindHasAField: the record has a field for every kind of
// capping's table, and no other.
func TestEveryKindHasAField(t *testing.T) {
	var names []string
	for _, f := range fields {
		names = append(names, f.name)
	}
	if want := capping.UserKinds(); !slices.Equal(names, want) {
		t.Fatalf("the record's fields are %v, capping's kinds %v: add the kind's row to fields.go", names, want)
	}
}

func TestKeys(t *testing.T) {
	for _, k := range []string{"0", "42", "18446744073709551615"} {
		uid, err := ParseKey([]byte(k))
		if err != nil || string(Key(uid)) != k {
			t.Errorf("key %q: %d, %v", k, uid, err)
		}
	}
	for _, k := range []string{"", "042", "+42", "-1", " 42", "42 ", "4.2", "18446744073709551616", "user-42"} {
		_, err := ParseKey([]byte(k))
		if ReasonOf(err) != ReasonKey {
			t.Errorf("key %q: %v, want it refused (reason key)", k, err)
			continue
		}
		if pub := err.(*Error).Public(); strings.Contains(pub, k) && k != "" {
			t.Errorf("key %q: the public error %q quotes the key", k, pub)
		}
	}
	// A tombstone: the user is erased.
	r, err := Decode([]byte("42"), nil)
	if err != nil || !r.Erase || r.UserID != 42 {
		t.Errorf("tombstone: %+v, %v", r, err)
	}
	// An empty value is one too: kafka-go reads a null value as empty.
	if r, err := Decode([]byte("42"), []byte{}); err != nil || !r.Erase {
		t.Errorf("empty value: %+v, %v; want an erasure", r, err)
	}
	// The mismatch names both ids; its public form neither.
	_, err = Decode([]byte("42"), []byte(`{"user_id":41}`))
	if pub := err.(*Error).Public(); strings.Contains(pub, "41") || strings.Contains(pub, "42") {
		t.Errorf("public error %q names a user", pub)
	}
}

func TestClock(t *testing.T) {
	for s, want := range map[string]int{"00:00": 0, "07:05": 425, "23:59": 1439} {
		if m, err := ParseClock(s); m != want || err != nil || FormatClock(m) != s {
			t.Errorf("%s: %d, %v", s, m, err)
		}
	}
	for _, s := range []string{"24:00", "7:00", "07:0", "07-00", "+7:00", "07:+1", "ab:cd", "07:00:00"} {
		if _, err := ParseClock(s); err == nil {
			t.Errorf("%q parsed", s)
		}
	}
}
