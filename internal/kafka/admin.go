package kafka

// What capper asks the brokers besides reading and writing records: the
// partitions of a topic, whether topics exist, the log's bounds, a group's
// committed offsets and its lag.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/capper-dev/capper/internal/retry"
	kafkago "github.com/segmentio/kafka-go"
)

// Admin asks the brokers for metadata, offsets and group offsets.
type Admin struct {
	c    *kafkago.Client
	owns bool // its transport is its own: Close closes it
}

// NewAdmin returns an admin client with o's connection settings; its
// owner closes it.
func NewAdmin(o Options) (*Admin, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	return &Admin{c: &kafkago.Client{Addr: kafkago.TCP(o.Brokers...), Timeout: o.WriteTimeout, Transport: o.Transport()}, owns: true}, nil
}

// AdminOf is an admin client over c (a tool's own: topics, tests); Close
// leaves c's transport to its owner.
func AdminOf(c *kafkago.Client) *Admin { return &Admin{c: c} }

// Close closes the admin's connections and stops its transport's metadata
// refreshes (each pool of a kafka-go transport keeps a goroutine that asks
// its brokers for metadata until closed). An admin used after Close opens
// new connections, which its owner must close again.
func (a *Admin) Close() error {
	if a.owns {
		closeTransport(a.c.Transport)
	}
	return nil
}

// ErrMissingTopic is wrapped by CheckTopics for a topic the brokers do not
// have.
var ErrMissingTopic = errors.New("topic does not exist")

