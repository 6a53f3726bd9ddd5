package kafka

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/capper-dev/capper/internal/testenv"
)

// TestCheckTopics: every missing topic is named by its config key.
func TestCheckTopics(t *testing.T) {
	k := testenv.StartKafka(t, 1, []string{"in", "out"})
	c, err := NewAdmin(ToolOptions(k.Addrs))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.CheckTopics(ctx, map[string]string{"kafka.topics.input": "in", "kafka.topics.deliveries": "out"}); err != nil {
		t.Fatalf("existing topics: %v", err)
	}
	err = c.CheckTopics(ctx, map[string]string{"kafka.topics.input": "in", "kafka.topics.deliveries": "nope", "kafka.topics.dead_letter": "gone"})
	if !errors.Is(err, ErrMissingTopic) || !strings.Contains(err.Error(), `kafka.topics.deliveries: "nope": topic does not exist`) ||
		!strings.Contains(err.Error(), `kafka.topics.dead_letter: "gone"`) {
		t.Fatalf("missing topics: %v", err)
	}
}

// TestCheckTopicsJustCreated: a topic created after the client last asked
// (capper topics create, then a policy naming it) is found at once, not
// after the transport's metadata cache is next refreshed.
func TestCheckTopicsJustCreated(t *testing.T) {
	k := testenv.StartKafka(t, 1, []string{"in"})
	c, err := NewAdmin(ToolOptions(k.Addrs))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lanes := map[string]string{`budget "push" lane "bulk"`: "lanes.push.bulk"}
	if err := c.CheckTopics(ctx, lanes); !errors.Is(err, ErrMissingTopic) {
		t.Fatalf("before the topic is created: %v, want it missing", err)
	}
	if err := k.Cluster.CreateTopic("lanes.push.bulk", 1, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.CheckTopics(ctx, lanes); err != nil {
		t.Fatalf("just created: %v", err)
	}
	if err := c.CheckTopics(ctx, map[string]string{"kafka.topics.input": "in", "kafka.topics.deliveries": "never"}); !errors.Is(err, ErrMissingTopic) ||
		strings.Contains(err.Error(), "kafka.topics.input") {
		t.Fatalf("a topic never created: %v, want it alone missing", err)
	}
}

// TestPartitions: a topic's partitions, sorted; a missing topic's error
// is the brokers'.
func TestPartitions(t *testing.T) {
	k := testenv.StartKafka(t, 3, []string{"in"})
	a, err := NewAdmin(ToolOptions(k.Addrs))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if ids, err := a.Partitions(ctx, "in"); err != nil || !slices.Equal(ids, []int{0, 1, 2}) {
		t.Errorf("Partitions(in) = %v, %v; want [0 1 2]", ids, err)
	}
	if ids, err := a.Partitions(ctx, "missing"); !errors.Is(err, ErrUnknownTopic) || ids != nil {
		t.Errorf("Partitions(missing) = %v, %v; want an unknown topic", ids, err)
	}
}
