package segbuild

// Users listed in two segments: the policy that resolves them, and where a
// sampled conflict's first row was.

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// ConflictPolicy says what a build does with a user listed in two segments.
type ConflictPolicy int

const (
	// ConflictError fails the build, reporting the conflicts.
	ConflictError ConflictPolicy = iota
	// ConflictPriority keeps the user in the segment that comes first in
	// BuilderOptions.Segments.
	ConflictPriority
)

func (p ConflictPolicy) String() string {
	switch p {
	case ConflictError:
		return "error"
	case ConflictPriority:
		return "priority"
	}
	return fmt.Sprintf("ConflictPolicy(%d)", int(p))
}

// ParseConflictPolicy parses "error" or "priority".
func ParseConflictPolicy(s string) (ConflictPolicy, error) {
	switch s {
	case "error", "":
		return ConflictError, nil
	case "priority":
		return ConflictPriority, nil
	}
	return 0, fmt.Errorf("conflict policy %q: want error or priority", s)
}

// locateFirstOccurrences finds where each sampled conflict's user was first
// listed, by re-reading the inputs for those few ids only: keeping a position
// per user while streaming would cost memory per row. Inputs that cannot be
// re-read (stdin) are noted instead.
func (b *Builder) locateFirstOccurrences(ctx context.Context) {
	want := make(map[uint64]int, len(b.samples))
	for i, c := range b.samples {
		want[c.UserID] = i
	}
	var once []string
	for _, in := range b.inputs {
		if len(want) == 0 {
			break
		}
		if !in.Rereadable || in.Open == nil {
			once = append(once, in.Name)
			continue
		}
		_, err := scanInput(ctx, in, nil, func(id uint64, seg []byte, at Position, _ []byte) error {
			i, ok := want[id]
			if !ok || string(seg) != b.samples[i].First {
				return nil
			}
			b.samples[i].FirstAt = at
			delete(want, id)
			if len(want) == 0 {
				return errStopScan
			}
			return nil
		}, func(Position, []byte, string) error { return nil })
		if err != nil && !errors.Is(err, errStopScan) {
			b.log.Warn("re-reading input to locate conflicts", "input", in.Name, "err", err)
		}
	}
	for _, i := range want {
		switch {
		case len(once) == 1 && once[0] == stdinName:
			b.samples[i].FirstAt = Position{Source: stdinName}
			b.samples[i].FirstNote = "line not kept: stdin is read once"
		case len(once) > 0:
			b.samples[i].FirstAt = Position{Source: strings.Join(once, ", ")}
			b.samples[i].FirstNote = "line not kept: the input is read once"
		default:
			b.samples[i].FirstAt = Position{Source: "an input"}
			b.samples[i].FirstNote = "not found when re-reading the inputs: did they change during the build?"
		}
	}
}

var errStopScan = errors.New("stop scan")
