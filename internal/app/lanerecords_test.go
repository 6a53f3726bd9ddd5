package app_test

import (
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/dispatch"
	"github.com/capper-dev/capper/internal/pacing"
)

// laneForms counts the records of the push-fcm budget's lanes (and their
// retry topics) in each form: compact (capper-held) and headers
// (capper-held-since); a record in neither fails the test.
func laneForms(t *testing.T, e *e2e) (compact, headers int) {
	t.Helper()
	for _, lane := range []string{"urgent", "bulk"} {
		for _, topic := range []string{pacing.Topic(tLanes, "push-fcm", lane), pacing.RetryTopic(tLanes, "push-fcm", lane)} {
			for _, m := range e.readTopic(topic) {
				switch {
				case header(m, dispatch.HeaderHeld) != "" && header(m, dispatch.HeaderHeldSince) == "":
					compact++
				case header(m, dispatch.HeaderHeldSince) != "" && header(m, dispatch.HeaderHeld) == "":
					headers++
				default:
					t.Fatalf("%s record %d/%d in neither form: %v", topic, m.Partition, m.Offset, m.Headers)
				}
			}
		}
	}
	return compact, headers
}

// checkLaneFields: each held intent's record in lane (at least held of
// them) says where its fields are (its release reads them there); what
// comes out of a lane does not.
func checkLaneFields(t *testing.T, e *e2e, o outputs, lane string, held int) {
	t.Helper()
	records := e.readTopic(pacing.Topic(tLanes, "push-fcm", lane))
	for _, m := range records {
		if len(header(m, dispatch.HeaderFields)) < 5 {
			t.Fatalf("lane record %d/%d: %s %q, want where its fields are", m.Partition, m.Offset, dispatch.HeaderFields, header(m, dispatch.HeaderFields))
		}
	}
	for _, m := range o.deliveries {
		if header(m, dispatch.HeaderFields) != "" {
			t.Fatalf("delivery %s carries %s", idOf(m), dispatch.HeaderFields)
		}
	}
	if len(records) < held {
		t.Errorf("%d records in the %s lane, want at least the %d held", len(records), lane, held)
	}
}

// TestLaneRecordsSwitched: lane records of both forms in the same lanes, as
// after the switch to compact once every worker runs a version that reads
// it: a worker writing headers holds 300 intents and stops; one writing
// compact holds 300 more and releases all 600, each with one outcome,
// at the budget's rate.
func TestLaneRecordsSwitched(t *testing.T) {
	e := newE2E(t, "single")
	e.publish(1000, 9)
	cfg := e.paceConfig(pacePolicy)
	bulk := pacing.Topic(tLanes, "push-fcm", "bulk")
	w1 := e.start("w1", cfg)
	e.produce(paceIntents(0, 300, "first", "push", "marketing", "normal"))
	waitFor(t, 30*time.Second, func() bool { return e.topicLen(bulk) >= 300 })
	if err := w1.stop(t); err != nil {
		t.Fatalf("w1: %v", err)
	}
	compact := *cfg
	compact.Kafka.LaneRecords = "compact"
	w2 := e.start("w2", &compact)
	e.produce(paceIntents(300, 300, "second", "push", "marketing", "normal"))
	o := e.waitDrained(60*time.Second, w2)
	e.verifyOutcomes(o, true)
	if c, h := laneForms(t, e); c < 300 || h < 300 {
		t.Errorf("lane records: %d compact, %d in headers; want at least 300 of each", c, h)
	}
	var released []time.Time
	for _, m := range o.deliveries {
		if header(m, "capper-duplicate") != "true" {
			released = append(released, headerTime(t, m, dispatch.HeaderReleasedAt))
		}
	}
	if len(released) < 600 {
		t.Errorf("%d released, want all 600", len(released))
	}
	if most, limit := mostInOneSecond(released), int(paceRate*1.01)+paceBurst; most > limit {
		t.Errorf("%d releases within one second; the budget allows %d", most, limit)
	}
}
