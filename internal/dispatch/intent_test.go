package dispatch

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/capper-dev/capper/internal/capping"
)

func TestDecodeValid(t *testing.T) {
	d := testDecoder(t, 0)
	for _, tc := range []struct {
		name, key, value string
		want             Intent
	}{
		{"number id", "4242", `{"id":"c1","user_id":4242,"campaign_id":"spring","channel":"push","created_at":"2026-11-21T16:00:00Z","payload":{"x":1}}`,
			Intent{ID: "c1", UserID: 4242, CampaignID: "spring", Channel: "push", Category: "marketing", Priority: capping.Normal}},
		{"string id above 2^53", "18446744073709551615", `{"id":"c2","user_id":"18446744073709551615","campaign_id":"c","channel":"sms","category":"transactional"}`,
			Intent{ID: "c2", UserID: 18446744073709551615, CampaignID: "c", Channel: "sms", Category: "transactional", Priority: capping.Normal}},
		{"unknown fields kept out of the way", "0", `{"id":"x","user_id":0,"campaign_id":"c","channel":"email","extra":[1,2,3]}`,
			Intent{ID: "x", UserID: 0, CampaignID: "c", Channel: "email", Category: "marketing", Priority: capping.Normal}},
		// The id is the bytes as written: an escape is not decoded, so two
		// spellings are two idempotency keys, and nothing collides.
		{"escaped id kept as written", "1", `{"id":"x-\ud800","user_id":1,"campaign_id":"\u0063","channel":"p\u0075sh"}`,
			Intent{ID: `x-\ud800`, UserID: 1, CampaignID: "c", Channel: "push", Category: "marketing", Priority: capping.Normal}},
		{"empty category is the default", "1", `{"id":"x","user_id":1,"campaign_id":"c","channel":"push","category":""}`,
			Intent{ID: "x", UserID: 1, CampaignID: "c", Channel: "push", Category: "marketing", Priority: capping.Normal}},
		{"every v2 field", "1", `{"id":"x","user_id":1,"campaign_id":"c","channel":"push","tags":["promo","spring-2026"],"priority":"high","time_zone":"Asia/Singapore","capping":"bypass"}`,
			Intent{ID: "x", UserID: 1, CampaignID: "c", Channel: "push", Category: "marketing",
				Tags: []string{"promo", "spring-2026"}, Priority: capping.High, TimeZone: mustZone(t, "Asia/Singapore"), Override: capping.Bypass}},
		{"low, UTC, bypass-uncounted", "1", `{"id":"x","user_id":1,"campaign_id":"c","channel":"push","priority":"low","time_zone":"UTC","capping":"bypass-uncounted"}`,
			Intent{ID: "x", UserID: 1, CampaignID: "c", Channel: "push", Category: "marketing", Priority: capping.Low, TimeZone: time.UTC, Override: capping.BypassUncounted}},
		{"a priority on the scale, as a number", "1", `{"id":"x","user_id":1,"campaign_id":"c","channel":"push","priority":60}`,
			Intent{ID: "x", UserID: 1, CampaignID: "c", Channel: "push", Category: "marketing", Priority: 60}},
		{"a priority on the scale, as a string", "1", `{"id":"x","user_id":1,"campaign_id":"c","channel":"push","priority":"90"}`,
			Intent{ID: "x", UserID: 1, CampaignID: "c", Channel: "push", Category: "marketing", Priority: 90}},
		{"normal is the default", "1", `{"id":"x","user_id":1,"campaign_id":"c","channel":"push","priority":"normal"}`,
			Intent{ID: "x", UserID: 1, CampaignID: "c", Channel: "push", Category: "marketing", Priority: capping.Normal}},
		// Unlike the id, tags are compared with the policy's: their escapes
		// are decoded.
		{"escaped tags decoded", "1", `{"id":"x","user_id":1,"campaign_id":"c","channel":"push","tags":["caf\u00e9","a\/b","\"q\""],"time_zone":"Asia\/Tokyo"}`,
			Intent{ID: "x", UserID: 1, CampaignID: "c", Channel: "push", Category: "marketing", Priority: capping.Normal,
				Tags: []string{"café", "a/b", `"q"`}, TimeZone: mustZone(t, "Asia/Tokyo")}},
		{"tags spaced out", "1", "{\"id\":\"x\",\"user_id\":1,\"campaign_id\":\"c\",\"channel\":\"push\",\"tags\" : [ \"a\" ,\n\t\"b\" ] }",
			Intent{ID: "x", UserID: 1, CampaignID: "c", Channel: "push", Category: "marketing", Priority: capping.Normal, Tags: []string{"a", "b"}}},
		{"null tags", "1", `{"id":"x","user_id":1,"campaign_id":"c","channel":"push","tags":null}`,
			Intent{ID: "x", UserID: 1, CampaignID: "c", Channel: "push", Category: "marketing", Priority: capping.Normal}},
		{"no tags", "1", `{"id":"x","user_id":1,"campaign_id":"c","channel":"push","tags":[]}`,
			Intent{ID: "x", UserID: 1, CampaignID: "c", Channel: "push", Category: "marketing", Priority: capping.Normal}},
		{"16 tags of 64 bytes", "1", `{"id":"x","user_id":1,"campaign_id":"c","channel":"push","tags":` + jsonTags(16, strings.Repeat("t", 62)) + `}`,
			Intent{ID: "x", UserID: 1, CampaignID: "c", Channel: "push", Category: "marketing", Priority: capping.Normal, Tags: tagsOf(16, strings.Repeat("t", 62))}},
		{"multi-byte tag", "1", `{"id":"x","user_id":1,"campaign_id":"c","channel":"push","tags":["` + strings.Repeat("é", 32) + `"]}`,
			Intent{ID: "x", UserID: 1, CampaignID: "c", Channel: "push", Category: "marketing", Priority: capping.Normal, Tags: []string{strings.Repeat("é", 32)}}},
		// Only top-level keys are fields: nested arrays (their ']' at
		// other depths) and a payload's own tags are forwarded as they are.
		{"nested arrays around the tags", "1", `{"id":"x","user_id":1,"campaign_id":"c","x":[[1,[2]],{"a":[3]}],"tags":["a"],"channel":"push","payload":{"tags":[1,2],"priority":"urgent"},"y":[]}`,
			Intent{ID: "x", UserID: 1, CampaignID: "c", Channel: "push", Category: "marketing", Priority: capping.Normal, Tags: []string{"a"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := d.Decode([]byte(tc.key), []byte(tc.value))
			if err != nil {
				t.Fatal(err)
			}
			got.CreatedAt = got.CreatedAt.UTC()
			if got.ID != tc.want.ID || got.UserID != tc.want.UserID || got.CampaignID != tc.want.CampaignID ||
				got.Channel != tc.want.Channel || got.Category != tc.want.Category || !slices.Equal(got.Tags, tc.want.Tags) ||
				got.Priority != tc.want.Priority || zoneName(got.TimeZone) != zoneName(tc.want.TimeZone) || got.Override != tc.want.Override {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// zoneName is the name of a zone, "" for none.
func zoneName(loc *time.Location) string {
	if loc == nil {
		return ""
	}
	return loc.String()
}

func tagsOf(n int, prefix string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%02d", prefix, i)
	}
	return out
}

func jsonTags(n int, prefix string) string {
	return `["` + strings.Join(tagsOf(n, prefix), `","`) + `"]`
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

// TestDecodeInvalidV2Fields: tags, priority, time_zone and capping are
// checked like the other fields; the whole error (the capper-error header)
// names the field, and the element of tags at fault.
func TestDecodeInvalidV2Fields(t *testing.T) {
	d := testDecoder(t, 0)
	const head = `{"id":"a","user_id":1,"campaign_id":"c","channel":"push",`
	long := strings.Repeat("z", 500)
	for _, tc := range []struct{ name, fields, field, want string }{
		{"tags a string", `"tags":"promo"`, "tags", "tags: must be a JSON array of strings, got a string"},
		{"tags an object", `"tags":{"a":1}`, "tags", "tags: must be a JSON array of strings, got an object"},
		{"tags a number", `"tags":1`, "tags", "tags: must be a JSON array of strings, got a number"},
		{"tags false", `"tags":false`, "tags", "tags: must be a JSON array of strings, got a boolean"},
		{"tag a number", `"tags":["a","b",3]`, "tags", "tags[2]: must be a JSON string, got a number"},
		{"tag null", `"tags":[null]`, "tags", "tags[0]: must be a JSON string, got null"},
		{"tag an array", `"tags":["a",["b"]]`, "tags", "tags[1]: must be a JSON string, got an array"},
		{"tag an object", `"tags":["a",{"b":"c"}]`, "tags", "tags[1]: must be a JSON string, got an object"},
		{"17 tags", `"tags":` + jsonTags(17, "t"), "tags", "tags: 17 tags, at most 16"},
		{"17 tags, the last a number", `"tags":["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p",17]`, "tags", "tags: 17 tags, at most 16"},
		{"tag with a space", `"tags":["promo","two words"]`, "tags", `tags[1]: "two words" must be 1 to 64 bytes of printable characters without spaces`},
		{"empty tag", `"tags":[""]`, "tags", `tags[0]: "" must be 1 to 64 bytes`},
		{"65-byte tag", `"tags":["` + strings.Repeat("t", 65) + `"]`, "tags", `tags[0]: "tttttttttttttttttttttttttttttttttttttttt..." must be 1 to 64 bytes`},
		{"escaped space", `"tags":["a\u0020b"]`, "tags", `tags[0]: "a b" must be 1 to 64 bytes`},
		{"escaped tab", `"tags":["a\tb"]`, "tags", `tags[0]: "a\tb" must be`},
		{"escaped NUL", `"tags":["a\u0000"]`, "tags", `tags[0]: "a\x00" must be`},
		{"escaped DEL", `"tags":["\u007f"]`, "tags", `tags[0]: "\x7f" must be`},
		{"tags twice", `"tags":["a"],"tags":["b"]`, "tags", "tags: is given twice (a duplicate key)"},
		{"tags twice, escaped", `"tags":[],"t\u0061gs":null`, "tags", "tags: is given twice"},

		{"unknown priority", `"priority":"urgent"`, "priority", `priority: "urgent" is not low, normal, high or a whole number from 0 to 100`},
		{"priority is case-sensitive", `"priority":"HIGH"`, "priority", `priority: "HIGH" is not low, normal, high or a whole number from 0 to 100`},
		{"empty priority", `"priority":""`, "priority", `priority: "" is not low, normal, high or a whole number from 0 to 100`},
		{"priority above the scale", `"priority":101`, "priority", `priority: "101" is not low, normal, high or a whole number from 0 to 100`},
		{"fractional priority", `"priority":2.5`, "priority", `priority: "2.5" is not low, normal, high or a whole number from 0 to 100`},
		{"null priority", `"priority":null`, "priority", "priority: must be a JSON string, got null"},
		{"long priority clipped", `"priority":"` + long + `"`, "priority", `priority: "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz..." is not low, normal, high or a whole number from 0 to 100`},
		{"priority twice", `"priority":"low","priority":"high"`, "priority", "priority: is given twice (a duplicate key)"},

		{"unknown zone", `"time_zone":"Mars/Olympus"`, "time_zone", `time_zone: "Mars/Olympus" is not an IANA time zone`},
		{"empty zone", `"time_zone":""`, "time_zone", `time_zone: "" is not an IANA time zone`},
		{"Local", `"time_zone":"Local"`, "time_zone", `time_zone: "Local" is not an IANA time zone`},
		{"host file", `"time_zone":"localtime"`, "time_zone", `time_zone: "localtime" is not an IANA time zone`},
		{"host directory", `"time_zone":"posix/Asia/Singapore"`, "time_zone", `time_zone: "posix/Asia/Singapore" is not an IANA time zone`},
		{"zone is case-sensitive", `"time_zone":"asia/singapore"`, "time_zone", `time_zone: "asia/singapore" is not an IANA time zone`},
		{"path", `"time_zone":"../../etc/passwd"`, "time_zone", `time_zone: "../../etc/passwd" is not an IANA time zone`},
		{"trailing space", `"time_zone":"UTC "`, "time_zone", `time_zone: "UTC " is not an IANA time zone`},
		{"offset", `"time_zone":"+08:00"`, "time_zone", `time_zone: "+08:00" is not an IANA time zone`},
		{"long zone clipped", `"time_zone":"` + long + `"`, "time_zone", `time_zone: "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz..." is not an IANA time zone`},
		{"numeric zone", `"time_zone":8`, "time_zone", "time_zone: must be a JSON string, got a number"},
		{"zone twice", `"time_zone":"UTC","time_zone":"UTC"`, "time_zone", "time_zone: is given twice (a duplicate key)"},

		{"unknown override", `"capping":"skip"`, "capping", `capping: "skip" is not one of bypass, bypass-uncounted`},
		{"empty override", `"capping":""`, "capping", `capping: "" is not one of bypass, bypass-uncounted`},
		{"override is case-sensitive", `"capping":"Bypass"`, "capping", `capping: "Bypass" is not one of bypass, bypass-uncounted`},
		{"boolean override", `"capping":true`, "capping", "capping: must be a JSON string, got a boolean"},
		{"object override", `"capping":{"mode":"bypass"}`, "capping", "capping: must be a JSON string, got an object"},
		{"override twice", `"capping":"bypass","capping":"bypass"`, "capping", "capping: is given twice (a duplicate key)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := d.Decode([]byte("1"), []byte(head+tc.fields+"}"))
			var ie *InvalidError
			if !errors.As(err, &ie) {
				t.Fatalf("error %v (%T), want *InvalidError", err, err)
			}
			if ie.Field != tc.field || !strings.HasPrefix(ie.Error(), tc.want) {
				t.Fatalf("got field %q: %q\nwant field %q: %q", ie.Field, ie.Error(), tc.field, tc.want)
			}
			if !slices.Contains(invalidFields, ie.Field) {
				t.Fatalf("field %q is not one of invalidFields (the metric's labels)", ie.Field)
			}
		})
	}
}

// TestZoneCache: a zone is loaded once and shared; only zones that exist
// are kept, under a name of their own (not a view of a record that will be
// reused); concurrent decoders agree.
func TestZoneCache(t *testing.T) {
	d := testDecoder(t, 0)
	value := func(zone string) []byte {
		return []byte(`{"id":"a","user_id":1,"campaign_id":"c","channel":"push","time_zone":"` + zone + `"}`)
	}
	buf := value("Asia/Singapore")
	first, err := d.Decode([]byte("1"), buf)
	if err != nil {
		t.Fatal(err)
	}
	copy(buf, value("Europe/Berlin")) // the record's bytes reused
	if _, err := d.Decode([]byte("1"), value("Mars/Olympus")); err == nil {
		t.Fatal("Mars/Olympus accepted")
	}
	for i := range 1000 {
		_, _ = d.Decode([]byte("1"), value(fmt.Sprintf("Junk/Zone%d", i)))
	}
	again, err := d.Decode([]byte("1"), value("Asia/Singapore"))
	if err != nil {
		t.Fatal(err)
	}
	if first.TimeZone != again.TimeZone {
		t.Fatal("Asia/Singapore was loaded twice")
	}
	if m := d.zones.byName.Load(); m == nil || len(*m) != 1 || (*m)["Asia/Singapore"] != first.TimeZone {
		t.Fatalf("cache %v, want Asia/Singapore only", m)
	}

	zones := []string{"UTC", "Europe/Berlin", "America/New_York", "Asia/Tokyo", "Australia/Lord_Howe", "Etc/GMT+5"}
	var wg sync.WaitGroup
	got := make([][]*time.Location, 8)
	for g := range got {
		wg.Go(func() {
			for _, z := range zones {
				in, err := d.Decode([]byte("1"), value(z))
				if err != nil {
					t.Error(err)
					return
				}
				got[g] = append(got[g], in.TimeZone)
			}
		})
	}
	wg.Wait()
	for g := range got {
		for i, z := range zones {
			if i >= len(got[g]) || got[g][i] != got[0][i] || got[g][i].String() != z {
				t.Fatalf("decoder %d, zone %s: %v, want the one shared location", g, z, got[g])
			}
		}
	}
	if m := d.zones.byName.Load(); len(*m) != 1+len(zones) {
		t.Fatalf("%d zones cached, want %d", len(*m), 1+len(zones))
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
	f.Add([]byte("1"), []byte(`{"id":"a","user_id":1,"campaign_id":"c","channel":"push","tags":["a","b\u0020"],"priority":"high","time_zone":"Asia/Singapore","capping":"bypass"}`))
	f.Add([]byte("1"), []byte(`{"id":"a","user_id":1,"campaign_id":"c","channel":"push","x":[[]],"tags":[[],{}],"time_zone":"Local"}`))
	f.Add([]byte("1"), []byte(`{"id":"a","user_id":1,"campaign_id":"c","channel":"push","route":"sms-us.short_code"}`))
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
		if len(in.Tags) > capping.MaxTags || in.Priority > capping.High || in.Override > capping.BypassUncounted ||
			(in.TimeZone != nil && (in.TimeZone == time.Local || in.TimeZone.String() == "Local")) {
			t.Fatalf("accepted %+v from %q", in, value)
		}
		if in.Route != "" && (len(in.Route) > maxRouteBytes || !validRoute(in.Route)) {
			t.Fatalf("accepted route %q from %q", in.Route, value)
		}
		for _, tag := range in.Tags {
			if !capping.ValidTag(tag) {
				t.Fatalf("accepted tag %q", tag)
			}
		}
	})
}
