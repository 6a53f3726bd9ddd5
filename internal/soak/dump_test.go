package soak

// The records of a failed soak, kept for reading: with CAPPER_SOAK_LOGS
// set, every record of every topic (the input, the outputs, the delay
// tiers, the lanes, the control topic) goes to topics.jsonl beside the
// worker logs, and both groups' committed offsets to offsets.txt.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/capper-dev/capper/internal/audit"
)

// dumped is one record as topics.jsonl holds it.
type dumped struct {
	Topic     string            `json:"topic"`
	Partition int               `json:"partition"`
	Offset    int64             `json:"offset"`
	Time      string            `json:"time"`
	Key       string            `json:"key"`
	Value     string            `json:"value"`
	Headers   map[string]string `json:"headers"`
}

// dump writes the records and the groups' offsets to dir.
func dump(ctx context.Context, addr, dir string, groups []string) error {
	f, err := os.Create(filepath.Join(dir, "topics.jsonl"))
	if err != nil {
		return err
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, topic := range topics {
		msgs, err := audit.ReadTopic(ctx, []string{addr}, topic)
		if err != nil {
			return err
		}
		for _, m := range msgs {
			d := dumped{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Time: m.Time.UTC().Format(timeLayout),
				Key: string(m.Key), Value: string(m.Value), Headers: map[string]string{}}
			for _, h := range m.Headers {
				d.Headers[h.Key] = string(h.Value)
			}
			if err := enc.Encode(d); err != nil {
				return err
			}
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	c := &kafka.Client{Addr: kafka.TCP(addr), Timeout: 10 * time.Second}
	parts := map[string][]int{}
	for _, t := range topics {
		for p := range partitions {
			parts[t] = append(parts[t], p)
		}
	}
	var lines []string
	for _, g := range groups {
		res, err := c.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: g, Topics: parts})
		if err != nil {
			lines = append(lines, fmt.Sprintf("group %s: %v", g, err))
			continue
		}
		for t, ps := range res.Topics {
			for _, p := range ps {
				if p.CommittedOffset >= 0 {
					lines = append(lines, fmt.Sprintf("group %s: %s/%d committed %d", g, t, p.Partition, p.CommittedOffset))
				}
			}
		}
	}
	slices.Sort(lines)
	out := ""
	for _, l := range lines {
		out += l + "\n"
	}
	return os.WriteFile(filepath.Join(dir, "offsets.txt"), []byte(out), 0o644)
}
