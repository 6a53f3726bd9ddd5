package app

// `capper budgets list|show`: the send-pacing budgets of the policy in
// force (or of a policy file), how many intents wait in each lane and when
// they drain; and the policy whose budgets' lane topics `capper topics`
// covers.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/pacing"
	"github.com/capper-dev/capper/internal/topics"
)

// budgetsPolicy is the policy whose budgets a command shows or whose lane
// topics it covers: its version (a file's path) and budgets.
type budgetsPolicy struct {
	version string
	budgets *pacing.Set
}

// readBudgets reads the budgets of file (a policy document or a worker
// config, as `capper policy check` takes), or, without file, of the policy
// in force (cfg's policy.source, as the worker reads it).
func readBudgets(ctx context.Context, cfg *config.Config, file string, log *slog.Logger) (budgetsPolicy, error) {
	if file == "" {
		l, err := LoadPolicy(ctx, cfg, log)
		if err != nil {
			return budgetsPolicy{}, fmt.Errorf("the policy in force (or give one: --policy FILE): %w", err)
		}
		return budgetsPolicy{version: l.Version, budgets: l.Budgets}, nil
	}
	d, ps, err := config.ReadPolicy(file)
	if err != nil {
		return budgetsPolicy{}, configError{fmt.Errorf("--policy: %w", err)}
	}
	if len(ps) > 0 {
		return budgetsPolicy{}, configError{fmt.Errorf("--policy %s: %w (capper policy check lists them): %w", file, ErrPolicyProblems, ps.Err())}
	}
	set, _ := d.Pacing()
	return budgetsPolicy{version: file, budgets: set}, nil
}

// needLanes refuses budgets on a config without kafka.topics.lanes.
func (p budgetsPolicy) needLanes(cfg *config.Config) error {
	if p.budgets.Len() > 0 && cfg.Kafka.Topics.Lanes == "" {
		return configError{fmt.Errorf("policy %s: %w", p.version, topics.ErrNoLanes)}
	}
	return nil
}

// ErrUnknownBudget is wrapped by Budgets for a budget the policy lacks.
var ErrUnknownBudget = errors.New("no such budget")

// BudgetsOptions configures Budgets.
type BudgetsOptions struct {
	// ConfigPath is the config's file, named in the fix of a missing lane
	// topic.
	ConfigPath string
	// PolicyFile is a policy document (or worker config) to read the
	// budgets of, instead of the policy in force.
	PolicyFile string
	// Budget is the one budget to report ("": every budget).
	Budget string
}

// BudgetsReport is what `capper budgets` reports: the policy's budgets,
// each with the intents waiting in its lanes and when they drain.
type BudgetsReport struct {
	Policy  string // the policy's version (a --policy file: its path)
	Budgets []BudgetState
	// Workers are the versions the workers report running and refusing
	// (nil without: --policy, or WorkersErr).
	Workers    *WorkersPolicy
	WorkersErr error
	// EffectiveErr: Redis did not say the budgets' effective rates.
	EffectiveErr error
	fix          string // the command that creates missing lane topics
}

// BudgetState is a budget and what waits in it.
type BudgetState struct {
	pacing.Budget
	// LaneStates are Budget.Lanes, in precedence order, with what waits
	// in each.
	LaneStates []LaneState
	// Waiting is every lane's; DrainIn the time to release them all at
	// the effective rate (Rate when it is unknown).
	Waiting int64
	DrainIn time.Duration
	// Effective is its effective rate in Redis (nil: not read, for a
	// --policy file, or Redis did not answer).
	Effective *pacing.Effective
}

// LaneState is a lane and what waits in it.
type LaneState struct {
	pacing.Lane
	Topic   string
	Missing bool // the brokers lack its topic (nothing waits in it)
	// RetryMissing: the brokers lack its retry topic (a worker refuses
	// the policy).
	RetryMissing bool
	// Waiting are the records of its topic the delay group has not
	// committed: intents held, not yet released.
	Waiting int64
	// DrainIn is when this lane is empty, at the budget's rate with
	// nothing more arriving: lanes drain in precedence order, so it is the
	// time to release the intents of this lane and of every lane before.
	DrainIn time.Duration
}

