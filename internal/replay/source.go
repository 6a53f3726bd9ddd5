package replay

// Sources of past intents: a saved intents.jsonl[.gz] (one intent value
// per line, decided at its created_at) and a time range of a Kafka topic
// (every partition, merged by record timestamp, decided at the timestamp).

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/capper-dev/capper/internal/kafka"
)

// Progressor is a source that knows how far it got: done of total, in
// unit ("bytes" or "records"); total -1 when unknown.
type Progressor interface {
	Progress() (done, total int64, unit string)
}

// Open opens a source: kafka://topic@FROM..TO (brokers required) or a
// path to an intents.jsonl or intents.jsonl.gz file.
func Open(ctx context.Context, from string, brokers []string) (Source, error) {
	if rest, ok := strings.CutPrefix(from, "kafka://"); ok {
		spec, err := ParseKafka(rest)
		if err != nil {
			return nil, fmt.Errorf("--from %s: %w", from, err)
		}
		if len(brokers) == 0 {
			return nil, fmt.Errorf("--from %s: --brokers is required for a kafka source", from)
		}
		spec.Brokers = brokers
		return OpenKafka(ctx, spec)
	}
	return OpenJSONL(from)
}

// jsonl reads one intent per line.
type jsonl struct {
	name string
	f    *os.File
	size int64
	gz   *gzip.Reader
	r    *bufio.Reader
	line int64
	long []byte // a line longer than the buffer
	rec  Record
}

// OpenJSONL opens an intents.jsonl file, gzipped when its name ends in .gz.
func OpenJSONL(path string) (Source, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--from: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("--from: %w", err)
	}
	s := &jsonl{name: path, f: f, size: st.Size()}
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		if s.gz, err = gzip.NewReader(bufio.NewReaderSize(f, 1<<16)); err != nil {
			f.Close()
			return nil, fmt.Errorf("--from %s: not a gzip file: %w", path, err)
		}
		r = s.gz
	}
	s.r = bufio.NewReaderSize(r, 1<<20)
	return s, nil
}

func (s *jsonl) Name() string { return s.name }

// Progress is how far into the file reading has got (read-ahead included):
// the file's offset, which only the reader moves.
func (s *jsonl) Progress() (done, total int64, unit string) {
	done, _ = s.f.Seek(0, io.SeekCurrent)
	return done, s.size, "bytes"
}

func (s *jsonl) Next(context.Context) (*Record, error) {
	line, err := s.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		s.long = append(s.long[:0], line...)
		for errors.Is(err, bufio.ErrBufferFull) {
			line, err = s.r.ReadSlice('\n')
			s.long = append(s.long, line...)
		}
		line = s.long
	}
	if errors.Is(err, io.EOF) && len(line) == 0 {
		return nil, io.EOF
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("line %d: %w", s.line+1, err)
	}
	s.line++
	line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
	s.rec = Record{Pos: "line " + strconv.FormatInt(s.line, 10), Value: line}
	return &s.rec, nil
}

func (s *jsonl) Close() error {
	if s.gz != nil {
		s.gz.Close()
	}
	return s.f.Close()
}

// KafkaSpec is a time range of a topic.
type KafkaSpec struct {
	Brokers  []string
	Topic    string
	From, To time.Time
}

// timeLayouts are the forms a range bound may take: RFC 3339, with or
// without seconds, or a date (UTC midnight).
var timeLayouts = []string{time.RFC3339Nano, "2006-01-02T15:04Z07:00", "2006-01-02"}

