package dispatch

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/testenv"
)

// setTopicConfig sets a topic config on the broker (e.g. max.message.bytes).
func setTopicConfig(t *testing.T, e *env, topic, name, value string) {
	t.Helper()
	c := &kafka.Client{Addr: kafka.TCP(e.kafka.Addrs...), Timeout: 10 * time.Second}
	resp, err := c.IncrementalAlterConfigs(context.Background(), &kafka.IncrementalAlterConfigsRequest{
		Resources: []kafka.IncrementalAlterConfigsRequestResource{{
			ResourceType: kafka.ResourceTypeTopic, ResourceName: topic,
			Configs: []kafka.IncrementalAlterConfigsRequestConfig{{Name: name, Value: value, ConfigOperation: kafka.ConfigOperationSet}},
		}},
	})
	if err != nil {
		t.Fatalf("set %s=%s on %s: %v", name, value, topic, err)
	}
	for _, r := range resp.Resources {
		if r.Error != nil {
			t.Fatalf("set %s=%s on %s: %v", name, value, topic, r.Error)
		}
	}
}

func intentValue(id string, user int, channel, extra string) []byte {
	return intentOf(id, user, "c", channel, extra)
}

// intentOf is an intent of a campaign; extra adds fields (",\"k\":v").
func intentOf(id string, user int, campaign, channel, extra string) []byte {
	return fmt.Appendf(nil, `{"id":%q,"user_id":%d,"campaign_id":%q,"channel":%q%s}`, id, user, campaign, channel, extra)
}

// TestOversizeIntent: an intent far above kafka.max_intent_bytes (but
// accepted by the input topic) is dead-lettered with only the start of its
// value, so that its dead-letter copy fits the broker's limit; intents of
// other users keep flowing and the worker stops cleanly. Before, the
// whole-value copy was refused and retried forever, and nothing else moved.
func TestOversizeIntent(t *testing.T) {
	e := newEnv(t)
	big := intentValue("big", 7, "push", `,"payload":"`+strings.Repeat("x", 1_000_000)+`"`)
	in := []kafka.Message{{Key: []byte("7"), Value: big}}
	in = append(in, intents(60, 30, "ok")...)
	e.kafka.Produce(t, tIn, in)
	r := e.start(nil)
	o := e.waitOutcomes(len(in))
	if len(o.dlq) != 1 {
		t.Fatalf("%d dead letters, want the oversize intent only", len(o.dlq))
	}
	d := o.dlq[0]
	if !bytes.Equal(d.Value, big[:64<<10]) || headerValue(d, HeaderTruncated) != "true" ||
		headerValue(d, HeaderError) != fmt.Sprintf("value: %d bytes, above the limit of 65536 (kafka.max_intent_bytes)", len(big)) {
		t.Fatalf("dead letter: %d bytes, headers %v", len(d.Value), d.Headers)
	}
	if len(o.del)+len(o.sup) != 60 {
		t.Fatalf("%d other outcomes, want 60", len(o.del)+len(o.sup))
	}
	r.cancel()
	if err := r.wait(t); err != nil {
		t.Fatalf("worker after SIGTERM: %v", err)
	}
}

