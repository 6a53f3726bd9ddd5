package dispatch

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/capper-dev/capper/internal/pacing"
)

// TestDecodeRoute: the optional route field (the provider or sender pool
// budgets pace by) is "" when absent or null, its escapes decoded, and
// anything but 1 to 64 bytes of a-z, 0-9, '.', '_' and '-' starting with a
// letter or digit is dead-lettered with the field named.
func TestDecodeRoute(t *testing.T) {
	d := testDecoder(t, 0)
	const head = `{"id":"a","user_id":1,"campaign_id":"c","channel":"push"`
	max := "a" + strings.Repeat("z", 63)
	for _, tc := range []struct{ name, fields, want string }{
		{"absent", ``, ""},
		{"null", `,"route":null`, ""},
		{"provider", `,"route":"fcm"`, "fcm"},
		{"sender pool", `,"route":"sms-us-shortcode"`, "sms-us-shortcode"},
		{"every character", `,"route":"0a.b_c-9"`, "0a.b_c-9"},
		{"one character", `,"route":"7"`, "7"},
		{"64 bytes", `,"route":"` + max + `"`, max},
		{"escaped", `,"route":"\u0066cm"`, "fcm"},
		{"before the other fields", `,"route":"apns","priority":"high"`, "apns"},
		{"a payload's route is not the intent's", `,"payload":{"route":"x"}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, err := d.Decode([]byte("1"), []byte(head+tc.fields+"}"))
			if err != nil {
				t.Fatal(err)
			}
			if in.Route != tc.want || in.ID != "a" || in.Channel != "push" {
				t.Fatalf("route %q (%+v), want %q", in.Route, in, tc.want)
			}
		})
	}

	long := strings.Repeat("r", 65)
	for _, tc := range []struct{ name, fields, want string }{
		{"empty", `"route":""`, `route: "" must be 1 to 64 bytes of a-z, 0-9, '.', '_' and '-', starting with a letter or digit`},
		{"upper case", `"route":"FCM"`, `route: "FCM" must be 1 to 64 bytes of a-z, 0-9`},
		{"space", `"route":"sms us"`, `route: "sms us" must be 1 to 64 bytes`},
		{"leading dash", `"route":"-fcm"`, `route: "-fcm" must be`},
		{"leading dot", `"route":".fcm"`, `route: ".fcm" must be`},
		{"leading underscore", `"route":"_fcm"`, `route: "_fcm" must be`},
		{"slash", `"route":"sms/us"`, `route: "sms/us" must be`},
		{"non-ASCII", `"route":"fcm-é"`, `route: "fcm-é" must be`},
		{"escaped NUL", `"route":"fcm\u0000"`, `route: "fcm\x00" must be`},
		{"65 bytes", `"route":"` + long + `"`, "route: must be 1 to 64 bytes, got 65"},
		{"a number", `"route":7`, "route: must be a JSON string, got a number"},
		{"a boolean", `"route":true`, "route: must be a JSON string, got a boolean"},
		{"an array", `"route":["fcm"]`, "route: must be a JSON string, got an array"},
		{"an object", `"route":{"name":"fcm"}`, "route: must be a JSON string, got an object"},
		{"twice", `"route":"fcm","route":"apns"`, "route: is given twice (a duplicate key)"},
		{"twice, escaped", `"route":"fcm","r\u006fute":"fcm"`, "route: is given twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := d.Decode([]byte("1"), []byte(head+","+tc.fields+"}"))
			var ie *InvalidError
			if !errors.As(err, &ie) {
				t.Fatalf("error %v (%T), want *InvalidError", err, err)
			}
			if ie.Field != "route" || !strings.HasPrefix(ie.Error(), tc.want) {
				t.Fatalf("got field %q: %q\nwant field route: %q", ie.Field, ie.Error(), tc.want)
			}
			if !slices.Contains(invalidFields, ie.Field) {
				t.Fatalf("field %q is not one of invalidFields (the metric's labels)", ie.Field)
			}
		})
	}
}

// TestValidRoute: the decoder's hand-written check (length and
// characters) is the pattern a policy's budgets name routes by
// (pacing.RoutePattern).
func TestValidRoute(t *testing.T) {
	re := pacing.RoutePattern
	var cases []string
	for c := range 256 {
		cases = append(cases, string(rune(c)), "a"+string(rune(c)), string([]byte{byte(c)}), "x"+string([]byte{byte(c)})+"y")
	}
	cases = append(cases, "", "fcm", "sms-us-shortcode", "a.b", "0", strings.Repeat("a", 64), strings.Repeat("a", 65), "A", "a b", "é")
	for _, s := range cases {
		if got, want := len(s) <= maxRouteBytes && validRoute(s), re.MatchString(s); got != want {
			t.Errorf("validRoute(%q) = %v, want %v", s, got, want)
		}
	}
}