func parseTime(s string) (time.Time, error) {
	for _, l := range timeLayouts {
		if t, err := time.Parse(l, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is not an RFC 3339 time (e.g. 2026-11-01T00:00:00Z)", s)
}

// ParseKafka reads "topic@FROM..TO" (the part after kafka://).
func ParseKafka(s string) (KafkaSpec, error) {
	topic, rng, ok := strings.Cut(s, "@")
	if !ok || topic == "" {
		return KafkaSpec{}, errors.New("want kafka://TOPIC@FROM..TO")
	}
	a, b, ok := strings.Cut(rng, "..")
	if !ok {
		return KafkaSpec{}, errors.New("want kafka://TOPIC@FROM..TO (FROM..TO: two RFC 3339 times)")
	}
	from, err := parseTime(a)
	if err != nil {
		return KafkaSpec{}, fmt.Errorf("FROM: %w", err)
	}
	to, err := parseTime(b)
	if err != nil {
		return KafkaSpec{}, fmt.Errorf("TO: %w", err)
	}
	if !from.Before(to) {
		return KafkaSpec{}, fmt.Errorf("FROM %s is not before TO %s", a, b)
	}
	return KafkaSpec{Topic: topic, From: from, To: to}, nil
}

// kafkaSource merges the partitions' records by timestamp (then partition,
// then offset); each partition keeps its own order.
type kafkaSource struct {
	spec  KafkaSpec
	tail  *kafka.Tail
	parts []*partition
	heads headHeap
	total int64
	done  int64
	rec   Record
}

type partition struct {
	id       int
	next, hw int64 // the next offset to read; the high watermark at the start
	head     kafka.Message
}

// idleCheck: a read that waits this long checks whether the partition is
// read to its end (a range ending on a transaction marker has no record
// at hw-1).
const idleCheck = 2 * time.Second

// OpenKafka finds, per partition, the offset at From and the high
// watermark, and starts reading (the Kafka room's Tail).
func OpenKafka(ctx context.Context, spec KafkaSpec) (Source, error) {
	name := "kafka://" + spec.Topic
	opts := kafka.ToolOptions(spec.Brokers)
	tail, err := kafka.NewTail(opts, spec.Topic)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	starts, first, hws, err := rangeOffsets(ctx, tail.Admin(), spec)
	if err != nil {
		_ = tail.Close()
		return nil, fmt.Errorf("%s: --brokers %s: %w", name, strings.Join(spec.Brokers, ","), err)
	}
	if len(hws) == 0 {
		_ = tail.Close()
		return nil, fmt.Errorf("%s: no such topic", name)
	}
	s := &kafkaSource{spec: spec, tail: tail}
	for _, id := range slices.Sorted(maps.Keys(hws)) {
		start, hw := starts[id], hws[id]
		if start < 0 || start > hw { // no record at or after From
			start = hw
		}
		start = max(start, first[id])
		if start >= hw {
			continue
		}
		s.parts = append(s.parts, &partition{id: id, next: start, hw: hw})
		s.total += hw - start
	}
	for _, p := range s.parts {
		ok, err := s.read(ctx, p)
		if err != nil {
			_ = s.Close()
			return nil, fmt.Errorf("%s: partition %d: %w", name, p.id, err)
		}
		if ok {
			s.heads = append(s.heads, p)
		}
	}
	heap.Init(&s.heads)
	return s, nil
}

// rangeOffsets are, per partition, the first offset at or after From, the
// first kept, and the high watermark.
func rangeOffsets(ctx context.Context, a *kafka.Admin, spec KafkaSpec) (start, first, hw map[int]int64, err error) {
	if first, hw, err = a.LogOffsets(ctx, spec.Topic); err != nil {
		if errors.Is(err, kafka.ErrUnknownTopic) {
			return nil, nil, nil, nil
		}
		return nil, nil, nil, err
	}
	if start, err = a.OffsetsAt(ctx, spec.Topic, spec.From); err != nil {
		return nil, nil, nil, err
	}
	return start, first, hw, nil
}

// read fetches the partition's next record into head; false at the end of
// the range.
func (s *kafkaSource) read(ctx context.Context, p *partition) (bool, error) {
	for p.next < p.hw {
		rctx, cancel := context.WithTimeout(ctx, idleCheck)
		m, err := s.tail.Read(rctx, p.id, p.next)
		cancel()
		if err != nil {
			if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
				if s.tail.Fetched(p.id) >= p.hw {
					return false, nil
				}
				continue
			}
			return false, err
		}
		if m.Offset >= p.hw {
			return false, nil
		}
		p.next = m.Offset + 1
		if !m.Time.Before(s.spec.To) {
			return false, nil
		}
		p.head = m
		return true, nil
	}
	return false, nil
}

func (s *kafkaSource) Name() string {
	return fmt.Sprintf("kafka://%s@%s..%s", s.spec.Topic, s.spec.From.UTC().Format(time.RFC3339), s.spec.To.UTC().Format(time.RFC3339))
}

func (s *kafkaSource) Progress() (done, total int64, unit string) { return s.done, s.total, "records" }

func (s *kafkaSource) Next(ctx context.Context) (*Record, error) {
	if len(s.heads) == 0 {
		return nil, io.EOF
	}
	p := s.heads[0]
	m := p.head
	s.rec = Record{Pos: s.spec.Topic + "/" + strconv.Itoa(p.id) + "/" + strconv.FormatInt(m.Offset, 10),
		Key: m.Key, Keyed: true, Value: m.Value, Time: m.Time}
	s.done++
	ok, err := s.read(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("partition %d: %w", p.id, err)
	}
	if ok {
		heap.Fix(&s.heads, 0)
	} else {
		heap.Pop(&s.heads)
	}
	return &s.rec, nil
}

func (s *kafkaSource) Close() error { return s.tail.Close() }

// headHeap orders partitions by their next record's timestamp.
type headHeap []*partition

func (h headHeap) Len() int { return len(h) }
func (h headHeap) Less(i, j int) bool {
	a, b := &h[i].head, &h[j].head
	if !a.Time.Equal(b.Time) {
		return a.Time.Before(b.Time)
	}
	return h[i].id < h[j].id
}
func (h headHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *headHeap) Push(x any)   { *h = append(*h, x.(*partition)) }
func (h *headHeap) Pop() any {
	old := *h
	p := old[len(old)-1]
	*h = old[:len(old)-1]
	return p
}
