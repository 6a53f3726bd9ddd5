package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// TestRun runs the demo binary's code small, end to end (embedded Kafka and
// Redis): the blast's table, the sections (campaign plans, deferral and
// quiet hours, refunds, campaign control, send pacing, users' own limits)
// and every audit check; and its usage errors.
func TestRun(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"--users", "400", "--intents", "800", "--seed", "2"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out.String(), errOut.String())
	}
	for _, want := range []string{"capper demo: 800 send-intents", "\n        total ",
		"\ncampaign plans: shoppers 400-439 ", "planned sends delivered: 12 of 12; first come, first served: 0 of 12",
		"\ndeferral and quiet hours: ",
		"\nrefunds: shoppers 440-459; 2 welcome emails fail", "refunds applied: 2 (capper_refunds_total{result=\"applied\"}); 2 of the 2 tips delivered went to refunded users",
		"\ncampaign control: flash-sale ", "\nsend pacing: members 520-3519 ", "receipts: never held",
		"\nusers' own limits: readers 3520-3539 ", "snoozed for 7 days: 0 delivered while snoozed; 10 of the intents it cancelled had waited in the delay tiers",
		"tier fewer: at most 1 delivered to a user (15 capped by user-tier/fewer/daily), against 4 to a reader without limits of their own",
		"\naudit (the records read back from Kafka", "  caps           ok: ", "  refusals       ok: ", "  quiet hours    ok: ",
		"  plan holds     ok: 16 intents held for a plan", "  one outcome    ok: ", "  campaign stop  ok: ", "  budget rate    ok: ", "  paced release  ok: ",
		"  snooze         ok: no delivery to the 10 snoozed users ", "  user tier      ok: no user above their tier: 5 users on a tier",
		"\naudit: ok, "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	// The sections' rows: 20 users a section (the least); the reminders'
	// 2nd and 3rd wait, the 2nd comes back delivered, the 3rd expires;
	// nothing of flash-sale delivered after its stop. Send pacing: 3000
	// members at every size; the digest all held, breaking news and the
	// receipts all delivered, the receipts never held. Users' own limits: 5
	// readers a group; the tier fewer gets one message each, readers
	// without limits all four.
	for _, re := range []string{`\n\s+09:00\s+reminders\s+60\s+20\s+40\s+push-gap 40\s+20\s+20\n`,
		`\n\s+09:00\s+app-update\s+20\s+10\s+10\s+quiet-hours 10\s+10\s+0\n`, `\n\s+09:00\s+flash-sale\s+40\s+\d+\s+0\s+\d+\s+\d+\s+\d+\n`,
		`\n\s+weekly-digest\s+normal\s+bulk\s+3000\s+3000\s+\d+\s+\d+\s`, `\n\s+breaking-news\s+high\s+urgent\s+200\s+200\s+200\s+0\s`,
		`\n\s+receipts\s+transactional\s+\(none\)\s+100\s+0\s+100\s+0\s+0\.0 s\s`, `, 0 delivered after the stop\n`,
		`\n\s+snoozed for 7 days\s+5\s+20\s+\d+\s+0\s+0\s+\d+\s+\d+\s+10\s+0\n`, `\n\s+snoozed until 13:15\s+5\s+20\s+20\s+0\s+\d+\s+0\s+0\s+0\s+0\n`,
		`\n\s+tier fewer\s+5\s+20\s+5\s+-\s+0\s+0\s+0\s+0\s+15\n`, `\n\s+none\s+5\s+20\s+20\s+-\s+0\s+0\s+0\s+0\s+0\n`} {
		if !regexp.MustCompile(re).MatchString(out.String()) {
			t.Errorf("output does not match %s:\n%s", re, out.String())
		}
	}
	if code := run([]string{"--users", "x"}, &out, &errOut); code != 2 {
		t.Errorf("bad flag: exit %d, want 2", code)
	}
	out.Reset()
	if code := run([]string{"--help"}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "--redis-addr") {
		t.Errorf("--help: exit %d\n%s", code, out.String())
	}
	out.Reset()
	if code := run([]string{"--version"}, &out, &errOut); code != 0 || !strings.HasPrefix(out.String(), "capper-demo dev (go1.") || !strings.Contains(out.String(), "revision ") {
		t.Errorf("--version: exit %d\n%s", code, out.String())
	}
}
