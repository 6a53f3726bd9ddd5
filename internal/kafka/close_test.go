package kafka

import (
	"context"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/testenv"
)

// TestCloseEndsConnectionPools: an admin client, a writer and a tail each
// close the connection pools their transport opened (kafka-go's Writer
// does not close a transport it was given, and a pool keeps a goroutine
// asking its broker for metadata until closed).
func TestCloseEndsConnectionPools(t *testing.T) {
	k := testenv.StartKafka(t, 2, []string{"t"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	before := testenv.KafkaPools()
	a, err := NewAdmin(ToolOptions(k.Addrs))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Partitions(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	w, err := NewWriter(ToolOptions(k.Addrs), "t")
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteMessages(ctx, Message{Key: []byte("1"), Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	tail, err := NewTail(ToolOptions(k.Addrs), "t")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tail.Ends(ctx); err != nil {
		t.Fatal(err)
	}
	if open := testenv.KafkaPools(); open < before+3 {
		t.Fatalf("%d connection pools open, %d before: the count sees no pool", open, before)
	}
	_ = a.Close()
	_ = w.Close()
	_ = tail.Close()
	for deadline := time.Now().Add(10 * time.Second); testenv.KafkaPools() > before && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if n := testenv.KafkaPools(); n > before {
		t.Errorf("%d connection pools still running after Close (%d before)", n-before, before)
	}
}
