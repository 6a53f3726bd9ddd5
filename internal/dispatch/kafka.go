package dispatch

// kafka-go writers set up not to lose outcomes; the options the consumer
// (consumer.go) shares with them.

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"

	capkafka "github.com/capper-dev/capper/internal/kafka"
)

// KafkaOptions are the broker settings shared by the reader and the writers.
// TLS, SASL and Logger may be nil; everything else is required (the
// configuration owns the defaults).
type KafkaOptions struct {
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
	GroupMetrics *capkafka.GroupMetrics
	Logger       *slog.Logger
}

// Transport is the connection settings (client id, TLS, SASL) as the
// Kafka room's memberships take them.
func (o KafkaOptions) Transport() *kafka.Transport {
	return &kafka.Transport{ClientID: o.ClientID, DialTimeout: 10 * time.Second, TLS: o.TLS, SASL: o.SASL}
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

func (o KafkaOptions) compression() (kafka.Compression, error) {
	switch o.Compression {
	case "none":
		return 0, nil
	case "gzip":
		return kafka.Gzip, nil
	case "snappy":
		return kafka.Snappy, nil
	case "lz4":
		return kafka.Lz4, nil
	case "zstd":
		return kafka.Zstd, nil
	}
	return 0, fmt.Errorf("kafka compression: unknown codec %q", o.Compression)
}

func (o KafkaOptions) validate() error {
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
func (o KafkaOptions) Dialer() *kafka.Dialer {
	return &kafka.Dialer{ClientID: o.ClientID, Timeout: 10 * time.Second, DualStack: true, TLS: o.TLS, SASLMechanism: o.SASL}
}

// NewWriter returns a writer for topic, set up against kafka-go's defaults
// that would lose or slow outcomes:
//   - RequiredAcks all (the default is none: a write would "succeed" before
//     any broker has the record, and the commit that follows could lose it).
//   - BatchTimeout 1ms (the default 1s would add a second to every batch).
//   - A key-hash balancer (the default round-robin would scatter a user's
//     outcomes over partitions and lose their order). Murmur2 is the Java
//     client's partitioner, so records keyed by user land where a Java
//     producer would put them.
func NewWriter(o KafkaOptions, topic string) (*kafka.Writer, error) {
	return newWriter(o, topic, &kafka.Murmur2Balancer{})
}

// NewTierWriter returns a writer for a delay tier: like NewWriter's, but a
// record goes to the partition of its Partition field's index (its user's
// input partition), modulo the tier's partitions: the worker that reads
// the user's intents reads that tier partition too (copartition.go).
func NewTierWriter(o KafkaOptions, topic string) (*kafka.Writer, error) {
	return newWriter(o, topic, homeBalancer{})
}

func newWriter(o KafkaOptions, topic string, balancer kafka.Balancer) (*kafka.Writer, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	codec, err := o.compression()
	if err != nil {
		return nil, err
	}
	return &kafka.Writer{
		Addr:         kafka.TCP(o.Brokers...),
		Topic:        topic,
		Balancer:     balancer,
		RequiredAcks: kafka.RequireAll,
		BatchSize:    o.BatchSize,
		BatchTimeout: time.Millisecond,
		WriteTimeout: o.WriteTimeout,
		ReadTimeout:  o.WriteTimeout,
		MaxAttempts:  3, // the worker retries on top, with its own backoff
		Compression:  codec,
		Transport: &kafka.Transport{
			ClientID:    o.ClientID,
			DialTimeout: 10 * time.Second,
			TLS:         o.TLS,
			SASL:        o.SASL,
			// Only this topic's metadata: the writer copies its cached
			// metadata on every write, and with the default (every topic of
			// the cluster) that copy grows with the cluster.
			MetadataTopics: []string{topic},
		},
		ErrorLogger: ErrorLogger(o.Logger, "kafka writer "+topic),
	}, nil
}

// ErrorLogger is a kafka-go client's error log as WARN lines of l naming
// component (nil: none).
func ErrorLogger(l *slog.Logger, component string) kafka.Logger {
	if l == nil {
		return nil
	}
	return kafka.LoggerFunc(func(msg string, args ...any) {
		l.Warn(fmt.Sprintf(msg, args...), "component", component)
	})
}
