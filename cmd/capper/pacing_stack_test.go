package main

// BenchmarkPacing's servers and producers, and the waits and scrapes
// that read the workers.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/capper-dev/capper/internal/app"
	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/demo"
	"github.com/capper-dev/capper/internal/objstore"
	"github.com/capper-dev/capper/internal/testenv"
)

// pacingStack is the servers of one run: a broker with the topics (the
// lanes created with the others), one redis-server or a cluster, a
// snapshot, and the workers' config (returned too for the engine that
// reads Redis back).
func pacingStack(b *testing.B, sc pacingScale, paced bool) (*stack, *config.Config) {
	b.Helper()
	s := &stack{kafka: testenv.StartKafka(b, int32(sc.partitions), nil)}
	dir := b.TempDir()
	st, err := objstore.Open(context.Background(), dir, objstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := demo.BuildSnapshot(context.Background(), st, 500, 1, time.Now); err != nil {
		b.Fatal(err)
	}
	policyFile := filepath.Join(b.TempDir(), "policy.yaml")
	if err := os.WriteFile(policyFile, []byte(pacePolicyYAML(sc, paced)), 0o644); err != nil {
		b.Fatal(err)
	}
	cfg := exampleConfig(b)
	cfg.Policy.Source = "file://" + policyFile
	cfg.Kafka.Brokers = s.kafka.Addrs
	cfg.Kafka.GroupID = paceGroup
	cfg.Kafka.SessionTimeout = config.Duration(6 * time.Second)
	cfg.Kafka.HeartbeatInterval = config.Duration(200 * time.Millisecond)
	cfg.Kafka.FetchMaxWait = config.Duration(100 * time.Millisecond)
	cfg.Kafka.Topics.Input = paceInput
	cfg.Kafka.Topics.Control = testenv.ControlTopic
	cfg.Kafka.DelayTiers = []config.DelayTier{{Delay: config.Duration(time.Minute), Topic: paceDelay}}
	if paced {
		cfg.Kafka.Topics.Lanes, cfg.Kafka.LaneRecords = paceLanes, sc.laneRecords
	}
	cfg.Kafka.Topics.DeliveryStatus = sc.statusTopic
	if sc.masters == 1 {
		cfg.Redis.Mode, cfg.Redis.Addrs = "single", []string{testenv.StartRedis(b, testenv.RedisOptions{}).Addr()}
	} else {
		cfg.Redis.Mode, cfg.Redis.Addrs = "cluster", testenv.StartCluster(b, sc.masters).Addrs()
	}
	cfg.Segments.Source = "file://" + dir
	cfg.Worker.BatchSize = config.Default().Worker.BatchSize
	cfg.Worker.ShutdownTimeout = config.Duration(10 * time.Second)
	if err := cfg.Validate(); err != nil {
		b.Fatal(err)
	}
	// Every topic, the lanes of the policy's budget with the others, as
	// `capper topics create` makes them.
	rep, err := app.CreateTopics(context.Background(), cfg, app.TopicsOptions{ConfigPath: "capper.yaml", Partitions: sc.partitions}, nil)
	if err == nil {
		err = rep.Err()
	}
	if err != nil {
		b.Fatalf("create topics: %v", err)
	}
	s.cfg = cfg
	engineCfg := *cfg
	return s, &engineCfg
}

// produceIntents writes n records (key and value of record i from rec) to
// the input with acks=all, from writers goroutines; each record's
// timestamp is when its batch was made.
func produceIntents(ctx context.Context, addrs []string, n, writers int, rec func(i int) (key, value string)) error {
	const chunk = 5000
	var next atomic.Int64
	errs := make(chan error, writers)
	for range writers {
		go func() {
			w := inputWriter(addrs)
			defer w.Close()
			msgs := make([]kafka.Message, 0, chunk)
			for {
				lo := int(next.Add(chunk)) - chunk
				if lo >= n {
					errs <- nil
					return
				}
				msgs, now := msgs[:0], time.Now()
				for i := lo; i < min(lo+chunk, n); i++ {
					k, v := rec(i)
					msgs = append(msgs, kafka.Message{Key: []byte(k), Value: []byte(v), Time: now})
				}
				if err := w.WriteMessages(ctx, msgs...); err != nil {
					errs <- fmt.Errorf("produce intents %d-%d: %w", lo, lo+len(msgs), err)
					return
				}
			}
		}()
	}
	var err error
	for range writers {
		err = errors.Join(err, <-errs)
	}
	return err
}

// produceTransactional writes transactional pushes at sc.txnRate until
// ctx ends, each stamped (record timestamp) when it is written; times[i]
// is txn-i's.
func produceTransactional(ctx context.Context, addrs []string, sc pacingScale, times []time.Time, sent *atomic.Int64) error {
	return produceAtRate(ctx, addrs, len(times), sc.txnRate, func(i int, now time.Time) kafka.Message {
		u := 1000 + sc.blast + sc.campaign + i
		times[i] = now
		return kafka.Message{Key: []byte(strconv.Itoa(u)), Time: now,
			Value: fmt.Appendf(nil, `{"id":"%s-%d","user_id":%d,"campaign_id":%q,"channel":"push","category":"transactional"}`, paceReceipts, i, u, paceReceipts)}
	}, func(n int) { sent.Store(int64(n)) })
}

// produceAtRate writes records 0 to n-1 (rec makes record i, written
// now) to the input at rate a second, every 10 ms what is due, until all
// are written or ctx ends; written, when set, hears how many are.
func produceAtRate(ctx context.Context, addrs []string, n int, rate float64, rec func(i int, now time.Time) kafka.Message, written func(int)) error {
	w := inputWriter(addrs)
	defer w.Close()
	start := time.Now()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var msgs []kafka.Message
	for i := 0; i < n; {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		due, now := min(int(rate*time.Since(start).Seconds()), n), time.Now()
		if due <= i {
			continue
		}
		for msgs = msgs[:0]; i < due; i++ {
			msgs = append(msgs, rec(i, now))
		}
		if err := w.WriteMessages(context.Background(), msgs...); err != nil {
			return fmt.Errorf("produce intents at %v/s, up to %d: %w", rate, i, err)
		}
		if written != nil {
			written(i)
		}
	}
	return nil
}

// inputWriter writes to the input with acks=all, keyed as capper's
// writers key (Murmur2).
func inputWriter(addrs []string) *kafka.Writer {
	return &kafka.Writer{Addr: kafka.TCP(addrs...), Topic: paceInput, RequiredAcks: kafka.RequireAll,
		BatchTimeout: time.Millisecond, BatchSize: 1000, Balancer: &kafka.Murmur2Balancer{}}
}

// waitPacingDrained waits until nothing waits in the lanes (the delay
// group committed every lane record) and, with inputs >= 0, the group
// committed that many input records.
func waitPacingDrained(b *testing.B, s *stack, sc pacingScale, lanes []string, inputs int, ws []*pacingWorker) {
	b.Helper()
	deadline := time.Now().Add(time.Duration(float64(sc.blast+sc.campaign)/sc.rate*float64(time.Second)) + 5*time.Minute)
	c := &kafka.Client{Addr: kafka.TCP(s.kafka.Addrs...), Timeout: 10 * time.Second}
	for {
		done := true
		if inputs >= 0 {
			sum := int64(0)
			for _, off := range s.kafka.Committed(b, paceGroup, paceInput, sc.partitions) {
				sum += max(off, 0)
			}
			done = sum >= int64(inputs)
		}
		for _, topic := range lanes {
			req := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{}}
			for p := range sc.partitions {
				req.Topics[topic] = append(req.Topics[topic], kafka.LastOffsetOf(p))
			}
			resp, err := c.ListOffsets(context.Background(), req)
			if err != nil {
				b.Fatal(err)
			}
			committed := s.kafka.Committed(b, s.cfg.Kafka.DelayGroup(), topic, sc.partitions)
			for _, po := range resp.Topics[topic] {
				if po.LastOffset > max(committed[po.Partition], 0) {
					done = false
				}
			}
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			var logs strings.Builder
			for _, w := range ws {
				fmt.Fprintf(&logs, "--- %s\n%s\n", w.addr, tailString(w.p.logs.String(), 3000))
			}
			b.Fatalf("not drained by %s\n%s", deadline.Format(time.TimeOnly), logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func tailString(s string, n int) string { return s[max(0, len(s)-n):] }

// scrapeWorker reads a worker's /metrics: each sample by its full name
// (labels included), and each metric's sum over its labels by its name.
func scrapeWorker(b *testing.B, addr string) map[string]float64 {
	b.Helper()
	_, body := httpBody(b, "http://"+addr+"/metrics")
	out := map[string]float64{}
	for _, line := range strings.Split(body, "\n") {
		sp := strings.LastIndexByte(line, ' ')
		if line == "" || line[0] == '#' || sp < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			continue
		}
		name := line[:sp]
		out[name] += v
		if i := strings.IndexByte(name, '{'); i >= 0 {
			out[name[:i]] += v
		}
	}
	return out
}

// brokerRequests counts the requests the broker answers, by kind (their
// kmsg key): how many round trips a run costs, a figure this machine's
// noise does not move.
type brokerRequests struct{ n [96]atomic.Int64 }

func countRequests(c *kfake.Cluster) *brokerRequests {
	r := &brokerRequests{}
	c.Control(func(req kmsg.Request) (kmsg.Response, error, bool) {
		if k := int(req.Key()); k >= 0 && k < len(r.n) {
			r.n[k].Add(1)
		}
		return nil, nil, false // observed, then answered as usual
	})
	return r
}

// since is how many of each kind were answered since from (a snapshot).
func (r *brokerRequests) since(from [96]int64) (d [96]int64) {
	for k := range r.n {
		d[k] = r.n[k].Load() - from[k]
	}
	return d
}

// requestsLine is one run's requests per 1,000 intents, by kind.
func requestsLine(n [96]int64, intents int) string {
	var each []string
	for k, v := range n {
		if v > 0 {
			each = append(each, fmt.Sprintf("%s %.1f", kmsg.NameForKey(int16(k)), float64(v)*1000/float64(intents)))
		}
	}
	return strings.Join(each, ", ")
}