// TestRefusedRecords: what a topic refuses for good (MESSAGE_TOO_LARGE
// under a low max.message.bytes) is not retried: a delivery refused by the
// deliveries topic goes to the dead-letter topic with capper-error naming
// the topic; a dead letter the dead-letter topic refuses is sent again
// without its value. A small record that shared a refused batch is not
// punished for it. Before, each was retried forever and the worker stalled.
func TestRefusedRecords(t *testing.T) {
	e := newEnv(t)
	setTopicConfig(t, e, tDel, "max.message.bytes", "3000")
	setTopicConfig(t, e, tDLQ, "max.message.bytes", "6000")
	payload := func(n int) string { return `,"payload":"` + strings.Repeat("p", n) + `"` }
	in := []kafka.Message{
		// user 5: a delivery too large for deliveries (but fine for the DLQ)
		{Key: []byte("5"), Value: intentValue("wide", 5, "push", payload(4000))},
		{Key: []byte("5"), Value: intentValue("narrow", 5, "push", "")},
		// user 6: invalid and too large for the DLQ, next to a small invalid one
		{Key: []byte("6"), Value: intentValue("huge-invalid", 6, "fax", payload(7000))},
		{Key: []byte("6"), Value: intentValue("small-invalid", 6, "fax", "")},
	}
	e.kafka.Produce(t, tIn, in)
	r := e.start(nil)
	o := e.waitOutcomes(len(in))
	byID := map[string]kafka.Message{}
	for _, m := range append(append(o.del, o.sup...), o.dlq...) {
		var v struct{ ID string }
		_ = json.Unmarshal(m.Value, &v) // a value-less dead letter has no id
		byID[v.ID] = m
	}
	if m, ok := byID["narrow"]; !ok || len(o.del) != 1 || headerValue(m, HeaderDecision) != DecisionAllowed {
		t.Fatalf("the small delivery was not delivered: %d deliveries", len(o.del))
	}
	wide, ok := byID["wide"]
	if !ok || !containsMsg(o.dlq, wide) || headerValue(wide, HeaderDecision) != DecisionAllowed ||
		!strings.Contains(headerValue(wide, HeaderError), tDel+" refused the record: ") {
		t.Fatalf("the too-wide delivery: %v", wide.Headers)
	}
	if m, ok := byID["small-invalid"]; !ok || !strings.Contains(headerValue(m, HeaderError), `channel: "fax"`) || headerValue(m, HeaderTruncated) != "" {
		t.Fatalf("the small dead letter: %v", m.Headers)
	}
	var stripped *kafka.Message
	for i := range o.dlq {
		if len(o.dlq[i].Value) == 0 {
			stripped = &o.dlq[i]
		}
	}
	if stripped == nil || string(stripped.Key) != "6" || headerValue(*stripped, HeaderTruncated) != "true" ||
		!strings.Contains(headerValue(*stripped, HeaderError), `channel: "fax"`) ||
		!strings.Contains(headerValue(*stripped, HeaderError), tDLQ+" refused the record") || headerValue(*stripped, HeaderSource) == "" {
		t.Fatalf("no value-less dead letter for the huge invalid intent: %d dead letters", len(o.dlq))
	}
	for _, topic := range []string{tDel, tDLQ} {
		if n := testutil.ToFloat64(r.w.m.refused.WithLabelValues(topic)); n < 1 {
			t.Errorf("capper_kafka_refused_records_total{topic=%q} = %v", topic, n)
		}
	}
	waitCommitted(t, e, len(in))
}

func containsMsg(list []kafka.Message, m kafka.Message) bool {
	for _, x := range list {
		if x.Topic == m.Topic && x.Partition == m.Partition && x.Offset == m.Offset {
			return true
		}
	}
	return false
}

