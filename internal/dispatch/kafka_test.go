package dispatch

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/kafka"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/capper-dev/capper/internal/testenv"
)

// TestKafkaSecurity: the reader and writers the worker builds authenticate
// with SASL (plain, SCRAM-SHA-256/512) and speak TLS to a broker that
// requires them, and a wrong password is refused.
func TestKafkaSecurity(t *testing.T) {
	ca := testenv.NewCA(t)
	for _, tc := range []struct {
		name, mechanism, kfakeMethod string
		tls                          bool
	}{
		{"plain", "plain", "PLAIN", false},
		{"scram-sha-256", "scram-sha-256", "SCRAM-SHA-256", false},
		{"scram-sha-512 over tls", "scram-sha-512", "SCRAM-SHA-512", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := []kfake.Opt{kfake.EnableSASL(), kfake.Superuser(tc.kfakeMethod, "capper", "s3cret")}
			if tc.tls {
				opts = append(opts, kfake.TLS(ca.Server))
			}
			k := testenv.StartKafka(t, 1, []string{"in", "out"}, opts...)
			o := testKafkaOptions(k.Addrs, "g")
			if tc.tls {
				o.TLS = ca.Client
			}
			var err error
			if o.SASL, err = kafka.NewSASL(tc.mechanism, "capper", "s3cret"); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			w, err := kafka.NewWriter(o, "in")
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if err := w.WriteMessages(ctx, kafka.Message{Key: []byte("1"), Value: []byte("v")}); err != nil {
				t.Fatalf("write with %s: %v", tc.mechanism, err)
			}
			r, err := NewConsumer(ConsumerOptions{Kafka: o, Input: "in"})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			m, err := r.FetchMessage(ctx)
			if err != nil || string(m.Value) != "v" {
				t.Fatalf("fetch with %s: %q %v", tc.mechanism, m.Value, err)
			}
			if err := r.CommitMessages(ctx, m); err != nil {
				t.Fatalf("commit with %s: %v", tc.mechanism, err)
			}

			bad := o
			if bad.SASL, err = kafka.NewSASL(tc.mechanism, "capper", "wrong"); err != nil {
				t.Fatal(err)
			}
			bw, err := kafka.NewWriter(bad, "out")
			if err != nil {
				t.Fatal(err)
			}
			defer bw.Close()
			bctx, bcancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer bcancel()
			if err := bw.WriteMessages(bctx, kafka.Message{Value: []byte("x")}); err == nil {
				t.Fatalf("a wrong password was accepted")
			}
		})
	}
}

func TestKafkaOptionErrors(t *testing.T) {
	if _, err := kafka.NewSASL("gssapi", "u", "p"); err == nil || !strings.Contains(err.Error(), "gssapi") {
		t.Errorf("kafka.NewSASL(gssapi) = %v", err)
	}
	o := testKafkaOptions([]string{"x:1"}, "g")
	with := func(f func(*kafka.Options)) kafka.Options { c := o; f(&c); return c }
	if _, err := kafka.NewWriter(with(func(o *kafka.Options) { o.Compression = "brotli" }), "t"); err == nil || !strings.Contains(err.Error(), "brotli") {
		t.Errorf("NewWriter(brotli) = %v", err)
	}
	if _, err := NewConsumer(ConsumerOptions{Kafka: with(func(o *kafka.Options) { o.StartOffset = "middle" }), Input: "t"}); err == nil || !strings.Contains(err.Error(), "middle") {
		t.Errorf("NewConsumer(middle) = %v", err)
	}
	if _, err := kafka.NewWriter(with(func(o *kafka.Options) { o.WriteTimeout, o.BatchSize = 0, 0 }), "t"); err == nil ||
		!strings.Contains(err.Error(), "WriteTimeout 0s must be above 0") || !strings.Contains(err.Error(), "BatchSize 0") {
		t.Errorf("NewWriter without WriteTimeout and BatchSize = %v", err)
	}
	if _, err := NewConsumer(ConsumerOptions{Kafka: with(func(o *kafka.Options) { o.GroupID = "" }), Input: "t"}); err == nil || !strings.Contains(err.Error(), "a group id is required") {
		t.Errorf("NewConsumer without a group = %v", err)
	}
	if _, err := NewConsumer(ConsumerOptions{Kafka: o, Input: "t", Tiers: []string{"d"}}); err == nil || !strings.Contains(err.Error(), "delay tiers need a group id") {
		t.Errorf("NewConsumer with tiers and no delay group = %v", err)
	}
	for _, c := range []string{"none", "gzip", "snappy", "lz4", "zstd"} {
		if _, err := kafka.NewWriter(with(func(o *kafka.Options) { o.Compression = c }), "t"); err != nil {
			t.Errorf("compression %s: %v", c, err)
		}
	}
}
