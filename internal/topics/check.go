package topics

// Check: what the brokers have of each topic the config (and its policy's
// budgets) names, and what is wrong with it, each problem with its fix.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/pacing"
)

// State is a topic's verdict.
type State string

const (
	OK      State = "ok"
	Warn    State = "warn"    // usable, with a setting to change
	Missing State = "missing" // the brokers do not have it
	Wrong   State = "wrong"   // capper must not run on it as it is
	// Created and WouldCreate are Create's: created now, or with --dry-run.
	Created     State = "created"
	WouldCreate State = "would create"
)

// Finding is one topic and what Check (or Create) found.
type Finding struct {
	Topic
	State      State
	Partitions int      // what the brokers have (0: missing)
	Problems   []string // Wrong: what is wrong, each with its fix
	Warnings   []string
	Note       string // what it is, or what Create did
}

// Report is every topic of a config, in the config's order (Named's).
type Report struct {
	Findings []Finding
}

// CheckOptions configures Check.
type CheckOptions struct {
	Kafka *config.Kafka
	// Budgets are the policy's: their lane topics are checked too (nil:
	// none). Budgets need Kafka.Topics.Lanes (ErrNoLanes).
	Budgets *pacing.Set
	// Fix is the command that creates what is missing, named in the
	// findings (e.g. "capper topics create --config capper.yaml").
	Fix string
}

// Check asks the brokers for every topic the config and the budgets name
// and says what is missing or wrong with each; it changes nothing. An
// error is one asking the brokers (or ErrNoLanes), not a wrong topic (see
// Report.Err).
func Check(ctx context.Context, c Admin, o CheckOptions) (Report, error) {
	if err := lanesNamed(o.Kafka, o.Budgets); err != nil {
		return Report{}, err
	}
	named := Named(o.Kafka, o.Budgets)
	have, err := describe(ctx, c, named)
	if err != nil {
		return Report{}, err
	}
	input := have[o.Kafka.Topics.Input].partitions
	var r Report
	for _, t := range named {
		r.Findings = append(r.Findings, verdict(t, have[t.Name], input, o))
	}
	return r, nil
}

// lanesNamed refuses budgets without kafka.topics.lanes.
func lanesNamed(k *config.Kafka, budgets *pacing.Set) error {
	if budgets.Len() > 0 && k.Topics.Lanes == "" {
		return ErrNoLanes
	}
	return nil
}

// broker is what the brokers have of a topic.
type broker struct {
	exists     bool
	partitions int
	configs    map[string]string
	configsErr error // the configs could not be read
}

// describe reads the topics' partitions and configs.
func describe(ctx context.Context, c Admin, named []Topic) (map[string]broker, error) {
	names := make([]string, len(named))
	for i, t := range named {
		names[i] = t.Name
	}
	states, err := c.DescribeTopics(ctx, names)
	if err != nil {
		return nil, err
	}
	have := map[string]broker{}
	for name, st := range states {
		have[name] = broker{exists: true, partitions: st.Partitions, configs: st.Configs, configsErr: st.ConfigsErr}
	}
	return have, nil
}

