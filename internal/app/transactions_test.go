package app_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capper-dev/capper/internal/kafka"
)

// TestAbortedTransactionIsNotDecided: intents a transactional producer
// wrote and then aborted are never decided (capper reads committed), the
// intents written beside them and after them are, and the transaction's
// marker is no intent (nothing is dead-lettered). The aborted intents go
// to the same users, so the same partitions, as those written after them:
// once those have outcomes, the aborted ones were read past.
func TestAbortedTransactionIsNotDecided(t *testing.T) {
	e := newE2E(t, "single")
	e.publish(300, 3)
	cfg := e.config()
	w := e.start("w1", cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.kafka.Addrs...), kgo.DefaultProduceTopic(tIn), kgo.TransactionalID("intents"),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil))) // murmur2 of the key, as the harness' writer
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	var recs []*kgo.Record
	for _, m := range paceIntents(0, 40, "aborted", "push", "marketing", "normal") {
		recs = append(recs, &kgo.Record{Key: m.Key, Value: m.Value})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	e.produce(paceIntents(0, 40, "beside", "push", "marketing", "normal"))
	if err := cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	e.produce(paceIntents(0, 40, "after", "push", "marketing", "normal"))
	o := e.waitDrained(60*time.Second, w)
	got := map[string]int{}
	for _, x := range [][]kafka.Message{o.deliveries, o.suppressed, o.dlq} {
		for _, m := range x {
			got[campaignOf(m)]++
		}
	}
	if got["aborted"] != 0 || got["beside"] != 40 || got["after"] != 40 || len(o.dlq) != 0 {
		t.Fatalf("outcomes by campaign %v, %d dead-lettered; want 40 beside and 40 after, none of the aborted transaction's, none dead-lettered", got, len(o.dlq))
	}
}