// TestPermanentErrors: the Kafka errors that cannot succeed on a retry.
func TestPermanentErrors(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{kafka.MessageSizeTooLarge, true},
		{kafka.InvalidRecord, true},
		{kafka.TopicAuthorizationFailed, true},
		{kafka.MessageTooLargeError{}, true},
		{kafka.NotEnoughReplicas, false},
		{kafka.UnknownTopicOrPartition, false},
		{kafka.LeaderNotAvailable, false},
		{context.DeadlineExceeded, false},
		{fmt.Errorf("dial tcp: connection refused"), false},
	} {
		if got := permanent(tc.err); got != tc.want {
			t.Errorf("permanent(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestEmptyValues: a 0-byte value and a null one (kafka-go cannot tell
// them apart) are dead-lettered with a clear error, and the dead letter has
// a 0-byte value, never a null one (a tombstone on a compacted topic). Read
// back with franz-go, which does tell them apart.
func TestEmptyValues(t *testing.T) {
	e := newEnv(t)
	// A 0-byte value, a null value, and a null key (with an intent).
	e.kafka.Produce(t, tIn, []kafka.Message{{Key: []byte("1"), Value: []byte{}}, {Key: []byte("2"), Value: nil},
		{Key: nil, Value: []byte(`{"id":"k","user_id":3,"campaign_id":"c","channel":"push"}`)}})
	e.start(nil)
	o := e.waitOutcomes(3)
	if len(o.dlq) != 3 {
		t.Fatalf("%d dead letters, want 3", len(o.dlq))
	}
	for _, m := range o.dlq {
		want := "value: empty: a null or 0-byte value is not an intent"
		if len(m.Value) > 0 {
			want = `key: "" is not the user_id 3 in decimal (intents are keyed by user)`
		}
		if headerValue(m, HeaderError) != want {
			t.Fatalf("capper-error %q, want %q", headerValue(m, HeaderError), want)
		}
	}
	for _, r := range readRaw(t, e.kafka.Addrs, tDLQ, 3) {
		if r.Value == nil || r.Key == nil {
			t.Fatalf("dead letter key %q (nil %v), value %q (nil %v): want 0 bytes, not null", r.Key, r.Key == nil, r.Value, r.Value == nil)
		}
	}
}

// readRaw reads n records of topic with franz-go, which (unlike kafka-go)
// tells a null field from a 0-byte one.
func readRaw(t *testing.T, addrs []string, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var got []*kgo.Record
	for len(got) < n && ctx.Err() == nil {
		got = append(got, cl.PollFetches(ctx).Records()...)
	}
	if len(got) != n {
		t.Fatalf("read %d records of %s back, want %d", len(got), topic, n)
	}
	return got
}

// TestEmptyHeaderValues: an input header with an empty value comes out
// with an empty value (not null) on every output topic, beside the other
// input headers, byte for byte; read back with franz-go, which tells the
// two apart (kafka-go reads both as nil).
func TestEmptyHeaderValues(t *testing.T) {
	e := newEnv(t)
	in := []kafka.Header{{Key: "x-empty", Value: []byte{}}, {Key: "x-trace", Value: []byte("t-1")}, {Key: "x-empty", Value: []byte{}}}
	e.kafka.Produce(t, tIn, []kafka.Message{
		{Key: []byte("7"), Value: intentValue("h1", 7, "push", ""), Headers: in}, // allowed
		{Key: []byte("7"), Value: intentValue("h2", 7, "push", ""), Headers: in}, // allowed
		{Key: []byte("7"), Value: intentValue("h3", 7, "push", ""), Headers: in}, // capped (2 a day)
		{Key: []byte("7"), Value: intentValue("h4", 7, "fax", ""), Headers: in},  // dead-lettered
	})
	e.start(nil)
	e.waitOutcomes(4)
	for _, topic := range []string{tDel, tSup, tDLQ} {
		n := map[string]int{tDel: 2}[topic]
		r := readRaw(t, e.kafka.Addrs, topic, max(n, 1))[0]
		var got []kgo.RecordHeader
		for _, h := range r.Headers {
			if !strings.HasPrefix(h.Key, "capper-") {
				got = append(got, h)
			}
		}
		if len(got) != len(in) {
			t.Fatalf("%s: input headers %v, want %v", topic, got, in)
		}
		for i, h := range got {
			if h.Key != in[i].Key || string(h.Value) != string(in[i].Value) || h.Value == nil {
				t.Fatalf("%s: header %d is %q=%q (null %v), want %q=%q, not null", topic, i, h.Key, h.Value, h.Value == nil, in[i].Key, in[i].Value)
			}
		}
	}
}

// TestNoIdsInLogs: while Redis is down, the worker's logs above debug and
// its readiness error name no user and no intent (the engine's errors used
// to quote both).
func TestNoIdsInLogs(t *testing.T) {
	e := newEnv(t)
	e.redis.Kill()
	in := []kafka.Message{
		{Key: []byte("987654321"), Value: intentValue("secret-intent-id", 987654321, "push", "")},
		{Key: []byte("123456789"), Value: intentValue("other-secret-id", 123456789, "email", "")},
	}
	e.kafka.Produce(t, tIn, in)
	var logs testenv.SyncBuffer
	r := e.start(func(o *Options) { o.Logger = slog.New(slog.NewJSONHandler(&logs, nil)) })
	deadline := time.Now().Add(30 * time.Second)
	for r.w.Ready() == nil || !strings.Contains(logs.String(), "redis could not decide") {
		if time.Now().After(deadline) {
			t.Fatalf("the worker never reported Redis down: %q", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	ready := r.w.Ready().Error()
	for _, secret := range []string{"987654321", "123456789", "secret-intent-id", "other-secret-id"} {
		if strings.Contains(logs.String(), secret) || strings.Contains(ready, secret) {
			t.Fatalf("%q leaked:\nlogs: %s\nready: %s", secret, logs.String(), ready)
		}
	}
}

// TestNotReadyWhileWritesFail: /readyz fails while an output topic refuses
// writes, and recovers with it; the metric names the topic.
func TestNotReadyWhileWritesFail(t *testing.T) {
	e := newEnv(t)
	in := intents(40, 10, "r")
	e.kafka.Produce(t, tIn, in)
	heal, refused := refuseWrites(e, tDel)
	r := e.start(nil)
	waitRefused(t, refused, 1)
	deadline := time.Now().Add(30 * time.Second)
	for err := r.w.Ready(); err == nil || !strings.Contains(err.Error(), "writes to "+tDel+" fail"); err = r.w.Ready() {
		if time.Now().After(deadline) {
			t.Fatalf("ready while writes fail: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	heal()
	e.waitOutcomes(len(in))
	for err := r.w.Ready(); err != nil; err = r.w.Ready() {
		if time.Now().After(deadline) {
			t.Fatalf("not ready after writes recovered: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMetricsStartAtZero: a fresh worker exports its labelled counters at 0
// for every configured topic, outcome and field.
func TestMetricsStartAtZero(t *testing.T) {
	e := newEnv(t)
	r := e.start(func(o *Options) { o.Segments = []string{"vip"} })
	for _, s := range []struct{ name, labels string }{
		{"capper_kafka_write_errors_total", `topic="` + tDel + `"`},
		{"capper_kafka_write_errors_total", `topic="` + tSup + `"`},
		{"capper_kafka_write_errors_total", `topic="` + tDLQ + `"`},
		{"capper_kafka_refused_records_total", `topic="` + tDLQ + `"`},
		{"capper_intents_total", `outcome="capped",segment="vip"`},
		{"capper_intents_total", `outcome="allowed",segment="none"`},
		{"capper_intents_total", `outcome="invalid",segment=""`},
		{"capper_invalid_intents_total", `field="channel"`},
		{"capper_invalid_intents_total", `field="tags"`},
		{"capper_invalid_intents_total", `field="time_zone"`},
		{"capper_overrides_total", `result="bypass"`},
		{"capper_overrides_total", `result="bypass-uncounted"`},
		{"capper_overrides_total", `result="refused"`},
	} {
		if !strings.Contains(gathered(t, r), s.name+"{"+s.labels+"} 0") {
			t.Errorf("%s{%s} is not exported at 0", s.name, s.labels)
		}
	}
}

func gathered(t *testing.T, r *running) string {
	t.Helper()
	mfs, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			fmt.Fprintf(&b, "%s{%s} %v\n", mf.GetName(), strings.Join(labels, ","), m.GetCounter().GetValue()+m.GetGauge().GetValue())
		}
	}
	return b.String()
}

// TestEngineRefusalIsDeadLettered: the decoder accepts a channel that the
// policy deciding the batch does not know (a policy swapped in between
// decoding and deciding). The engine refuses the request; the worker
// dead-letters it naming the field, and neither retries it nor stalls the
// intents beside it.
func TestEngineRefusalIsDeadLettered(t *testing.T) {
	e := newEnv(t)
	c := config.Default()
	dec, err := NewDecoder(DecoderOptions{Channels: append(slices.Clone(testChannels), "fax"), Categories: testCategories,
		DefaultCategory: c.Capping.DefaultCategory, MaxBytes: c.Kafka.MaxIntentBytes})
	if err != nil {
		t.Fatal(err)
	}
	msgs := intents(6, 3, "ok")
	msgs = append(msgs, kafka.Message{Key: []byte("7"), Value: []byte(`{"id":"f-1","user_id":7,"campaign_id":"c","channel":"fax"}`)})
	e.kafka.Produce(t, tIn, msgs)
	r := e.start(func(o *Options) { o.Decoder = dec })
	o := e.waitOutcomes(len(msgs))
	if len(o.del) != 6 || len(o.dlq) != 1 {
		t.Fatalf("%d delivered, %d dead-lettered; want 6 and 1", len(o.del), len(o.dlq))
	}
	want := `channel: unknown channel "fax": not one of the policy's (` + strings.Join(testChannels, ", ") + ")"
	if got := headerValue(o.dlq[0], HeaderError); got != want {
		t.Fatalf("capper-error %q, want %q", got, want)
	}
	if v := testutil.ToFloat64(r.w.m.redisRetries); v != 0 {
		t.Fatalf("capper_redis_retries_total = %v: an invalid request was retried", v)
	}
	if v := testutil.ToFloat64(r.w.m.invalid.WithLabelValues("channel")); v != 1 {
		t.Fatalf(`capper_invalid_intents_total{field="channel"} = %v, want 1`, v)
	}
}

// TestInvalidUTF8IdsDoNotCollide: two intents whose ids differ only in
// bytes that are not UTF-8 (a JSON decoder reads both as U+FFFD, one
// idempotency key) are both dead-lettered naming the byte; the user's cap
// (2 a day) still counts the valid intents beside them exactly.
func TestInvalidUTF8IdsDoNotCollide(t *testing.T) {
	e := newEnv(t)
	v := func(id string) kafka.Message {
		return kafka.Message{Key: []byte("5"), Value: []byte(`{"id":"` + id + `","user_id":5,"campaign_id":"c","channel":"push"}`)}
	}
	msgs := []kafka.Message{v("x-\xff"), v("x-\xfe"), v("x-a"), v("x-b"), v("x-c")}
	e.kafka.Produce(t, tIn, msgs)
	e.start(nil)
	o := e.waitOutcomes(len(msgs))
	if len(o.dlq) != 2 || len(o.del) != 2 || len(o.sup) != 1 {
		t.Fatalf("%d dead-lettered, %d delivered, %d suppressed; want 2, 2, 1", len(o.dlq), len(o.del), len(o.sup))
	}
	for i, m := range o.dlq {
		want := fmt.Sprintf("value: not valid UTF-8: byte 0x%x at offset 9", []byte{0xff, 0xfe}[i])
		if got := headerValue(m, HeaderError); got != want {
			t.Fatalf("dead letter %d: capper-error %q, want %q", i, got, want)
		}
	}
	if got := string(o.sup[0].Value); !strings.Contains(got, `"x-c"`) {
		t.Fatalf("suppressed %s, want x-c", got)
	}
	e.auditOK(o)
}
