package kafka

// Writers set up not to lose outcomes.

import (
	"fmt"
	"log/slog"
	"sync"
	"time"

	kafkago "github.com/segmentio/kafka-go"
)

// Writer writes a topic's records: kafka-go's writer's settings (the
// topic, balancer, acks, batch limits, retries, transport), each call sent
// at once as produce requests by its own WriteMessages (send.go). It owns
// its transport: kafka-go's Close leaves a transport it was given open,
// and a transport's connection pools keep a goroutine per broker asking
// for metadata until they are closed.
type Writer struct {
	kafkago.Writer
	mu    sync.Mutex
	parts []int // 0 to the topic's partitions - 1 (send.go)
	// leaders[p] is partition p's leader as the last metadata said
	// (sendleader.go).
	leaders []int32
	sets    sync.Pool // record sets' arrays, reused (encode.go)
}

// Close closes the writer's connections (a call in flight fails).
func (w *Writer) Close() error {
	err := w.Writer.Close()
	closeTransport(w.Transport)
	return err
}

// closeTransport closes the pools of a transport capper made; kafka-go's
// shared DefaultTransport (also what a nil rt means) is left alone.
func closeTransport(rt kafkago.RoundTripper) {
	if t, ok := rt.(*kafkago.Transport); ok && t != kafkago.DefaultTransport {
		t.CloseIdleConnections()
	}
}

// NewWriter returns a writer for topic, set up against kafka-go's defaults
// that would lose or slow outcomes:
//   - RequiredAcks all (the default is none: a write would "succeed" before
//     any broker has the record, and the commit that follows could lose it).
//   - A key-hash balancer (the default round-robin would scatter a user's
//     outcomes over partitions and lose their order). Murmur2 is the Java
//     client's partitioner, so records keyed by user land where a Java
//     producer would put them.
func NewWriter(o Options, topic string) (*Writer, error) {
	return newWriter(o, topic, &kafkago.Murmur2Balancer{})
}

// NewTierWriter returns a writer for a delay tier: like NewWriter's, but a
// record goes to the partition of its Partition field's index (its user's
// input partition), modulo the tier's partitions: the worker that reads
// the user's intents reads that tier partition too (copartition.go).
func NewTierWriter(o Options, topic string) (*Writer, error) {
	return newWriter(o, topic, homeBalancer{})
}

func newWriter(o Options, topic string, balancer kafkago.Balancer) (*Writer, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	codec, err := o.compression()
	if err != nil {
		return nil, err
	}
	return &Writer{Writer: kafkago.Writer{
		Addr:         kafkago.TCP(o.Brokers...),
		Topic:        topic,
		Balancer:     balancer,
		RequiredAcks: kafkago.RequireAll,
		BatchSize:    o.BatchSize,
		WriteTimeout: o.WriteTimeout,
		ReadTimeout:  o.WriteTimeout,
		MaxAttempts:  3, // the worker retries on top, with its own backoff
		Compression:  codec,
		Transport: &kafkago.Transport{
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
	}}, nil
}

// ErrorLogger is a kafka-go client's error log as WARN lines of l naming
// component (nil: none).
func ErrorLogger(l *slog.Logger, component string) kafkago.Logger {
	if l == nil {
		return nil
	}
	return kafkago.LoggerFunc(func(msg string, args ...any) {
		l.Warn(fmt.Sprintf(msg, args...), "component", component)
	})
}

// homeBalancer puts a record in the partition of its Partition field's
// index, modulo the topic's partitions (NewTierWriter): a delay tier keeps a user's deferred intents in the
// partition of their input partition's index (dispatch/copartition.go).
type homeBalancer struct{}

func (homeBalancer) Balance(m Message, partitions ...int) int {
	return partitions[max(m.Partition, 0)%len(partitions)]
}
