package topics_test

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/config"
	capkafka "github.com/capper-dev/capper/internal/kafka"
	"github.com/capper-dev/capper/internal/pacing"
	"github.com/capper-dev/capper/internal/testenv"
	"github.com/capper-dev/capper/internal/topics"
)

// kafkaConfig names every kind of topic: the input, four outputs, two
// delay tiers and the control topic.
func kafkaConfig(addrs []string) *config.Kafka {
	k := config.Default().Kafka
	k.Brokers = addrs
	k.Topics.DeliveryStatus = "delivery-status"
	k.Topics.Control = "capper-control"
	k.DelayTiers = []config.DelayTier{
		{Delay: config.Duration(time.Minute), Topic: "send-intents-delay-1m"},
		{Delay: config.Duration(10 * time.Minute), Topic: "send-intents-delay-10m"},
	}
	return &k
}

func client(k *testenv.Kafka) *kafka.Client {
	return &kafka.Client{Addr: kafka.TCP(k.Addrs...), Timeout: 10 * time.Second}
}

// admin is the Kafka room's admin client over client(k).
func admin(k *testenv.Kafka) *capkafka.Admin { return capkafka.AdminOf(client(k)) }

// create creates a topic on the broker as an operator would, outside capper.
func create(t *testing.T, k *testenv.Kafka, topic string, partitions int32, configs map[string]string) {
	t.Helper()
	if err := k.Cluster.CreateTopic(topic, partitions, configs); err != nil {
		t.Fatalf("create %s: %v", topic, err)
	}
}

