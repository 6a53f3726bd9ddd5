package app

// `capper campaign stop|pause|resume|list`: campaign control from the
// command line, through the worker's config (its Kafka settings and
// kafka.topics.control).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/control"
	"github.com/capper-dev/capper/internal/dispatch"
)

// CampaignChange is what `capper campaign stop|pause|resume` asks.
type CampaignChange struct {
	Campaign string // empty with All
	All      bool   // the incident switch: every intent not of an exempt category
	State    control.State
	Reason   string
	By       string
	// SendBy sets the campaign's send-by; ClearSendBy removes it; neither
	// keeps the one it has.
	SendBy      time.Time
	ClearSendBy bool
	Now         time.Time // zero: time.Now
}

// CampaignWritten is what a change wrote: the record, where, and the
// state it replaced (nil: none).
type CampaignWritten struct {
	Record   *control.Record
	Position control.Position
	Previous *control.Entry
}

// controlState reads the control topic to its end, as a worker does at
// start (the same follower, here until caught up).
func controlState(ctx context.Context, cfg *config.Config, log *slog.Logger) (*control.Snapshot, error) {
	topic := cfg.Kafka.Topics.Control
	if topic == "" {
		return nil, configError{errors.New("kafka.topics.control is not set: campaign control is off in this config")}
	}
	kopts, err := kafkaOptions(cfg, log)
	if err != nil {
		return nil, err
	}
	src, err := dispatch.NewControlSource(kopts, topic)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	// A command prints one line for the malformed records it skipped, not
	// the follower's line per record (the workers log those).
	reg := prometheus.NewRegistry()
	f := control.NewFollower(control.FollowerOptions{Source: src, Topic: topic, Registerer: reg,
		Logger: slog.New(quietRecords{log.Handler()})})
	ctx, cancel := context.WithTimeout(ctx, kopts.WriteTimeout+10*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() { _ = f.Run(ctx); close(done) }()
	err = f.Wait(ctx)
	cancel()
	<-done
	if err != nil {
		return nil, fmt.Errorf("read the control topic %s to its end: %w", topic, err)
	}
	if n := malformedRecords(reg); n > 0 {
		log.Warn(fmt.Sprintf("%d records of the control topic %s are not control records and were skipped: their keys keep their previous state (the workers log each)", n, topic))
	}
	return f.Load(), nil
}

// quietRecords turns the follower's error per skipped record into a debug
// line.
type quietRecords struct{ slog.Handler }

func (h quietRecords) Enabled(ctx context.Context, l slog.Level) bool {
	if l >= slog.LevelError {
		l = slog.LevelDebug
	}
	return h.Handler.Enabled(ctx, l)
}

func (h quietRecords) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError {
		r.Level = slog.LevelDebug
	}
	return h.Handler.Handle(ctx, r)
}

func (h quietRecords) WithAttrs(as []slog.Attr) slog.Handler {
	return quietRecords{h.Handler.WithAttrs(as)}
}
func (h quietRecords) WithGroup(g string) slog.Handler { return quietRecords{h.Handler.WithGroup(g)} }

// malformedRecords is capper_control_malformed_records_total of reg.
func malformedRecords(reg *prometheus.Registry) int {
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "capper_control_malformed_records_total" {
			for _, m := range mf.GetMetric() {
				return int(m.GetCounter().GetValue())
			}
		}
	}
	return 0
}

