// Package plans owns campaign plans: a campaign that will send later
// announces its priority, its send window, its message and its audience (a
// roaring bitmap of user ids, built like a segment), so that workers hold
// its slots against intents of a lower priority (capping.Planned). Plans
// are published to a plan store (a directory or S3: store.go), and workers
// poll it and swap the active set in (watcher.go).
package plans

// A plan as its author writes it, and its checks.

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/problems"
	"github.com/capper-dev/capper/internal/yamldoc"
)

// Spec is a plan as its author writes it (plan.yaml).
type Spec struct {
	// Campaign is the campaign id its intents carry: they are not held by
	// its own bookings.
	Campaign string `yaml:"campaign"`
	// Priority is low, normal, high or a number from 0 to 100: intents of
	// a lower priority cannot take the slots it books.
	Priority string `yaml:"priority"`
	// Starts and Ends bound when it sends (RFC 3339); past Ends it is
	// inactive.
	Starts time.Time `yaml:"starts"`
	Ends   time.Time `yaml:"ends"`
	// Message is what limits' where look at.
	Message Message `yaml:"message"`
	// Audience lists where its users come from: files of user ids, one per
	// line (gzip read transparently), local paths or s3://bucket/key.
	Audience []string `yaml:"audience"`
}

// Message is a plan's message, as limits' where see it.
type Message struct {
	Channel  string   `yaml:"channel" json:"channel"`
	Category string   `yaml:"category,omitempty" json:"category"`
	Tags     []string `yaml:"tags,omitempty" json:"tags,omitempty"`
}

// MaxCampaign bounds a campaign id, as the event contract does.
const MaxCampaign = 256

// ParseSpec reads a plan file strictly (an unknown key names its line).
func ParseSpec(data []byte) (*Spec, error) {
	var s Spec
	if err := yamldoc.Decode(data, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// Check reports every problem of the plan against the policy's vocabulary
// (channels, categories; the default category fills an empty one), each
// at its key, and returns its priority.
func (s *Spec) Check(rules capping.Rules) (capping.Priority, problems.List) {
	var ps problems.List
	if s.Campaign == "" || len(s.Campaign) > MaxCampaign {
		ps.Add(problems.Key("campaign"), "must be 1 to %d bytes, got %d", MaxCampaign, len(s.Campaign))
	}
	prio, err := capping.ParsePriority(s.Priority)
	if err != nil {
		ps.Add(problems.Key("priority"), "%v", err)
	}
	switch {
	case s.Starts.IsZero():
		ps.Add(problems.Key("starts"), "is required (RFC 3339, e.g. 2026-11-24T18:00:00Z)")
	case s.Ends.IsZero():
		ps.Add(problems.Key("ends"), "is required (RFC 3339, e.g. 2026-11-24T20:00:00Z)")
	case !s.Ends.After(s.Starts):
		ps.Add(problems.Key("ends"), "%s is not after starts (%s): the window would be empty",
			s.Ends.Format(time.RFC3339), s.Starts.Format(time.RFC3339))
	}
	m := &s.Message
	if !slices.Contains(rules.Channels, m.Channel) {
		ps.Add(problems.Key("message.channel"), "%q is not one of the policy's channels (%s)", m.Channel, strings.Join(rules.Channels, ", "))
	}
	if m.Category == "" {
		m.Category = rules.DefaultCategory
	}
	switch {
	case !slices.Contains(rules.Categories, m.Category):
		ps.Add(problems.Key("message.category"), "%q is not one of the policy's categories (%s)", m.Category, strings.Join(rules.Categories, ", "))
	case rules.IsExempt(m.Category):
		ps.Add(problems.Key("message.category"), "%q is exempt: no limit counts it, a plan would book nothing", m.Category)
	}
	if len(m.Tags) > capping.MaxTags {
		ps.Add(problems.Key("message.tags"), "%d tags, at most %d", len(m.Tags), capping.MaxTags)
	}
	for i, t := range m.Tags {
		if !capping.ValidTag(t) {
			ps.Add(problems.Key("message.tags").Index(i), "%q must be 1 to %d bytes of printable characters", t, capping.MaxTagBytes)
		}
	}
	if len(s.Audience) == 0 {
		ps.Add(problems.Key("audience"), "is required: files of user ids, one per line")
	}
	return prio, ps
}

// AudienceFrom is the audience's inputs, a relative path taken from dir
// (the plan file's directory).
func (s *Spec) AudienceFrom(dir string) []string {
	out := make([]string, len(s.Audience))
	for i, a := range s.Audience {
		if a != "-" && !strings.Contains(a, "://") && !filepath.IsAbs(a) {
			a = filepath.Join(dir, a)
		}
		out[i] = a
	}
	return out
}

// String names a plan in messages.
func (m *Manifest) String() string {
	return fmt.Sprintf("plan %s of campaign %q", m.Version, m.Campaign)
}