// correct creates every topic of kafkaConfig right, but those in skip.
func correct(t *testing.T, k *testenv.Kafka, skip ...string) {
	t.Helper()
	for _, name := range []string{"send-intents", "deliveries", "suppressed", "send-intents-dlq", "delivery-status", "send-intents-delay-1m", "send-intents-delay-10m"} {
		if !contains(skip, name) {
			create(t, k, name, 6, nil)
		}
	}
	if !contains(skip, "capper-control") {
		create(t, k, "capper-control", 1, map[string]string{"cleanup.policy": "compact", "min.compaction.lag.ms": "604800000"})
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func check(t *testing.T, k *testenv.Kafka) (topics.Report, string) {
	t.Helper()
	r, err := topics.Check(context.Background(), admin(k), topics.CheckOptions{Kafka: kafkaConfig(k.Addrs), Fix: "capper topics create --config capper.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := r.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	return r, out.String()
}

func state(r topics.Report, name string) topics.State {
	for _, f := range r.Findings {
		if f.Name == name {
			return f.State
		}
	}
	return ""
}

// TestTopicsCheck: a correct set is all ok; a missing topic, a delay tier
// with fewer partitions than the input, a control topic that is not
// compacted (or also deleted), a compacted input and a tier retention
// below its delay are each named, with the fix; a short
// min.compaction.lag.ms is only warned about.
func TestTopicsCheck(t *testing.T) {
	t.Run("correct", func(t *testing.T) {
		k := testenv.StartKafka(t, 1, nil)
		correct(t, k)
		r, out := check(t, k)
		if err := r.Err(); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if n := strings.Count("\n"+out, "\nok "); n != 8 {
			t.Fatalf("%d ok lines, want 8:\n%s", n, out)
		}
	})
	t.Run("wrong", func(t *testing.T) {
		k := testenv.StartKafka(t, 1, nil)
		correct(t, k, "deliveries", "send-intents-delay-10m", "capper-control", "send-intents-delay-1m")
		create(t, k, "send-intents-delay-1m", 6, map[string]string{"retention.ms": "30000"})
		create(t, k, "send-intents-delay-10m", 3, nil)
		create(t, k, "capper-control", 1, nil)
		r, out := check(t, k)
		for name, want := range map[string]topics.State{
			"send-intents": topics.OK, "deliveries": topics.Missing, "send-intents-delay-10m": topics.Wrong,
			"send-intents-delay-1m": topics.Wrong, "capper-control": topics.Wrong,
		} {
			if got := state(r, name); got != want {
				t.Errorf("%s: %s, want %s\n%s", name, got, want, out)
			}
		}
		for _, want := range []string{
			"missing  deliveries",
			"create it: capper topics create --config capper.yaml",
			"3 partitions, the input send-intents has 6: delay tiers must be co-partitioned with the input",
			"give it 6: kafka-topics.sh --bootstrap-server " + k.Addrs[0] + " --alter --topic send-intents-delay-10m --partitions 6",
			"retention.ms is 30000 (30s), not above the tier's delay 1m0s",
			"cleanup.policy is delete, not compact: the control topic must be compacted",
			"--entity-name capper-control --add-config cleanup.policy=compact",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
		err := r.Err()
		if !errors.Is(err, topics.ErrTopics) || !strings.HasPrefix(err.Error(), "4 topics missing or wrong: ") {
			t.Fatalf("Err: %v", err)
		}
		for _, want := range []string{"deliveries (kafka.topics.deliveries) missing", "send-intents-delay-10m (kafka.delay_tiers[1].topic) wrong",
			"send-intents-delay-1m (kafka.delay_tiers[0].topic) wrong", "capper-control (kafka.topics.control) wrong"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("Err lacks %q: %v", want, err)
			}
		}
	})
	t.Run("compaction", func(t *testing.T) {
		k := testenv.StartKafka(t, 1, nil)
		correct(t, k, "capper-control", "send-intents")
		create(t, k, "send-intents", 6, map[string]string{"cleanup.policy": "compact"})
		create(t, k, "capper-control", 1, map[string]string{"cleanup.policy": "compact,delete"})
		r, out := check(t, k)
		if state(r, "send-intents") != topics.Wrong || !strings.Contains(out, "compaction keeps only a user's latest") {
			t.Errorf("a compacted input is not wrong:\n%s", out)
		}
		if state(r, "capper-control") != topics.Wrong || !strings.Contains(out, "delete also removes records older than retention.ms") {
			t.Errorf("compact,delete on the control topic is not wrong:\n%s", out)
		}
	})
	t.Run("short compaction lag", func(t *testing.T) {
		k := testenv.StartKafka(t, 1, nil)
		correct(t, k, "capper-control")
		create(t, k, "capper-control", 1, map[string]string{"cleanup.policy": "compact", "min.compaction.lag.ms": "60000"})
		r, out := check(t, k)
		if err := r.Err(); err != nil || state(r, "capper-control") != topics.Warn {
			t.Fatalf("Err %v, state %s; want nil and warn:\n%s", err, state(r, "capper-control"), out)
		}
		if !strings.Contains(out, "min.compaction.lag.ms is 60000 (1m0s)") || !strings.Contains(out, "--add-config min.compaction.lag.ms=604800000") {
			t.Fatalf("no warning naming the fix:\n%s", out)
		}
	})
}

// TestTopicsCreate: --dry-run creates nothing and says what it would;
// create makes every missing topic right (tiers with the input's
// partitions, the control topic compacted, with a 7-day compaction lag),
// leaves a wrong one as it is, and check then finds the rest ok.
func TestTopicsCreate(t *testing.T) {
	k := testenv.StartKafka(t, 1, nil)
	create(t, k, "send-intents", 5, nil)
	create(t, k, "send-intents-delay-10m", 2, nil) // wrong, and left so
	ctx := context.Background()
	o := topics.CreateOptions{Kafka: kafkaConfig(k.Addrs), Partitions: 9, DryRun: true, Fix: "capper topics check --config capper.yaml"}
	r, err := topics.Create(ctx, admin(k), o)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	_ = r.WriteText(&out)
	if got := state(r, "capper-control"); got != topics.WouldCreate {
		t.Fatalf("dry run: capper-control %s:\n%s", got, out.String())
	}
	if !strings.Contains(out.String(), "would create  send-intents-delay-1m") || !strings.Contains(out.String(), "5 partitions, replication factor the brokers' default, retention.ms=604800000") {
		t.Fatalf("dry run output:\n%s", out.String())
	}
	if c, _ := check(t, k); state(c, "deliveries") != topics.Missing || state(c, "capper-control") != topics.Missing {
		t.Fatalf("the dry run created topics: %v", c.Findings)
	}

	o.DryRun = false
	if r, err = topics.Create(ctx, admin(k), o); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	_ = r.WriteText(&out)
	for name, want := range map[string]topics.State{"send-intents": topics.OK, "deliveries": topics.Created, "capper-control": topics.Created,
		"send-intents-delay-1m": topics.Created, "send-intents-delay-10m": topics.Wrong} {
		if got := state(r, name); got != want {
			t.Errorf("create: %s %s, want %s\n%s", name, got, want, out.String())
		}
	}
	if err := r.Err(); err == nil || !strings.Contains(err.Error(), "send-intents-delay-10m (kafka.delay_tiers[1].topic) wrong") {
		t.Fatalf("create's Err: %v", err)
	}
	if n := len(k.Cluster.PartitionInfos("send-intents-delay-10m")); n != 2 {
		t.Fatalf("create altered the wrong tier: %d partitions", n)
	}
	c, text := check(t, k)
	for _, f := range c.Findings {
		want := topics.OK
		if f.Name == "send-intents-delay-10m" {
			want = topics.Wrong
		}
		if f.State != want {
			t.Errorf("check after create: %s %s, want %s\n%s", f.Name, f.State, want, text)
		}
		if f.Kind == topics.Control && f.Partitions != 1 || f.Kind != topics.Control && f.Partitions != 5 && f.Name != "send-intents-delay-10m" {
			t.Errorf("%s: %d partitions", f.Name, f.Partitions)
		}
	}
	dc, err := client(k).DescribeConfigs(ctx, &kafka.DescribeConfigsRequest{Resources: []kafka.DescribeConfigRequestResource{
		{ResourceType: kafka.ResourceTypeTopic, ResourceName: "capper-control", ConfigNames: []string{"cleanup.policy", "min.compaction.lag.ms"}}}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range dc.Resources[0].ConfigEntries {
		got[e.ConfigName] = e.ConfigValue
	}
	if got["cleanup.policy"] != "compact" || got["min.compaction.lag.ms"] != "604800000" {
		t.Fatalf("capper-control created with %v", got)
	}

	// Nothing missing: create creates nothing more.
	r, err = topics.Create(ctx, admin(k), o)
	if err != nil || len(r.Findings) != 8 || state(r, "deliveries") != topics.OK {
		t.Fatalf("second create: %v %v", err, r.Findings)
	}
}

// TestTopicsCreateInput: a missing input is created with the partitions
// asked for, and the tiers with as many; an existing tier with fewer is
// reported wrong against them.
func TestTopicsCreateInput(t *testing.T) {
	k := testenv.StartKafka(t, 1, nil)
	create(t, k, "send-intents-delay-10m", 2, nil)
	r, err := topics.Create(context.Background(), admin(k), topics.CreateOptions{Kafka: kafkaConfig(k.Addrs), Partitions: 3, ReplicationFactor: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range r.Findings {
		want := topics.Created
		if f.Name == "send-intents-delay-10m" {
			want = topics.Wrong
		}
		if f.State != want {
			t.Errorf("%s: %s, want %s %v", f.Name, f.State, want, f.Problems)
		}
	}
	for _, name := range []string{"send-intents", "send-intents-delay-1m", "deliveries"} {
		if n := len(k.Cluster.PartitionInfos(name)); n != 3 {
			t.Errorf("%s: %d partitions, want 3", name, n)
		}
	}
}

// TestTestenvControlTopic: the tests' control topic (testenv, which cannot
// import this package) is created as capper topics create makes one.
func TestTestenvControlTopic(t *testing.T) {
	want := topics.Topic{Kind: topics.Control}.Configs()
	got := testenv.TopicConfigs(testenv.ControlTopic)
	if !maps.Equal(got, want) {
		t.Fatalf("testenv creates %s with %v, capper topics create with %v", testenv.ControlTopic, got, want)
	}
}

// pacedBudgets are two budgets: push (lanes urgent and bulk) and email
// (the one default lane).
func pacedBudgets(t *testing.T) *pacing.Set {
	t.Helper()
	set, err := pacing.NewSet([]pacing.Budget{
		{Name: "push", Rate: 100, Burst: 10, Where: pacing.Where{Channels: []string{"push"}}, Lanes: []pacing.Lane{{Name: "urgent", MinPriority: capping.High}, {Name: "bulk"}}},
		{Name: "email", Rate: 5, Burst: 1, Lanes: []pacing.Lane{{Name: pacing.DefaultLane}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// TestTopicsLanes: the lane topics of the budgets are listed after the
// config's, named <lanes>.<budget>.<lane> and keyed by budget and lane;
// check names a missing lane, a lane with fewer partitions than the input
// (wrong) and a retention below 7 days (warn); create makes the missing
// ones with the input's partitions and a 7-day retention; budgets without
// kafka.topics.lanes are refused (ErrNoLanes).
func TestTopicsLanes(t *testing.T) {
	k := testenv.StartKafka(t, 1, nil)
	correct(t, k)
	create(t, k, "capper-lanes.push.urgent", 3, nil)
	create(t, k, "capper-lanes.email.marketing", 6, map[string]string{"retention.ms": "86400000"})
	create(t, k, "capper-lanes.push.urgent.retry", 6, nil)
	create(t, k, "capper-lanes.email.marketing.retry", 6, nil)
	kc := kafkaConfig(k.Addrs)
	kc.Topics.Lanes = "capper-lanes"
	set := pacedBudgets(t)

	named := topics.Named(kc, set)
	var lanes []string
	for _, tp := range named[len(named)-6:] {
		if tp.Kind != topics.Lane {
			t.Fatalf("%s: kind %v, want Lane", tp.Name, tp.Kind)
		}
		lanes = append(lanes, tp.Name+" "+tp.Key)
	}
	if want := []string{`capper-lanes.push.urgent budget "push" lane "urgent"`, `capper-lanes.push.urgent.retry budget "push" lane "urgent" retry`,
		`capper-lanes.push.bulk budget "push" lane "bulk"`, `capper-lanes.push.bulk.retry budget "push" lane "bulk" retry`,
		`capper-lanes.email.marketing budget "email" lane "marketing"`, `capper-lanes.email.marketing.retry budget "email" lane "marketing" retry`}; !slices.Equal(lanes, want) {
		t.Fatalf("lanes %q, want %q", lanes, want)
	}
	if n := len(topics.Named(kc, nil)); n != len(named)-6 {
		t.Fatalf("without budgets: %d topics, want %d", n, len(named)-6)
	}

	ctx := context.Background()
	r, err := topics.Check(ctx, admin(k), topics.CheckOptions{Kafka: kc, Budgets: set, Fix: "capper topics create --config capper.yaml --policy policy.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	_ = r.WriteText(&out)
	for name, want := range map[string]topics.State{"capper-lanes.push.urgent": topics.Wrong, "capper-lanes.push.bulk": topics.Missing,
		"capper-lanes.email.marketing": topics.Warn, "send-intents": topics.OK, "capper-lanes.push.urgent.retry": topics.OK,
		"capper-lanes.push.bulk.retry": topics.Missing} {
		if got := state(r, name); got != want {
			t.Errorf("%s: %s, want %s\n%s", name, got, want, out.String())
		}
	}
	for _, want := range []string{
		"3 partitions, the input send-intents has 6: lane topics must be co-partitioned with the input",
		"--alter --topic capper-lanes.push.urgent --partitions 6",
		"missing  capper-lanes.push.bulk              budget \"push\" lane \"bulk\"              create it: capper topics create --config capper.yaml --policy policy.yaml",
		"retention.ms is 86400000 (24h0m0s): held intents waiting longer",
		"--entity-name capper-lanes.email.marketing --add-config retention.ms=604800000",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("check's output lacks %q:\n%s", want, out.String())
		}
	}
	if err := r.Err(); err == nil || !strings.Contains(err.Error(), `3 topics missing or wrong: capper-lanes.push.urgent (budget "push" lane "urgent") wrong; capper-lanes.push.bulk (budget "push" lane "bulk") missing; capper-lanes.push.bulk.retry (budget "push" lane "bulk" retry) missing`) {
		t.Fatalf("Err: %v", err)
	}

	c, err := topics.Create(ctx, admin(k), topics.CreateOptions{Kafka: kc, Budgets: set, ReplicationFactor: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got := state(c, "capper-lanes.push.bulk"); got != topics.Created {
		t.Fatalf("create: push.bulk %s", got)
	}
	if got := state(c, "capper-lanes.push.bulk.retry"); got != topics.Created {
		t.Fatalf("create: push.bulk.retry %s", got)
	}
	if n := len(k.Cluster.PartitionInfos("capper-lanes.push.bulk")); n != 6 {
		t.Fatalf("push.bulk created with %d partitions, want the input's 6", n)
	}
	dc, err := client(k).DescribeConfigs(ctx, &kafka.DescribeConfigsRequest{Resources: []kafka.DescribeConfigRequestResource{
		{ResourceType: kafka.ResourceTypeTopic, ResourceName: "capper-lanes.push.bulk", ConfigNames: []string{"retention.ms", "cleanup.policy"}}}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range dc.Resources[0].ConfigEntries {
		got[e.ConfigName] = e.ConfigValue
	}
	if got["retention.ms"] != "604800000" || strings.Contains(got["cleanup.policy"], "compact") {
		t.Fatalf("push.bulk created with %v", got)
	}
	if want := (topics.Topic{Kind: topics.Lane}).Configs(); !maps.Equal(want, map[string]string{"retention.ms": "604800000"}) {
		t.Fatalf("a lane's configs: %v", want)
	}

	kc.Topics.Lanes = ""
	if _, err := topics.Check(ctx, admin(k), topics.CheckOptions{Kafka: kc, Budgets: set}); !errors.Is(err, topics.ErrNoLanes) || !strings.Contains(err.Error(), "kafka.topics.lanes is not set") {
		t.Fatalf("budgets without kafka.topics.lanes, check: %v", err)
	}
	if _, err := topics.Create(ctx, admin(k), topics.CreateOptions{Kafka: kc, Budgets: set}); !errors.Is(err, topics.ErrNoLanes) {
		t.Fatalf("budgets without kafka.topics.lanes, create: %v", err)
	}
	if _, err := topics.Check(ctx, admin(k), topics.CheckOptions{Kafka: kc}); err != nil {
		t.Fatalf("no budgets, no lanes: %v", err)
	}
}

// TestTopicsUserLimits: the user-limits topic is created compacted, with
// a week's tombstone retention; one that is not compacted is wrong, one
// also deleted and one whose tombstones go within the day are warned
// about.
func TestTopicsUserLimits(t *testing.T) {
	ctx := context.Background()
	cfg := func(k *testenv.Kafka) *config.Kafka {
		c := config.Default().Kafka
		c.Brokers = k.Addrs
		c.Topics.UserLimits = "capper-user-limits"
		return &c
	}
	finding := func(r topics.Report) topics.Finding {
		for _, f := range r.Findings {
			if f.Kind == topics.UserLimits {
				return f
			}
		}
		t.Fatalf("no user-limits topic in %v", r.Findings)
		return topics.Finding{}
	}
	k := testenv.StartKafka(t, 1, nil)
	r, err := topics.Create(ctx, admin(k), topics.CreateOptions{Kafka: cfg(k), Partitions: 3})
	if err != nil {
		t.Fatal(err)
	}
	if f := finding(r); f.State != topics.Created || f.Name != "capper-user-limits" {
		t.Fatalf("create: %+v", f)
	}
	if n := len(k.Cluster.PartitionInfos("capper-user-limits")); n != 3 {
		t.Errorf("created with %d partitions, want the input's 3", n)
	}
	if r, err = topics.Check(ctx, admin(k), topics.CheckOptions{Kafka: cfg(k), Fix: "x"}); err != nil {
		t.Fatal(err)
	}
	if f := finding(r); f.State != topics.OK || f.Note != "3 partitions, compacted" {
		t.Fatalf("check after create: %+v", f)
	}
	for _, c := range []struct {
		configs map[string]string
		state   topics.State
		says    string
	}{
		{nil, topics.Wrong, "cleanup.policy is delete, not compact"},
		{map[string]string{"cleanup.policy": "compact,delete"}, topics.Warn, "a user's state older than retention.ms leaves the topic"},
		{map[string]string{"cleanup.policy": "compact", "delete.retention.ms": "3600000"}, topics.Warn, "delete.retention.ms is 3600000 (1h0m0s)"},
	} {
		k := testenv.StartKafka(t, 1, []string{"send-intents"})
		create(t, k, "capper-user-limits", 2, c.configs)
		r, err := topics.Check(ctx, admin(k), topics.CheckOptions{Kafka: cfg(k), Fix: "x"})
		if err != nil {
			t.Fatal(err)
		}
		f := finding(r)
		if f.State != c.state || !strings.Contains(strings.Join(append(f.Problems, f.Warnings...), "\n"), c.says) {
			t.Errorf("%v: %s %v %v; want %s saying %q", c.configs, f.State, f.Problems, f.Warnings, c.state, c.says)
		}
	}
}
