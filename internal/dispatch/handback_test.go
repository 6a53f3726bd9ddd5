package dispatch

import (
	"strings"
	"testing"
	"time"
)

// TestDecodeHandBack: a throttled status with its delivery hands it back:
// its value, its own headers (not capper's, sorted), the decision time,
// the input and the budget; what is wrong is refused naming the field.
func TestDecodeHandBack(t *testing.T) {
	d := testDecoder(t, 0)
	const value = `{"id":"a1","user_id":7,"channel":"push"}`
	status := func(extra, headers string) string {
		return `{"id":"a1","user_id":7,"status":"throttled","at":"2026-11-21T16:00:05Z"` + extra +
			`,"delivery":{"value":` + value + `,"headers":{` + headers + `}}}`
	}
	good := `"capper-decided-at":"2026-11-21T16:00:04.120Z","capper-lane":"push-fcm/bulk","capper-source":"in/3/41","zz":"2","aa":"1"`
	s, err := d.DecodeStatus([]byte(status(`,"lane":"push-fcm/bulk"`, good)))
	if err != nil {
		t.Fatal(err)
	}
	b := s.Back
	if b == nil || string(b.Value) != value || string(b.Origin) != "in/3/41" || s.Budget != "push-fcm" ||
		!b.DecidedAt.Equal(time.Date(2026, 11, 21, 16, 0, 4, 120e6, time.UTC)) {
		t.Fatalf("hand-back %+v (budget %q)", b, s.Budget)
	}
	if len(b.Headers) != 2 || b.Headers[0].Key != "aa" || b.Headers[1].Key != "zz" || string(b.Headers[1].Value) != "2" {
		t.Fatalf("its own headers: %+v", b.Headers)
	}
	// Without lane, the delivery's names the budget.
	if s, err := d.DecodeStatus([]byte(status("", good))); err != nil || s.Budget != "push-fcm" {
		t.Fatalf("no lane: budget %q, %v", s.Budget, err)
	}
	for _, c := range []struct{ name, text, want string }{
		{"no decision time", status("", `"capper-lane":"push-fcm/bulk"`), "delivery.headers.capper-decided-at: is required"},
		{"bad decision time", status("", `"capper-decided-at":"soon","capper-lane":"push-fcm/bulk"`), `delivery.headers.capper-decided-at: "soon" is not an RFC 3339 time`},
		{"not paced", status("", `"capper-decided-at":"2026-11-21T16:00:04.120Z"`), "delivery.headers.capper-lane: \"\" is not a capper-lane header"},
		{"other lane", status(`,"lane":"email/bulk"`, good), `lane: "email" is not the delivery's capper-lane "push-fcm/bulk"`},
		{"a duplicate", status("", good+`,"capper-duplicate":"true"`), "delivery.headers.capper-duplicate: a duplicate delivery is not handed back"},
		{"headers not strings", status("", `"capper-decided-at":1`), "delivery.headers: must be a JSON object"},
		{"value not an object", `{"id":"a1","user_id":7,"status":"throttled","at":"2026-11-21T16:00:05Z","delivery":{"value":"x","headers":{}}}`, "delivery.value: must be the delivery's value (a JSON object), got a string"},
		{"not throttled", `{"id":"a1","user_id":7,"status":"failed","at":"2026-11-21T16:00:05Z","delivery":{}}`, `delivery: only a throttled status hands a delivery back (status "failed")`},
		{"not an object", `{"id":"a1","user_id":7,"status":"throttled","at":"2026-11-21T16:00:05Z","delivery":[1]}`, "delivery: must be an object"},
	} {
		if _, err := d.DecodeStatus([]byte(c.text)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}