// verdict is what is wrong with t, which the brokers have as b, the input
// having input partitions (0: missing).
func verdict(t Topic, b broker, input int, o CheckOptions) Finding {
	f := Finding{Topic: t, Partitions: b.partitions}
	if !b.exists {
		f.State, f.Note = Missing, "create it: "+o.Fix
		return f
	}
	brokers := "BROKER"
	if len(o.Kafka.Brokers) > 0 {
		brokers = o.Kafka.Brokers[0]
	}
	setConfig := func(kv string) string {
		return fmt.Sprintf("kafka-configs.sh --bootstrap-server %s --alter --entity-type topics --entity-name %s --add-config %s", brokers, t.Name, kv)
	}
	if b.configsErr != nil {
		f.Warnings = append(f.Warnings, fmt.Sprintf("its configs were not checked: %v (allow DescribeConfigs on the topic)", b.configsErr))
	}
	policy, compact, del := cleanup(b.configs)
	switch {
	case b.configsErr != nil:
		f.Note = fmt.Sprintf("%d %s", b.partitions, plural(b.partitions, "partition"))
	case t.Kind == Control:
		switch {
		case !compact:
			f.Problems = append(f.Problems, fmt.Sprintf("cleanup.policy is %s, not compact: the control topic must be compacted, or its states (a stop) are deleted with its old records; set it: %s", policy, setConfig("cleanup.policy=compact")))
		case del:
			f.Problems = append(f.Problems, fmt.Sprintf("cleanup.policy is %s: delete also removes records older than retention.ms, a stop among them; set it: %s", policy, setConfig("cleanup.policy=compact")))
		}
		if compact {
			lag, ok := durationMs(b.configs["min.compaction.lag.ms"])
			if !ok {
				lag = 0 // Kafka's default
			}
			if lag < MinControlCompactionLag {
				f.Warnings = append(f.Warnings, fmt.Sprintf("min.compaction.lag.ms is %d (%s): a worker re-asserts a state after a foreign record under its key, and compaction may erase the state first; set it to %s (7 days): %s",
					lag.Milliseconds(), lag, ms(ControlCompactionLag), setConfig("min.compaction.lag.ms="+ms(ControlCompactionLag))))
			}
		}
		f.Note = fmt.Sprintf("%d %s, compacted", b.partitions, plural(b.partitions, "partition"))
	case t.Kind == UserLimits:
		switch {
		case !compact:
			f.Problems = append(f.Problems, fmt.Sprintf("cleanup.policy is %s, not compact: a user's latest record is their state, and only compaction takes an erased user's earlier records out of the log; set it: %s", policy, setConfig("cleanup.policy=compact")))
		case del:
			f.Warnings = append(f.Warnings, fmt.Sprintf("cleanup.policy is %s: a user's state older than retention.ms leaves the topic (Redis keeps it, but a group that reads the topic again would not see it); set it: %s", policy, setConfig("cleanup.policy=compact")))
		}
		if compact {
			if ret, ok := durationMs(b.configs["delete.retention.ms"]); ok && ret >= 0 && ret < MinUserLimitsTombstones {
				f.Warnings = append(f.Warnings, fmt.Sprintf("delete.retention.ms is %d (%s): a tombstone (an erased user) is removed that long after compaction, and workers stopped longer than that never apply it; set it to %s (7 days): %s",
					ret.Milliseconds(), ret, ms(UserLimitsTombstones), setConfig("delete.retention.ms="+ms(UserLimitsTombstones))))
			}
		}
		f.Note = fmt.Sprintf("%d %s, compacted", b.partitions, plural(b.partitions, "partition"))
	default:
		if compact {
			f.Problems = append(f.Problems, fmt.Sprintf("cleanup.policy is %s: its records are keyed by user, and compaction keeps only a user's latest; set it: %s", policy, setConfig("cleanup.policy=delete")))
		}
		f.Note = fmt.Sprintf("%d %s", b.partitions, plural(b.partitions, "partition"))
	}
	if (t.Kind == Tier || t.Kind == Lane || t.Kind == Parked) && input > 0 && b.partitions < input {
		what := map[Kind]string{Tier: "delay tiers", Lane: "lane topics", Parked: "the parked topic"}[t.Kind]
		f.Problems = append(f.Problems, fmt.Sprintf("%d %s, the input %s has %d: %s must be co-partitioned with the input (at least as many partitions); give it %d: kafka-topics.sh --bootstrap-server %s --alter --topic %s --partitions %d (or recreate it)",
			b.partitions, plural(b.partitions, "partition"), o.Kafka.Topics.Input, input, what, input, brokers, t.Name, input))
	}
	retention(&f, t, b, setConfig)
	switch {
	case len(f.Problems) > 0:
		f.State = Wrong
	case len(f.Warnings) > 0:
		f.State = Warn
	default:
		f.State = OK
	}
	return f
}

// cleanup is a topic's cleanup.policy (Kafka's default when unset) and
// whether it compacts and deletes.
func cleanup(configs map[string]string) (policy string, compact, del bool) {
	policy = configs["cleanup.policy"]
	if policy == "" {
		policy = "delete" // Kafka's default
	}
	for _, p := range strings.Split(policy, ",") {
		compact = compact || strings.TrimSpace(p) == "compact"
		del = del || strings.TrimSpace(p) == "delete"
	}
	return policy, compact, del
}

