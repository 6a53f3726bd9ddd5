package app

// The consumer actor: the worker with the Kafka reader and writers it owns.

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/dispatch"
)

type consumer struct {
	worker  *dispatch.Worker
	reader  *kafka.Reader
	writers *writerSet
}

// newConsumer builds the reader, the writers and the worker; on an error it
// closes what it built.
func newConsumer(cfg *config.Config, engine *capping.Engine, snaps dispatch.Snapshots, reg prometheus.Registerer, log *slog.Logger, now func() time.Time) (_ *consumer, err error) {
	kopts, err := kafkaOptions(cfg, log)
	if err != nil {
		return nil, err
	}
	dec, err := dispatch.NewDecoder(dispatch.DecoderOptions{
		Channels: cfg.Capping.Channels, DefaultCategory: cfg.Capping.DefaultCategory, MaxBytes: cfg.Kafka.MaxIntentBytes,
	})
	if err != nil {
		return nil, err
	}
	reader, err := dispatch.NewReader(kopts, cfg.Kafka.Topics.Input)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = reader.Close()
		}
	}()
	writers, err := newWriters(kopts, cfg.Kafka.Topics)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			writers.close()
		}
	}()
	w := cfg.Worker
	worker, err := dispatch.New(dispatch.Options{
		Reader:          reader,
		Deliveries:      writers.deliveries,
		Suppressed:      writers.suppressedOrNil(),
		DeadLetter:      writers.deadLetter,
		Decider:         engine,
		Snapshots:       snaps,
		Decoder:         dec,
		BatchSize:       w.BatchSize,
		BatchWait:       w.BatchWait.D(),
		Shadow:          !w.Enforce,
		FailOpen:        w.OnRedisError == "allow",
		RetryInitial:    w.RetryInitial.D(),
		RetryMax:        w.RetryMax.D(),
		ShutdownTimeout: w.ShutdownTimeout.D(),
		Now:             now,
		Logger:          log,
		Registerer:      reg,
	})
	if err != nil {
		return nil, err
	}
	return &consumer{worker: worker, reader: reader, writers: writers}, nil
}

// run consumes until ctx ends and the batch in flight is committed, then
// leaves the group and closes the writers.
func (c *consumer) run(ctx context.Context, log *slog.Logger) error {
	err := c.worker.Run(ctx)
	c.close(log)
	return err
}

func (c *consumer) close(log *slog.Logger) {
	if err := c.reader.Close(); err != nil {
		log.Warn("close kafka reader", "error", err)
	}
	c.writers.close()
}

func kafkaOptions(cfg *config.Config, log *slog.Logger) (dispatch.KafkaOptions, error) {
	k := cfg.Kafka
	tlsCfg, err := k.TLS.Build()
	if err != nil {
		return dispatch.KafkaOptions{}, fmt.Errorf("kafka.tls: %w", err)
	}
	mech, err := dispatch.NewSASL(k.SASL.Mechanism, k.SASL.Username, string(k.SASL.Password))
	if err != nil {
		return dispatch.KafkaOptions{}, err
	}
	return dispatch.KafkaOptions{
		Brokers:           k.Brokers,
		ClientID:          k.ClientID,
		GroupID:           k.GroupID,
		TLS:               tlsCfg,
		SASL:              mech,
		Compression:       k.Compression,
		StartOffset:       k.StartOffset,
		FetchMaxWait:      k.FetchMaxWait.D(),
		SessionTimeout:    k.SessionTimeout.D(),
		RebalanceTimeout:  k.RebalanceTimeout.D(),
		HeartbeatInterval: k.HeartbeatInterval.D(),
		WriteTimeout:      k.WriteTimeout.D(),
		BatchSize:         cfg.Worker.BatchSize,
		Logger:            log,
	}, nil
}

type closingWriter interface {
	dispatch.Writer
	Close() error
}

type writerSet struct {
	deliveries, suppressed, deadLetter closingWriter
}

// newWriters builds a writer per output topic; on an error it closes the
// ones it built.
func newWriters(o dispatch.KafkaOptions, t config.Topics) (_ *writerSet, err error) {
	ws := &writerSet{}
	defer func() {
		if err != nil {
			ws.close()
		}
	}()
	for _, w := range []struct {
		dst   *closingWriter
		topic string
	}{{&ws.deliveries, t.Deliveries}, {&ws.deadLetter, t.DeadLetter}, {&ws.suppressed, t.Suppressed}} {
		if w.topic == "" {
			continue // suppressed is optional
		}
		kw, err := dispatch.NewWriter(o, w.topic)
		if err != nil {
			return nil, fmt.Errorf("writer for %s: %w", w.topic, err)
		}
		*w.dst = kw
	}
	return ws, nil
}

// suppressedOrNil avoids handing the worker a typed nil interface.
func (ws *writerSet) suppressedOrNil() dispatch.Writer {
	if ws.suppressed == nil {
		return nil
	}
	return ws.suppressed
}

// close closes every writer. Their errors are not worth reporting: every
// record the worker wrote was acknowledged before its batch was committed.
func (ws *writerSet) close() {
	for _, w := range []closingWriter{ws.deliveries, ws.suppressed, ws.deadLetter} {
		if w != nil {
			_ = w.Close()
		}
	}
}
