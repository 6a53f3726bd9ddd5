package pacing_test

import (
	"context"
	"testing"

	"github.com/capper-dev/capper/internal/kafka"

	"github.com/capper-dev/capper/internal/pacing"
	"github.com/capper-dev/capper/internal/testenv"
)

// BenchmarkGate is pacing's own CPU per released intent: the lane gate
// passing a fetch of 100 records and the pacer handing them their tokens,
// leases from a real redis-server included (a budget high enough never to
// make it wait: what is measured is the work, not the rate). Stamping the
// records is the lanes' owner's (dispatch's BenchmarkLaneRecord); the
// worker's cost of holding an intent (one more Kafka write and read) is
// BenchmarkHoldCost's (cmd/capper).
func BenchmarkGate(b *testing.B) {
	r := testenv.StartRedis(b, testenv.RedisOptions{})
	set, err := pacing.NewSet([]pacing.Budget{{Name: "push", Rate: 1e8, Burst: 1e7, Lanes: []pacing.Lane{{Name: "bulk"}}}})
	if err != nil {
		b.Fatal(err)
	}
	p, err := pacing.New(pacing.Options{Leaser: &pacing.RedisLeaser{Client: r.Client(), Prefix: "b"}})
	if err != nil {
		b.Fatal(err)
	}
	p.SetBudgets(set)
	g := &pacing.Gate{Pacer: p, Prefix: "lanes", Held: heldSince}
	topic := pacing.Topic("lanes", "push", "bulk")
	held := []kafka.Header{{Key: "capper-held-since", Value: []byte("2026-11-27T05:00:00.000Z")}}
	msgs := make([]kafka.Message, 100)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	released := 0
	for b.Loop() {
		for i := range msgs {
			msgs[i] = kafka.Message{Topic: topic, Headers: held[:1:1]}
		}
		batch := msgs
		for len(batch) > 0 {
			n, err := g.Pass(ctx, topic, batch, batch[len(batch)-1].Offset+1)
			if err != nil {
				b.Fatal(err)
			}
			batch = batch[n:]
			released += n
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(released), "ns/intent")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(released)/1000, "us/intent")
}
