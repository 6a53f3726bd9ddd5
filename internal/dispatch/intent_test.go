package dispatch

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestDecodeValid(t *testing.T) {
	d := testDecoder(t, 0)
	for _, tc := range []struct {
		name, key, value string
		want             Intent
	}{
		{"number id", "4242", `{"id":"c1","user_id":4242,"campaign_id":"spring","channel":"push","created_at":"2026-11-21T16:00:00Z","payload":{"x":1}}`,
			Intent{ID: "c1", UserID: 4242, CampaignID: "spring", Channel: "push", Category: "marketing"}},
		{"string id above 2^53", "18446744073709551615", `{"id":"c2","user_id":"18446744073709551615","campaign_id":"c","channel":"sms","category":"transactional"}`,
			Intent{ID: "c2", UserID: 18446744073709551615, CampaignID: "c", Channel: "sms", Category: "transactional"}},
		{"unknown fields kept out of the way", "0", `{"id":"x","user_id":0,"campaign_id":"c","channel":"email","extra":[1,2,3]}`,
			Intent{ID: "x", UserID: 0, CampaignID: "c", Channel: "email", Category: "marketing"}},
		// The id is the bytes as written: an escape is not decoded, so two
		// spellings are two idempotency keys, and nothing collides.
		{"escaped id kept as written", "1", `{"id":"x-\ud800","user_id":1,"campaign_id":"\u0063","channel":"p\u0075sh"}`,
			Intent{ID: `x-\ud800`, UserID: 1, CampaignID: "c", Channel: "push", Category: "marketing"}},
		{"empty category is the default", "1", `{"id":"x","user_id":1,"campaign_id":"c","channel":"push","category":""}`,
			Intent{ID: "x", UserID: 1, CampaignID: "c", Channel: "push", Category: "marketing"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := d.Decode([]byte(tc.key), []byte(tc.value))
			if err != nil {
				t.Fatal(err)
			}
			got.CreatedAt = got.CreatedAt.UTC()
			if got.ID != tc.want.ID || got.UserID != tc.want.UserID || got.CampaignID != tc.want.CampaignID ||
				got.Channel != tc.want.Channel || got.Category != tc.want.Category {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestDecodeInvalidNamesTheField(t *testing.T) {
	d := testDecoder(t, 200)
	long := strings.Repeat("a", 129)
	for _, tc := range []struct{ name, key, value, field, reason string }{
		{"not json", "1", `{"id":`, "value", "not valid JSON: unexpected end of JSON input (offset 6)"},
		{"array", "1", `[1,2,3]`, "value", "not a JSON object (an array)"},
		{"string", "1", `"x"`, "value", "not a JSON object (a string)"},
		{"empty", "1", ``, "value", "empty: a null or 0-byte value is not an intent"},
		{"invalid utf-8", "1", "{\"id\":\"x-\xff\",\"user_id\":1,\"campaign_id\":\"c\",\"channel\":\"push\"}", "value", "not valid UTF-8: byte 0xff at offset 9"},
		{"invalid utf-8 in payload", "1", "{\"id\":\"x\",\"user_id\":1,\"campaign_id\":\"c\",\"channel\":\"push\",\"payload\":\"\xc3\"}", "value", "not valid UTF-8"},
		{"duplicate id", "1", `{"id":"a","user_id":1,"campaign_id":"c","channel":"push","id":"b"}`, "id", "is given twice (a duplicate key)"},
		{"duplicate unknown key", "1", `{"id":"a","user_id":1,"campaign_id":"c","channel":"push","x":1,"x":2}`, "value", `key "x" is given twice`},
		{"duplicate escaped key", "1", `{"id":"a","user_id":1,"campaign_id":"c","channel":"push","\u0069d":"b"}`, "id", "is given twice"},
		{"unknown category", "1", `{"id":"a","user_id":1,"campaign_id":"c","channel":"push","category":"Transactional"}`, "category", `"Transactional" is not a configured category (marketing, transactional)`},
		{"oversize", "1", `{"id":"` + strings.Repeat("x", 300) + `"}`, "value", "above the limit of 200"},
		{"no id", "1", `{"user_id":1,"campaign_id":"c","channel":"push"}`, "id", "is required"},
		{"empty id", "1", `{"id":"","user_id":1,"campaign_id":"c","channel":"push"}`, "id", "is required (1 to 128 bytes)"},
		{"long id", "1", `{"id":"` + long + `","user_id":1,"campaign_id":"c","channel":"push"}`, "id", "got 129"},
		{"no user", "1", `{"id":"a","campaign_id":"c","channel":"push"}`, "user_id", "is required"},
		{"negative user", "-1", `{"id":"a","user_id":-1,"campaign_id":"c","channel":"push"}`, "user_id", "not an unsigned 64-bit integer"},
		{"fraction", "1", `{"id":"a","user_id":1.5,"campaign_id":"c","channel":"push"}`, "user_id", "not an unsigned"},
		{"exponent", "1000", `{"id":"a","user_id":1e3,"campaign_id":"c","channel":"push"}`, "user_id", "not an unsigned"},
		{"too big", "1", `{"id":"a","user_id":18446744073709551616,"campaign_id":"c","channel":"push"}`, "user_id", "not an unsigned"},
		{"leading zero", "7", `{"id":"a","user_id":"007","campaign_id":"c","channel":"push"}`, "user_id", "not an unsigned"},
		{"bool user", "1", `{"id":"a","user_id":true,"campaign_id":"c","channel":"push"}`, "user_id", "must be a JSON number or a string of digits, got a boolean"},
		{"array user", "1", `{"id":"a","user_id":[1],"campaign_id":"c","channel":"push"}`, "user_id", "got an array"},
		{"no campaign", "1", `{"id":"a","user_id":1,"channel":"push"}`, "campaign_id", "is required"},
		{"no channel", "1", `{"id":"a","user_id":1,"campaign_id":"c"}`, "channel", "is required"},
		{"unknown channel", "1", `{"id":"a","user_id":1,"campaign_id":"c","channel":"fax"}`, "channel", `"fax" is not a configured channel (email, push, sms, inapp)`},
		{"long category", "1", `{"id":"a","user_id":1,"campaign_id":"c","channel":"push","category":"` + strings.Repeat("c", 65) + `"}`, "category", "at most 64 bytes"},
		{"escaped digits", "1", `{"id":"a","user_id":"\u0031","campaign_id":"c","channel":"push"}`, "user_id", "not an unsigned"},
		{"trailing garbage", "1", `{"id":"a","user_id":1,"campaign_id":"c","channel":"push"} x`, "value", "not valid JSON: invalid character 'x' after top-level value"},
		{"bad time", "1", `{"id":"a","user_id":1,"campaign_id":"c","channel":"push","created_at":"yesterday"}`, "created_at", "RFC 3339"},
		{"wrong type", "1", `{"id":5,"user_id":1,"campaign_id":"c","channel":"push"}`, "id", "must be a JSON string, got a number"},
		{"object channel", "1", `{"id":"a","user_id":1,"campaign_id":"c","channel":{"x":1}}`, "channel", "must be a JSON string, got an object"},
		{"key mismatch", "2", `{"id":"a","user_id":1,"campaign_id":"c","channel":"push"}`, "key", `"2" is not the user_id 1`},
		{"no key", "", `{"id":"a","user_id":1,"campaign_id":"c","channel":"push"}`, "key", "not the user_id 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := d.Decode([]byte(tc.key), []byte(tc.value))
			var ie *InvalidError
			ok := errors.As(err, &ie)
			if !ok {
				t.Fatalf("error %v (%T), want *InvalidError", err, err)
			}
			if ie.Field != tc.field || !strings.Contains(ie.Reason, tc.reason) {
				t.Fatalf("got %q, want field %q with %q", err, tc.field, tc.reason)
			}
		})
	}
}

// FuzzDecode: the decoder never panics, an accepted intent satisfies every
// rule of the contract, and a rejection is always an *InvalidError whose text
// is valid UTF-8 (it becomes a Kafka header).
func FuzzDecode(f *testing.F) {
	f.Add([]byte("4242"), []byte(`{"id":"c1","user_id":4242,"campaign_id":"s","channel":"push"}`))
	f.Add([]byte("1"), []byte(`{"id":"c1","user_id":"1","campaign_id":"s","channel":"sms","category":"transactional","created_at":"2026-11-21T16:00:00Z"}`))
	f.Add([]byte("1"), []byte(`{"id":"\u00e9","user_id":1e400}`))
	f.Add([]byte(""), []byte(`null`))
	d := testDecoder(f, 1024)
	f.Fuzz(func(t *testing.T, key, value []byte) {
		in, err := d.Decode(key, value)
		if err != nil {
			var ie *InvalidError
			ok := errors.As(err, &ie)
			if !ok {
				t.Fatalf("error %T is not *InvalidError", err)
			}
			if !utf8.ValidString(ie.Error()) || ie.Field == "" {
				t.Fatalf("bad error %q", ie.Error())
			}
			return
		}
		if len(value) > 1024 || len(in.ID) == 0 || len(in.ID) > maxIDBytes || in.CampaignID == "" || in.Category == "" ||
			!utf8.Valid(value) || !bytes.Contains(value, []byte(`"`+in.ID+`"`)) {
			t.Fatalf("accepted an invalid intent %+v from %q", in, value)
		}
		if string(key) != strconv.FormatUint(in.UserID, 10) {
			t.Fatalf("accepted key %q for user %d", key, in.UserID)
		}
		ok := false
		for _, c := range testChannels {
			ok = ok || c == in.Channel
		}
		if !ok {
			t.Fatalf("accepted channel %q", in.Channel)
		}
	})
}