// SetCampaign writes a campaign's (or the switch's) new state, with
// acks=all: the record's since carries over when the state stays the same,
// and so does the send-by unless the change sets or clears it. Bad input
// is refused before anything is written, naming the field.
func SetCampaign(ctx context.Context, cfg *config.Config, c CampaignChange, log *slog.Logger) (*CampaignWritten, error) {
	now := c.Now
	if now.IsZero() {
		now = time.Now()
	}
	r := &control.Record{Campaign: c.Campaign, All: c.All, State: c.State, Reason: strings.TrimSpace(c.Reason), By: c.By,
		At: now.UTC(), Since: now.UTC()}
	if !c.SendBy.IsZero() {
		r.SendBy = c.SendBy.UTC()
	}
	// The checks that need no broker first: bad input writes nothing.
	if err := r.Check(); err != nil {
		return nil, configError{err}
	}
	snap, err := controlState(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	prev := snap.Campaign(c.Campaign)
	if c.All {
		prev = snap.All()
	}
	if prev != nil {
		if prev.State == r.State {
			r.Since = prev.Since
		}
		if c.SendBy.IsZero() && !c.ClearSendBy {
			r.SendBy = prev.SendBy
		}
	}
	kopts, err := kafkaOptions(cfg, log)
	if err != nil {
		return nil, err
	}
	pos, err := dispatch.WriteControl(ctx, kopts, cfg.Kafka.Topics.Control, r)
	if err != nil {
		return nil, err
	}
	return &CampaignWritten{Record: r, Position: pos, Previous: prev}, nil
}

// WriteText says what was written, for a person.
func (w *CampaignWritten) WriteText(out io.Writer) error {
	r := w.Record
	what := fmt.Sprintf("campaign %q", r.Campaign)
	if r.All {
		what = "every intent (but exempt categories)"
	}
	was := "active (no record)"
	if w.Previous != nil {
		was = w.Previous.State.String() + " since " + w.Previous.Since.Format(time.RFC3339)
	}
	fmt.Fprintf(out, "%s: %s (was %s)\n", what, r.State, was)
	if r.Reason != "" {
		fmt.Fprintf(out, "reason: %s\n", r.Reason)
	}
	if r.By != "" {
		fmt.Fprintf(out, "by: %s\n", r.By)
	}
	if !r.SendBy.IsZero() {
		fmt.Fprintf(out, "send by: %s\n", r.SendBy.Format(time.RFC3339))
	}
	_, err := fmt.Fprintf(out, "written at %s to %s (acknowledged by every in-sync replica); workers apply it within seconds\n",
		r.At.Format(time.RFC3339), w.Position)
	return err
}

// CampaignList is every campaign with a control record.
type CampaignList struct {
	Entries []*control.Entry // campaigns by id, the switch first
}

// ListCampaigns reads the control topic to its end.
func ListCampaigns(ctx context.Context, cfg *config.Config, log *slog.Logger) (*CampaignList, error) {
	snap, err := controlState(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	l := &CampaignList{Entries: snap.Campaigns()}
	slices.SortFunc(l.Entries, func(a, b *control.Entry) int { return strings.Compare(a.Campaign, b.Campaign) })
	if a := snap.All(); a != nil {
		l.Entries = append([]*control.Entry{a}, l.Entries...)
	}
	return l, nil
}

// WriteTable prints one campaign a line.
func (l *CampaignList) WriteTable(out io.Writer) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "campaign\tstate\tsince\tsend by\tby\tat\treason\trecord")
	for _, e := range l.Entries {
		name := e.Campaign
		if e.All {
			name = "(all)"
		}
		sendBy := "-"
		if !e.SendBy.IsZero() {
			sendBy = e.SendBy.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, e.State, e.Since.Format(time.RFC3339), sendBy,
			orDash(e.By), e.At.Format(time.RFC3339), orDash(e.Reason), e.Pos)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(out, "%d campaigns with a record\n", len(l.Entries))
	return err
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// CampaignJSON is one campaign in `capper campaign list -o json`.
type CampaignJSON struct {
	Campaign string     `json:"campaign,omitempty"`
	All      bool       `json:"all,omitempty"`
	State    string     `json:"state"`
	Since    time.Time  `json:"since"`
	SendBy   *time.Time `json:"send_by,omitempty"`
	By       string     `json:"by,omitempty"`
	At       time.Time  `json:"at"`
	Reason   string     `json:"reason,omitempty"`
	Record   string     `json:"record"`
}

// WriteJSON prints the list as one JSON array.
func (l *CampaignList) WriteJSON(out io.Writer) error {
	list := make([]CampaignJSON, 0, len(l.Entries))
	for _, e := range l.Entries {
		j := CampaignJSON{Campaign: e.Campaign, All: e.All, State: e.State.String(), Since: e.Since, By: e.By, At: e.At,
			Reason: e.Reason, Record: e.Pos.String()}
		if !e.SendBy.IsZero() {
			t := e.SendBy
			j.SendBy = &t
		}
		list = append(list, j)
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(list)
}