// retention checks the retention of a lane (a warning below LaneRetention)
// and of a delay tier (above its delay, with TierRetentionMargin).
func retention(f *Finding, t Topic, b broker, setConfig func(kv string) string) {
	if b.configsErr != nil {
		return
	}
	if t.Kind == Parked {
		if ret, ok := durationMs(b.configs["retention.ms"]); ok && ret >= 0 && ret < ParkedRetention {
			f.Warnings = append(f.Warnings, fmt.Sprintf("retention.ms is %d (%s): intents parked for a pause longer than that (control.max_pause is up to 7 days) are lost; set it to %s (8 days) or more: %s",
				ret.Milliseconds(), ret, ms(ParkedRetention), setConfig("retention.ms="+ms(ParkedRetention))))
		}
	}
	if t.Kind == Lane {
		if ret, ok := durationMs(b.configs["retention.ms"]); ok && ret >= 0 && ret < LaneRetention {
			f.Warnings = append(f.Warnings, fmt.Sprintf("retention.ms is %d (%s): held intents waiting longer (a budget below its traffic, workers stopped) are lost; set it to %s (7 days) or more: %s",
				ret.Milliseconds(), ret, ms(LaneRetention), setConfig("retention.ms="+ms(LaneRetention))))
		}
	}
	if t.Kind == Tier {
		if ret, ok := durationMs(b.configs["retention.ms"]); ok && ret >= 0 {
			want := ms(max(MinTierRetention, t.Delay+TierRetentionMargin))
			switch {
			case ret <= t.Delay:
				f.Problems = append(f.Problems, fmt.Sprintf("retention.ms is %d (%s), not above the tier's delay %s: deferred intents are deleted before they are due; set it: %s",
					ret.Milliseconds(), ret, t.Delay, setConfig("retention.ms="+want)))
			case ret < t.Delay+TierRetentionMargin:
				f.Warnings = append(f.Warnings, fmt.Sprintf("retention.ms is %d (%s): deferred intents waiting in it are lost when the workers are stopped longer than %s; set it: %s",
					ret.Milliseconds(), ret, ret-t.Delay, setConfig("retention.ms="+want)))
			}
		}
	}
}

// durationMs reads a config value in milliseconds (-1 stays -1 ms).
func durationMs(v string) (time.Duration, bool) {
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil {
		return 0, false
	}
	return time.Duration(n) * time.Millisecond, true
}

func plural(n int, s string) string {
	if n == 1 {
		return s
	}
	return s + "s"
}

// Wrong is every finding of state Wrong.
func (r Report) Wrong() []Finding { return r.with(Wrong) }

func (r Report) with(states ...State) []Finding {
	var out []Finding
	for _, f := range r.Findings {
		for _, s := range states {
			if f.State == s {
				out = append(out, f)
			}
		}
	}
	return out
}

// ErrTopics is wrapped by Report.Err.
var ErrTopics = errors.New("topics missing or wrong")

// Err names every missing or wrong topic (nil: none).
func (r Report) Err() error {
	bad := r.with(Missing, Wrong)
	if len(bad) == 0 {
		return nil
	}
	parts := make([]string, len(bad))
	for i, f := range bad {
		parts[i] = fmt.Sprintf("%s (%s) %s", f.Name, f.Key, f.State)
	}
	return fmt.Errorf("%d %w: %s", len(bad), ErrTopics, strings.Join(parts, "; "))
}

// WriteText writes one line per topic: its state, name, config key, and
// what it has, or what is wrong with it and the fix.
func (r Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, f := range r.Findings {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.State, f.Name, f.Key, f.line())
	}
	return tw.Flush()
}

// findingJSON is a finding in WriteJSON.
type findingJSON struct {
	Topic      string   `json:"topic"`
	Key        string   `json:"key"`
	State      State    `json:"state"`
	Partitions int      `json:"partitions"`
	Problems   []string `json:"problems"`
	Warnings   []string `json:"warnings"`
	Note       string   `json:"note,omitempty"`
}

// WriteJSON writes the findings as one JSON array, in the config's order:
// topic, key, state, partitions (0: missing), problems and warnings (each
// with its fix; [] for none), note.
func (r Report) WriteJSON(w io.Writer) error {
	out := make([]findingJSON, len(r.Findings))
	for i, f := range r.Findings {
		out[i] = findingJSON{Topic: f.Name, Key: f.Key, State: f.State, Partitions: f.Partitions,
			Problems: append([]string{}, f.Problems...), Warnings: append([]string{}, f.Warnings...), Note: f.Note}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// line is a finding's last column.
func (f Finding) line() string {
	msgs := append(append([]string(nil), f.Problems...), f.Warnings...)
	if len(msgs) == 0 {
		return f.Note
	}
	return strings.Join(msgs, "; ")
}