// Budgets reads the budgets of the policy in force (or of o.PolicyFile)
// and, from the brokers, the intents waiting in each lane: the delay
// group's lag on the lane's topic (the Kafka room's Admin.Lags: records past
// its committed offset, or past the start of a partition with no commit;
// what the worker exports as capper_pacing_waiting; with the lane's retry
// topic). A missing lane or retry topic is in the report (Missing,
// RetryMissing), and in its Err.
func Budgets(ctx context.Context, cfg *config.Config, o BudgetsOptions, log *slog.Logger) (*BudgetsReport, error) {
	p, err := readBudgets(ctx, cfg, o.PolicyFile, log)
	if err != nil {
		return nil, err
	}
	if err := p.needLanes(cfg); err != nil {
		return nil, err
	}
	list := p.budgets.Budgets()
	if o.Budget != "" {
		b, ok := p.budgets.Budget(o.Budget)
		if !ok {
			return nil, unknownBudget(o.Budget, p)
		}
		list = []pacing.Budget{*b}
	}
	r := &BudgetsReport{Policy: p.version, fix: topicsCommand("create", o.ConfigPath, o.PolicyFile)}
	// The policy in force: what the workers report, and the budgets'
	// effective rates, from Redis (one client for both).
	var rdb redis.UniversalClient
	if o.PolicyFile == "" {
		c, err := NewRedisClient(cfg)
		if err != nil {
			r.WorkersErr, r.EffectiveErr = err, err
		} else {
			rdb = c
			defer c.Close()
			r.readWorkers(ctx, rdb, cfg)
		}
	}
	if len(list) == 0 {
		return r, nil
	}
	admin, err := topicsAdmin(cfg, log)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	prefix := cfg.Kafka.Topics.Lanes
	for _, b := range list {
		s := BudgetState{Budget: b}
		for _, l := range b.Lanes {
			ls := LaneState{Lane: l, Topic: pacing.Topic(prefix, b.Name, l.Name)}
			if ls.Waiting, ls.Missing, ls.RetryMissing, err = laneLag(ctx, admin, cfg.Kafka.DelayGroup(), prefix, b.Name, l.Name); err != nil {
				return nil, fmt.Errorf("budget %q lane %q: %w", b.Name, l.Name, err)
			}
			s.Waiting += ls.Waiting
			ls.DrainIn = drainTime(s.Waiting, b.Rate)
			s.LaneStates = append(s.LaneStates, ls)
		}
		s.DrainIn = drainTime(s.Waiting, b.Rate)
		r.Budgets = append(r.Budgets, s)
	}
	if rdb != nil {
		r.readEffective(ctx, rdb, cfg)
	}
	return r, nil
}

// unknownBudget names the budgets the policy has.
func unknownBudget(name string, p budgetsPolicy) error {
	var names []string
	for _, b := range p.budgets.Budgets() {
		names = append(names, b.Name)
	}
	if len(names) == 0 {
		return fmt.Errorf("budget %q: %w: policy %s has no budgets", name, ErrUnknownBudget, p.version)
	}
	return fmt.Errorf("budget %q: %w in policy %s; its budgets: %s", name, ErrUnknownBudget, p.version, strings.Join(names, ", "))
}

// drainTime is how long n releases take at rate a second.
func drainTime(n int64, rate float64) time.Duration {
	if n <= 0 || !(rate > 0) {
		return 0
	}
	return time.Duration(float64(n) / rate * float64(time.Second))
}

// Err names every missing lane topic (or retry topic) and the command
// that creates them,
// and a version the workers refused (nil: neither).
func (r *BudgetsReport) Err() error {
	return errors.Join(r.missingErr(), r.refusedErr())
}

