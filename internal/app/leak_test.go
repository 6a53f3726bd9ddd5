package app_test

import (
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/testenv"
)

// TestStoppedWorkerClosesKafkaClients: a worker that stops leaves no Kafka
// connection pool running. Each pool of a kafka-go transport keeps a
// goroutine that asks its brokers for metadata until it is closed; one
// left behind keeps dialing its broker's address after the broker is
// gone, and reads whatever server gets that port next as a Kafka answer
// (seen: an HTTP server's "400 Bad Request" read as a length of 808
// million). The worker here has every Kafka client a worker makes: the
// input and delay groups, every writer, the control topic's tail, the
// users' limits' applier, follower and gate, and the admin client.
func TestStoppedWorkerClosesKafkaClients(t *testing.T) {
	e := newE2E(t, "single")
	e.publish(50, 1)
	cfg := e.userConfig(userPolicy)
	cfg.Kafka.Topics.Control = tControl
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	e.produce(userIntents("w", 1, "push", "sms"))
	before := testenv.KafkaPools()
	w := e.start("w", cfg)
	e.waitDrained(60*time.Second, w)
	// The count sees a running worker's pools (else it proves nothing).
	if running := testenv.KafkaPools(); running <= before {
		t.Fatalf("%d connection pools while the worker runs, %d before it started", running, before)
	}
	if err := w.stop(t); err != nil {
		t.Fatalf("worker stopped with %v", err)
	}
	// A closed pool's goroutine ends when it sees its context cancelled.
	for deadline := time.Now().Add(10 * time.Second); testenv.KafkaPools() > before && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	if n := testenv.KafkaPools(); n > before {
		t.Errorf("%d kafka-go connection pools still running after the worker stopped (%d before it started)", n-before, before)
	}
}
