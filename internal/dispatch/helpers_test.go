package dispatch

import (
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/config"
	capkafka "github.com/capper-dev/capper/internal/kafka"
)

// testKafkaOptions are the configuration's defaults (internal/config owns
// them) with the short timeouts the in-process broker allows.
func testKafkaOptions(brokers []string, group string) capkafka.Options {
	k := config.Default().Kafka
	return capkafka.Options{
		Brokers: brokers, GroupID: group, ClientID: k.ClientID,
		Compression: k.Compression, StartOffset: k.StartOffset,
		FetchMaxWait:      100 * time.Millisecond,
		SessionTimeout:    6 * time.Second, // kfake's minimum
		RebalanceTimeout:  6 * time.Second,
		HeartbeatInterval: 200 * time.Millisecond,
		WriteTimeout:      k.WriteTimeout.D(),
		BatchSize:         50,
	}
}

// testDecoder decodes with the configuration's defaults; maxBytes 0 keeps
// the default size limit.
func testDecoder(t testing.TB, maxBytes int) *Decoder {
	t.Helper()
	c := config.Default()
	if maxBytes == 0 {
		maxBytes = c.Kafka.MaxIntentBytes
	}
	d, err := NewDecoder(DecoderOptions{Channels: c.Capping.Channels, Categories: c.Capping.Categories,
		DefaultCategory: c.Capping.DefaultCategory, MaxBytes: maxBytes})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// testChannels and testCategories are the configuration's defaults.
var (
	testChannels   = config.Default().Capping.Channels
	testCategories = config.Default().Capping.Categories
)
