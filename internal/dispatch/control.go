package dispatch

// The control topic on kafka-go: the follower's source (a reader per
// partition, outside any consumer group, and the partitions' ends), and
// the write of a control record with acks=all that returns its offset.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/capper-dev/capper/internal/control"
	"github.com/capper-dev/capper/internal/kafkautil"
)

// ControlSource reads the control topic for control.Follower.
type ControlSource struct {
	o       KafkaOptions
	topic   string
	client  *kafka.Client
	mu      sync.Mutex
	readers map[int]*partitionReader
	closing atomic.Bool // from Close on, the readers' errors are their shutdown's
}

type partitionReader struct {
	r    *kafka.Reader
	next int64 // the offset its next message has, if nothing was skipped
}

// NewControlSource checks the options.
func NewControlSource(o KafkaOptions, topic string) (*ControlSource, error) {
	c, err := NewAdminClient(o)
	if err != nil {
		return nil, err
	}
	return &ControlSource{o: o, topic: topic, client: c, readers: map[int]*partitionReader{}}, nil
}

// Ends is each partition's end offset now.
func (s *ControlSource) Ends(ctx context.Context) (map[int]int64, error) {
	parts, err := kafkautil.Partitions(ctx, s.client, s.topic)
	if err != nil {
		return nil, err
	}
	var reqs []kafka.OffsetRequest
	for _, p := range parts {
		reqs = append(reqs, kafka.LastOffsetOf(p))
	}
	if len(reqs) == 0 {
		return nil, fmt.Errorf("metadata of %s: no partitions", s.topic)
	}
	offs, err := s.client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{s.topic: reqs}})
	if err != nil {
		return nil, fmt.Errorf("offsets of %s: %w", s.topic, err)
	}
	ends := map[int]int64{}
	for _, po := range offs.Topics[s.topic] {
		if po.Error != nil {
			return nil, fmt.Errorf("offsets of %s partition %d: %w", s.topic, po.Partition, po.Error)
		}
		ends[po.Partition] = po.LastOffset
	}
	return ends, nil
}

// Read blocks for the next record of partition at or after offset.
func (s *ControlSource) Read(ctx context.Context, partition int, offset int64) (control.Message, error) {
	s.mu.Lock()
	pr := s.readers[partition]
	if pr == nil {
		pr = &partitionReader{r: kafka.NewReader(kafka.ReaderConfig{
			Brokers: s.o.Brokers, Topic: s.topic, Partition: partition, Dialer: s.o.Dialer(),
			MinBytes: 1, MaxBytes: 4 << 20, MaxWait: s.o.FetchMaxWait, ReadBackoffMin: 50 * time.Millisecond,
			// No lag reads: the follower has its own lag gauge, and kafka-go's
			// would log "failed to read lag ... context canceled" on Close.
			ReadLagInterval: -1,
			ErrorLogger:     s.errorLogger(),
		}), next: -1}
		s.readers[partition] = pr
	}
	s.mu.Unlock()
	if pr.next != offset {
		if err := pr.r.SetOffset(offset); err != nil {
			return control.Message{}, fmt.Errorf("read %s partition %d from %d: %w", s.topic, partition, offset, err)
		}
	}
	m, err := pr.r.FetchMessage(ctx)
	if err != nil {
		pr.next = -1
		return control.Message{}, fmt.Errorf("read %s partition %d: %w", s.topic, partition, err)
	}
	pr.next = m.Offset + 1
	return control.Message{Partition: m.Partition, Offset: m.Offset, HighWaterMark: m.HighWaterMark, Key: m.Key, Value: m.Value}, nil
}

// errorLogger is the readers' error log, quiet once Close began: a reader
// closed while it dials logs "operation was canceled", which is no failure.
func (s *ControlSource) errorLogger() kafka.Logger {
	l := ErrorLogger(s.o.Logger, "control")
	if l == nil {
		return nil
	}
	return kafka.LoggerFunc(func(msg string, args ...any) {
		if !s.closing.Load() {
			l.Printf(msg, args...)
		}
	})
}

// Close closes the readers.
func (s *ControlSource) Close() error {
	s.closing.Store(true)
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for _, pr := range s.readers {
		errs = append(errs, pr.r.Close())
	}
	return errors.Join(errs...)
}

// WriteRecord writes key and value to partition of the control topic with
// acks=all and returns its offset (the follower's re-assertions).
func (s *ControlSource) WriteRecord(ctx context.Context, partition int, key, value []byte) (int64, error) {
	resp, err := s.client.Produce(ctx, &kafka.ProduceRequest{Topic: s.topic, Partition: partition, RequiredAcks: kafka.RequireAll,
		Records: kafka.NewRecordReader(kafka.Record{Key: kafka.NewBytes(key), Value: kafka.NewBytes(value), Time: time.Now()})})
	if err == nil {
		err = resp.Error
	}
	if err != nil {
		return 0, fmt.Errorf("write %q to %s partition %d: %w", key, s.topic, partition, err)
	}
	return resp.BaseOffset, nil
}

// WriteControl writes a control record with acks=all to the partition of
// its key (murmur2, as every capper writer keys) and returns its position.
func WriteControl(ctx context.Context, o KafkaOptions, topic string, r *control.Record) (control.Position, error) {
	value, err := r.Marshal()
	if err != nil {
		return control.Position{}, err
	}
	c, err := NewAdminClient(o)
	if err != nil {
		return control.Position{}, err
	}
	parts, err := kafkautil.Partitions(ctx, c, topic)
	if err != nil {
		return control.Position{}, err
	}
	if len(parts) == 0 {
		return control.Position{}, fmt.Errorf("%s: %w on the brokers", topic, ErrMissingTopic)
	}
	key := []byte(r.Key())
	p := (&kafka.Murmur2Balancer{}).Balance(kafka.Message{Key: key}, parts...)
	resp, err := c.Produce(ctx, &kafka.ProduceRequest{Topic: topic, Partition: p, RequiredAcks: kafka.RequireAll,
		Records: kafka.NewRecordReader(kafka.Record{Key: kafka.NewBytes(key), Value: kafka.NewBytes(value), Time: r.At})})
	if err == nil {
		err = resp.Error
	}
	if err != nil {
		return control.Position{}, fmt.Errorf("write the control record of %s to %s: %w", r.Key(), topic, err)
	}
	return control.Position{Topic: topic, Partition: p, Offset: resp.BaseOffset}, nil
}