func (r *BudgetsReport) missingErr() error {
	var missing []string
	for _, b := range r.Budgets {
		for _, l := range b.LaneStates {
			if l.Missing {
				missing = append(missing, fmt.Sprintf("%s (budget %q lane %q)", l.Topic, b.Name, l.Name))
			}
			if l.RetryMissing {
				missing = append(missing, fmt.Sprintf("%s (budget %q lane %q, its retry topic)", l.Topic+pacing.RetrySuffix, b.Name, l.Name))
			}
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("%d lane %s missing: %s; create %s: %s", len(missing), pluralize(len(missing), "topic"),
		strings.Join(missing, ", "), pluralize(len(missing), "it", "them"), r.fix)
}

// WriteList writes one line per budget: name, rate, burst, what it
// covers, the intents waiting in its lanes and when they drain; then the
// policy.
func (r *BudgetsReport) WriteList(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "budget\trate/s\teffective/s\tburst\tcovers\tlanes\twaiting\tdrains in")
	for i := range r.Budgets {
		b := &r.Budgets[i]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%d\t%s\n", b.Name, formatRate(b.Rate), effectiveColumn(b), b.Burst, b.Budget.Covers(), len(b.Lanes),
			b.Waiting, formatDrain(b.DrainIn))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%d %s in policy %s%s\n", len(r.Budgets), pluralize(len(r.Budgets), "budget"), r.Policy, r.policyMark())
	if line := r.workersLine(); line != "" && err == nil {
		_, err = fmt.Fprintln(w, line)
	}
	return err
}

// WriteShow writes the (one) budget, then a table of its lanes: name,
// the priorities it takes, topic, waiting, drains in.
func (r *BudgetsReport) WriteShow(w io.Writer) error {
	for i := range r.Budgets {
		b := &r.Budgets[i]
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "budget\t%s\n", b.Name)
		fmt.Fprintf(tw, "policy\t%s%s\n", r.Policy, r.policyMark())
		if line := r.workersLine(); line != "" {
			fmt.Fprintf(tw, "workers\t%s\n", strings.TrimPrefix(line, "workers: "))
		}
		fmt.Fprintf(tw, "rate\t%s/s, burst %d\n", formatRate(b.Rate), b.Burst)
		fmt.Fprintf(tw, "effective\t%s\n", r.effectiveText(b))
		fmt.Fprintf(tw, "covers\t%s\n", b.Budget.Covers())
		fmt.Fprintf(tw, "waiting\t%d, drains in %s\n", b.Waiting, formatDrain(b.DrainIn))
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "lane\ttakes\ttopic\twaiting\tdrains in")
		for i, l := range b.LaneStates {
			waiting, drain := strconv.FormatInt(l.Waiting, 10), formatDrain(l.DrainIn)
			switch {
			case l.Missing:
				waiting, drain = "topic missing", "-"
			case l.RetryMissing:
				waiting += " (retry topic missing)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", l.Name, takes(b.Lanes, i), l.Topic, waiting, drain)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// takes says which priorities lane i takes.
func takes(lanes []pacing.Lane, i int) string {
	switch {
	case i < len(lanes)-1:
		return lanes[i].MinPriority.String() + " and up"
	case len(lanes) == 1:
		return "every priority"
	}
	return "the rest"
}

func formatRate(r float64) string { return strconv.FormatFloat(r, 'f', -1, 64) }

// formatDrain writes a drain time to a useful precision: ms below a
// second, 0.1 s below a minute, s below an hour, else minutes.
func formatDrain(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	}
	return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
}

func pluralize(n int, one string, many ...string) string {
	switch {
	case n == 1:
		return one
	case len(many) > 0:
		return many[0]
	}
	return one + "s"
}

// budgetJSON is a budget in WriteJSON.
type budgetJSON struct {
	Name string  `json:"name"`
	Rate float64 `json:"rate"`
	// EffectiveRate: null when unknown; HeldSeconds: the Retry-After left.
	EffectiveRate *float64   `json:"effective_rate"`
	HeldSeconds   float64    `json:"held_seconds"`
	Burst         int        `json:"burst"`
	Channels      []string   `json:"channels"`
	Routes        []string   `json:"routes"`
	Waiting       int64      `json:"waiting"`
	DrainSeconds  float64    `json:"drain_seconds"`
	Lanes         []laneJSON `json:"lanes"`
}

// laneJSON is a lane in WriteJSON.
type laneJSON struct {
	Name         string  `json:"name"`
	MinPriority  int     `json:"min_priority"`
	Topic        string  `json:"topic"`
	Exists       bool    `json:"exists"`
	RetryExists  bool    `json:"retry_exists"`
	Waiting      int64   `json:"waiting"`
	DrainSeconds float64 `json:"drain_seconds"`
}

// WriteJSON writes one JSON document: {"policy", "workers", "budgets":
// [...]}, or, with one (show), {"policy", "workers", "budget": {...}}.
// workers (null with --policy, or when Redis did not answer): reporting
// (how many), in_use (workers by version), refused (by version: workers,
// error). A budget: name, rate, effective_rate (null: unknown),
// held_seconds (a Retry-After's rest), burst, channels and routes ([]: every one), waiting, drain_seconds, and
// its lanes in precedence order: name, min_priority (0-100; the last
// lane's 0), topic, exists, retry_exists (its retry topic), waiting,
// drain_seconds (of the lanes up to
// this one).
func (r *BudgetsReport) WriteJSON(w io.Writer, one bool) error {
	list := make([]budgetJSON, 0, len(r.Budgets))
	for _, b := range r.Budgets {
		j := budgetJSON{Name: b.Name, Rate: b.Rate, Burst: b.Burst, Channels: append([]string{}, b.Channels...),
			Routes: append([]string{}, b.Routes...), Waiting: b.Waiting, DrainSeconds: b.DrainIn.Seconds(), Lanes: []laneJSON{}}
		if e := b.Effective; e != nil {
			j.EffectiveRate, j.HeldSeconds = &e.Rate, e.HeldFor.Seconds()
		}
		for _, l := range b.LaneStates {
			j.Lanes = append(j.Lanes, laneJSON{Name: l.Name, MinPriority: int(l.MinPriority), Topic: l.Topic, Exists: !l.Missing, RetryExists: !l.RetryMissing,
				Waiting: l.Waiting, DrainSeconds: l.DrainIn.Seconds()})
		}
		list = append(list, j)
	}
	var doc any = struct {
		Policy  string       `json:"policy"`
		Workers *workersJSON `json:"workers"`
		Budgets []budgetJSON `json:"budgets"`
	}{r.Policy, r.workersDoc(), list}
	if one && len(list) == 1 {
		doc = struct {
			Policy  string       `json:"policy"`
			Workers *workersJSON `json:"workers"`
			Budget  budgetJSON   `json:"budget"`
		}{r.Policy, r.workersDoc(), list[0]}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}
