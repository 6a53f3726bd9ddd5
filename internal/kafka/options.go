package kafka

// The connection settings every client of capper's shares: brokers, client
// id, TLS, SASL, the groups' timeouts, and how writes are made.

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"
)

// Options are the broker settings shared by every reader, writer, group
// and admin request of a process.
// TLS, SASL and Logger may be nil; everything else is required (the
// configuration owns the defaults).
type Options struct {
	Brokers  []string
	ClientID string
	GroupID  string
	TLS      *tls.Config    // nil: plaintext
	SASL     sasl.Mechanism // nil: none; see NewSASL
	// Compression of the output topics: "none", "gzip", "snappy", "lz4", "zstd".
	Compression       string
	StartOffset       string // "earliest" or "latest", for a group with no committed offset
	FetchMaxWait      time.Duration
	SessionTimeout    time.Duration
	RebalanceTimeout  time.Duration
	HeartbeatInterval time.Duration
	WriteTimeout      time.Duration
	// BatchSize is the worker's batch size: a writer batch holds a whole
	// worker batch so that one WriteMessages is one produce per partition.
	BatchSize int
	// InstanceID makes the worker a static member of its groups ("":
	// dynamic); GroupProtocol is "cooperative" or "eager"; LeaveOnClose:
	// a static member leaves its groups when it stops (scaled down).
	InstanceID    string
	GroupProtocol string
	LeaveOnClose  bool
	// GroupMetrics are the memberships' metrics (nil: none).
	GroupMetrics *GroupMetrics
	Logger       *slog.Logger
}

// Transport is the connection settings (client id, TLS, SASL) as the
// Kafka room's memberships take them.
func (o Options) Transport() *kafkago.Transport {
	return &kafkago.Transport{ClientID: o.ClientID, DialTimeout: 10 * time.Second, TLS: o.TLS, SASL: o.SASL}
}

// NewSASL returns the kafka-go mechanism for "plain", "scram-sha-256" or
// "scram-sha-512", or nil for "" and "none".
func NewSASL(mechanism, username, password string) (sasl.Mechanism, error) {
	switch mechanism {
	case "", "none":
		return nil, nil
	case "plain":
		return plain.Mechanism{Username: username, Password: password}, nil
	case "scram-sha-256":
		return scram.Mechanism(scram.SHA256, username, password)
	case "scram-sha-512":
		return scram.Mechanism(scram.SHA512, username, password)
	}
	return nil, fmt.Errorf("kafka sasl: unknown mechanism %q", mechanism)
}

func (o Options) compression() (kafkago.Compression, error) {
	switch o.Compression {
	case "none":
		return 0, nil
	case "gzip":
		return kafkago.Gzip, nil
	case "snappy":
		return kafkago.Snappy, nil
	case "lz4":
		return kafkago.Lz4, nil
	case "zstd":
		return kafkago.Zstd, nil
	}
	return 0, fmt.Errorf("kafka compression: unknown codec %q", o.Compression)
}

func (o Options) Validate() error {
	var errs []error
	if len(o.Brokers) == 0 {
		errs = append(errs, fmt.Errorf("%s is required", "Brokers"))
	}
	if o.ClientID == "" {
		errs = append(errs, fmt.Errorf("%s is required", "ClientID"))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"FetchMaxWait", o.FetchMaxWait}, {"SessionTimeout", o.SessionTimeout}, {"RebalanceTimeout", o.RebalanceTimeout},
		{"HeartbeatInterval", o.HeartbeatInterval}, {"WriteTimeout", o.WriteTimeout},
	} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("%s %s must be above 0", d.name, d.v))
		}
	}
	if o.BatchSize < 1 {
		errs = append(errs, fmt.Errorf("BatchSize %d must be at least 1", o.BatchSize))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("kafka options: %w", err)
	}
	return nil
}

// Dialer is the connection settings (client id, TLS, SASL) as kafka-go's
// readers take them.
func (o Options) Dialer() *kafkago.Dialer {
	return &kafkago.Dialer{ClientID: o.ClientID, Timeout: 10 * time.Second, DualStack: true, TLS: o.TLS, SASLMechanism: o.SASL,
		DialFunc: dialBuffered}
}

// ToolOptions are the options of a tool that only reads and writes
// records (the demo, replay, the audit's tests): brokers, plaintext, and
// the worker's defaults for the rest.
func ToolOptions(brokers []string) Options {
	return Options{Brokers: brokers, ClientID: "capper", Compression: "none", StartOffset: "earliest",
		FetchMaxWait: 250 * time.Millisecond, SessionTimeout: 8 * time.Second, RebalanceTimeout: 30 * time.Second,
		HeartbeatInterval: time.Second, WriteTimeout: 10 * time.Second, BatchSize: 1000}
}