// Partitions returns the ids of topic's partitions, sorted; none (and no
// error) when the brokers' answer does not name the topic. The topic's own
// error (unknown, not authorized) is returned, wrapped.
func (a *Admin) Partitions(ctx context.Context, topic string) ([]int, error) {
	md, err := a.c.Metadata(ctx, &kafkago.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return nil, fmt.Errorf("metadata of %s: %w", topic, err)
	}
	var ids []int
	for _, t := range md.Topics {
		if t.Name != topic {
			continue
		}
		if t.Error != nil {
			return nil, fmt.Errorf("metadata of %s: %w", topic, t.Error)
		}
		for _, p := range t.Partitions {
			ids = append(ids, p.ID)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// CheckTopics asks the brokers for each topic (by the config key that names
// it) and reports every one that is missing or not accessible. A topic the
// answer lacks is asked again through connections of its own before it is
// reported: the client's transport answers metadata from a cache it
// refreshes every few seconds, which does not know a topic created a moment
// ago (`capper topics create`, then a policy whose lanes it created).
func (a *Admin) CheckTopics(ctx context.Context, topics map[string]string) error {
	found, err := topicErrors(ctx, a.c, slices.Collect(maps.Values(topics)))
	if err != nil {
		return err
	}
	var again []string
	for _, t := range topics {
		if err, ok := found[t]; !ok || errors.Is(err, kafkago.UnknownTopicOrPartition) {
			again = append(again, t)
		}
	}
	if len(again) > 0 {
		fresh, done := uncached(a.c, again)
		refound, err := topicErrors(ctx, fresh, again)
		done()
		if err != nil {
			return err
		}
		maps.Copy(found, refound)
	}
	var errs []error
	for _, key := range slices.Sorted(maps.Keys(topics)) {
		t := topics[key]
		switch err, ok := found[t]; {
		case !ok || errors.Is(err, kafkago.UnknownTopicOrPartition):
			errs = append(errs, fmt.Errorf("%s: %q: %w on the brokers", key, t, ErrMissingTopic))
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %q: %w", key, t, err))
		}
	}
	return errors.Join(errs...)
}

// topicErrors is each topic c's metadata names, with its error (nil: it
// exists).
func topicErrors(ctx context.Context, c *kafkago.Client, names []string) (map[string]error, error) {
	slices.Sort(names)
	md, err := c.Metadata(ctx, &kafkago.MetadataRequest{Topics: names})
	if err != nil {
		return nil, fmt.Errorf("check topics %v: %w", names, err)
	}
	found := map[string]error{}
	for _, t := range md.Topics {
		found[t.Name] = t.Error
	}
	return found, nil
}

// uncached is a client with c's settings whose transport is new, so that
// its first metadata (of topics only) comes from the brokers; done closes
// its connections. A transport that is not kafka-go's own cannot be
// copied: c itself.
func uncached(c *kafkago.Client, topics []string) (fresh *kafkago.Client, done func()) {
	t := &kafkago.Transport{MetadataTopics: topics}
	switch ct := c.Transport.(type) {
	case nil: // kafka-go's DefaultTransport: defaults
	case *kafkago.Transport:
		t = &kafkago.Transport{Dial: ct.Dial, DialTimeout: ct.DialTimeout, IdleTimeout: ct.IdleTimeout, TLS: ct.TLS,
			SASL: ct.SASL, Resolver: ct.Resolver, ClientID: ct.ClientID, Context: ct.Context, MetadataTopics: topics}
	default:
		return c, func() {}
	}
	return &kafkago.Client{Addr: c.Addr, Timeout: c.Timeout, Transport: t}, t.CloseIdleConnections
}

// LogOffsets is each partition of topic's first offset kept and end (the
// offset its next record will get).
func (a *Admin) LogOffsets(ctx context.Context, topic string) (first, end map[int]int64, err error) {
	parts, err := a.Partitions(ctx, topic)
	if err != nil {
		return nil, nil, err
	}
	if len(parts) == 0 {
		return nil, nil, fmt.Errorf("metadata of %s: no partitions", topic)
	}
	reqs := make([]kafkago.OffsetRequest, 0, 2*len(parts))
	for _, p := range parts {
		reqs = append(reqs, kafkago.FirstOffsetOf(p), kafkago.LastOffsetOf(p))
	}
	offs, err := a.c.ListOffsets(ctx, &kafkago.ListOffsetsRequest{Topics: map[string][]kafkago.OffsetRequest{topic: reqs}})
	if err != nil {
		return nil, nil, fmt.Errorf("offsets of %s: %w", topic, err)
	}
	first, end = map[int]int64{}, map[int]int64{}
	for _, po := range offs.Topics[topic] {
		if po.Error != nil {
			return nil, nil, fmt.Errorf("offsets of %s partition %d: %w", topic, po.Partition, po.Error)
		}
		first[po.Partition], end[po.Partition] = po.FirstOffset, po.LastOffset
	}
	return first, end, nil
}

// Committed is group's committed offset of each partition of topic that
// has one (none, and no error, for a group no member joined yet).
func (a *Admin) Committed(ctx context.Context, group, topic string, parts []int) (map[int]int64, error) {
	res, err := a.c.OffsetFetch(ctx, &kafkago.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: parts}})
	if err != nil {
		return nil, fmt.Errorf("committed offsets of group %s: %w", group, err)
	}
	switch {
	case errors.Is(res.Error, kafkago.GroupIdNotFound): // nothing committed yet
	case res.Error != nil:
		return nil, fmt.Errorf("committed offsets of group %s: %w", group, res.Error)
	}
	out := map[int]int64{}
	for _, p := range res.Topics[topic] {
		if p.Error == nil && p.CommittedOffset >= 0 {
			out[p.Partition] = p.CommittedOffset
		}
	}
	return out, nil
}

// Lags is group's lag on each partition of topic: the end offset minus the
// group's committed offset (all that is kept, where nothing is committed).
func (a *Admin) Lags(ctx context.Context, group, topic string) (map[int]int64, error) {
	first, end, err := a.LogOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	committed, err := a.Committed(ctx, group, topic, slices.Sorted(maps.Keys(end)))
	if err != nil {
		return nil, err
	}
	lags := map[int]int64{}
	for p, e := range end {
		start, ok := committed[p]
		if !ok {
			start = first[p] // nothing committed: all that is kept is behind
		}
		lags[p] = max(e-start, 0)
	}
	return lags, nil
}

// CaughtUp waits until group has committed, on every partition of topic,
// at least the end it had when CaughtUp was called (every record written
// before then was consumed), polling every poll; ctx's error when ctx ends
// first.
func (a *Admin) CaughtUp(ctx context.Context, group, topic string, poll time.Duration) error {
	first, end, err := a.LogOffsets(ctx, topic)
	if err != nil {
		return ended(ctx, err)
	}
	want := map[int]int64{}
	for p, e := range end {
		if e > first[p] { // nothing kept: nothing to consume
			want[p] = e
		}
	}
	for {
		committed, err := a.Committed(ctx, group, topic, slices.Sorted(maps.Keys(end)))
		if err != nil {
			return ended(ctx, err)
		}
		done := 0
		for p, e := range want {
			if committed[p] >= e {
				done++
			}
		}
		if done >= len(want) {
			return nil
		}
		if err := retry.Sleep(ctx, poll); err != nil {
			return err
		}
	}
}

// TopicNames is every topic the brokers have (that this client may see).
func (a *Admin) TopicNames(ctx context.Context) ([]string, error) {
	md, err := a.c.Metadata(ctx, &kafkago.MetadataRequest{})
	if err != nil {
		return nil, fmt.Errorf("list the topics: %w", err)
	}
	var out []string
	for _, t := range md.Topics {
		if t.Error == nil {
			out = append(out, t.Name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// OffsetsAt is, per partition of topic, the offset of its first record
// timestamped at or after at (its end when there is none).
func (a *Admin) OffsetsAt(ctx context.Context, topic string, at time.Time) (map[int]int64, error) {
	parts, err := a.Partitions(ctx, topic)
	if err != nil {
		return nil, err
	}
	reqs := make([]kafkago.OffsetRequest, 0, len(parts))
	for _, p := range parts {
		reqs = append(reqs, kafkago.TimeOffsetOf(p, at))
	}
	offs, err := a.c.ListOffsets(ctx, &kafkago.ListOffsetsRequest{Topics: map[string][]kafkago.OffsetRequest{topic: reqs}})
	if err != nil {
		return nil, fmt.Errorf("offsets of %s at %s: %w", topic, at.UTC().Format(time.RFC3339), err)
	}
	out := map[int]int64{}
	for _, po := range offs.Topics[topic] {
		if po.Error != nil {
			return nil, fmt.Errorf("offsets of %s partition %d: %w", topic, po.Partition, po.Error)
		}
		for off := range po.Offsets {
			out[po.Partition] = off
		}
		if _, ok := out[po.Partition]; !ok {
			out[po.Partition] = -1
		}
	}
	return out, nil
}
