package segbuild

// The Builder: rows in, one bitmap per segment, exclusivity enforced.

import (
	"github.com/capper-dev/capper/internal/segments"

	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"time"

	"github.com/capper-dev/capper/internal/clip"
)

// MaxConflictSamples is how many conflicts a failed build reports in detail.
const MaxConflictSamples = 10

// BuilderOptions configures a Builder.
type BuilderOptions struct {
	// Segments, when set, is the complete list of segments in priority order
	// (the config's order): other names are errors, and every one of them is
	// in the snapshot, empty or not. Without it, any valid name is accepted
	// and the snapshot lists segments by name.
	Segments []string
	// OnConflict is ConflictError (default) or ConflictPriority, which needs
	// Segments for the order.
	OnConflict ConflictPolicy
	// MaxErrors is how many malformed lines are tolerated (and listed)
	// before the build fails. Default 0.
	MaxErrors int
	// Logger gets warnings (e.g. large bitmaps); nil discards.
	Logger *slog.Logger
	// Progress, when set, is called from ReadInput every 65536 rows and at
	// the end of each input.
	Progress func(Progress)
}

// Progress is how far the reading has got, over all inputs so far.
type Progress struct {
	Bytes int64 // bytes read from the sources (compressed bytes for .gz)
	Rows  int64 // lines read
}

// Validate checks the options on their own (usage errors).
func (o BuilderOptions) Validate() error {
	seen := make(map[string]bool, len(o.Segments))
	for _, s := range o.Segments {
		if err := segments.ValidateSegmentName(s); err != nil {
			return err
		}
		if seen[s] {
			return fmt.Errorf("segment %q is listed twice", s)
		}
		seen[s] = true
	}
	switch o.OnConflict {
	case ConflictError:
	case ConflictPriority:
		if len(o.Segments) == 0 {
			return errors.New("the priority conflict policy needs the segment order (the config's segments)")
		}
	default:
		return fmt.Errorf("unknown conflict policy %d", int(o.OnConflict))
	}
	if o.MaxErrors < 0 {
		return fmt.Errorf("max errors %d is negative", o.MaxErrors)
	}
	return nil
}

// Builder collects (user, segment) rows into one bitmap per segment. Memory
// is bounded by the bitmaps, not by the number of rows. It is not safe for
// concurrent use.
type Builder struct {
	opts    BuilderOptions
	optsErr error
	log     *slog.Logger

	index map[string]int // name -> segs index
	segs  []*buildSegment
	wide  bool  // ids above 2^32-1 seen: all sets are roaring64
	all   idSet // every user added, to find repeats with one operation

	conflicted idSet // users seen in two segments
	samples    []Conflict
	rows       int64
	dups       uint64
	conflicts  uint64
	resolved   uint64
	badCount   int
	bad        []BadLine

	inputs    []Input
	bytesDone int64
	finished  bool
}

type buildSegment struct {
	name string
	ids  idSet
}

// NewBuilder returns a builder. Invalid options (see BuilderOptions.Validate)
// make every later call return the error.
func NewBuilder(opts BuilderOptions) *Builder {
	b := &Builder{
		opts:       opts,
		optsErr:    opts.Validate(),
		log:        opts.Logger,
		index:      make(map[string]int),
		all:        newSet32(),
		conflicted: newSet32(),
	}
	if b.log == nil {
		b.log = slog.New(slog.DiscardHandler)
	}
	for _, name := range opts.Segments {
		b.addSegment(name)
	}
	return b
}

func (b *Builder) addSegment(name string) int {
	var ids idSet = newSet32()
	if b.wide {
		ids = ids.widen()
	}
	b.segs = append(b.segs, &buildSegment{name: name, ids: ids})
	b.index[name] = len(b.segs) - 1
	return len(b.segs) - 1
}

// Add puts userID in segment. It returns an error only when the build must
// stop: an unknown segment (with BuilderOptions.Segments), or more bad rows
// than MaxErrors (an invalid segment name is a bad row). Conflicts are
// collected and reported by Finish.
func (b *Builder) Add(userID uint64, segment string, at Position) error {
	if b.optsErr != nil {
		return b.optsErr
	}
	b.rows++
	idx, ok := b.index[segment]
	if !ok {
		var err error
		if idx, err = b.segmentIndex([]byte(segment), at, []byte(segment)); err != nil || idx < 0 {
			return err
		}
	}
	b.add(userID, idx, at)
	return nil
}

// segmentIndex finds or registers a segment. idx < 0 with a nil error means
// the row was bad but tolerated.
func (b *Builder) segmentIndex(name []byte, at Position, line []byte) (int, error) {
	if i, ok := b.index[string(name)]; ok { // no allocation for the lookup
		return i, nil
	}
	s := string(name)
	if err := segments.ValidateSegmentName(s); err != nil {
		if len(s) == 0 {
			err = errors.New("segment is empty")
		}
		return -1, b.badLine(at, line, err.Error())
	}
	if len(b.opts.Segments) > 0 {
		return -1, &UnknownSegmentError{Name: s, At: at, Known: b.opts.Segments}
	}
	return b.addSegment(s), nil
}

// add is the per-row hot path.
func (b *Builder) add(id uint64, idx int, at Position) {
	if id > math.MaxUint32 && !b.wide {
		b.widen()
	}
	if b.all.checkedAdd(id) {
		b.segs[idx].ids.add(id)
		return
	}
	holder := b.holder(id)
	if holder == idx {
		b.dups++
		return
	}
	newConflict := b.conflicted.checkedAdd(id)
	switch b.opts.OnConflict {
	case ConflictPriority:
		if newConflict {
			b.resolved++
		}
		// Segments were registered in priority order, so a lower index
		// wins. The outcome is the best segment over all of the user's
		// rows, whatever their order.
		if idx < holder {
			b.segs[holder].ids.remove(id)
			b.segs[idx].ids.add(id)
		}
	default:
		if newConflict {
			b.conflicts++
			if len(b.samples) < MaxConflictSamples {
				b.samples = append(b.samples, Conflict{UserID: id, First: b.segs[holder].name, Second: b.segs[idx].name, SecondAt: at})
			}
		}
	}
}

func (b *Builder) holder(id uint64) int {
	for i, s := range b.segs {
		if s.ids.contains(id) {
			return i
		}
	}
	return -1 // not reached: every id in all is in a segment
}

func (b *Builder) widen() {
	b.wide = true
	b.all = b.all.widen()
	b.conflicted = b.conflicted.widen()
	for _, s := range b.segs {
		s.ids = s.ids.widen()
	}
}

// badLine records a malformed line; the error is non-nil once there are more
// than MaxErrors.
func (b *Builder) badLine(at Position, line []byte, reason string) error {
	b.badCount++
	b.bad = append(b.bad, BadLine{At: at, Reason: reason, Content: clip.String(string(line), 80)})
	if b.badCount > b.opts.MaxErrors {
		return &BadInputError{MaxErrors: b.opts.MaxErrors, Lines: b.bad}
	}
	return nil
}

// ReadInput streams one input into the builder. It returns an error for a
// read failure, an unknown segment or too many bad lines; conflicts are
// reported by Finish.
func (b *Builder) ReadInput(ctx context.Context, in Input) error {
	if b.optsErr != nil {
		return b.optsErr
	}
	if b.finished {
		return errors.New("builder: ReadInput after Finish")
	}
	b.inputs = append(b.inputs, in)
	progress := func(bytes int64) {
		if b.opts.Progress != nil {
			b.opts.Progress(Progress{Bytes: b.bytesDone + bytes, Rows: b.rows})
		}
	}
	n, err := scanInput(ctx, in, progress, func(id uint64, seg []byte, at Position, line []byte) error {
		b.rows++
		idx, err := b.segmentIndex(seg, at, line)
		if err != nil || idx < 0 {
			return err
		}
		b.add(id, idx, at)
		return nil
	}, func(at Position, line []byte, reason string) error {
		b.rows++
		return b.badLine(at, line, reason)
	})
	b.bytesDone += n
	progress(0)
	return err
}

// Finish ends the build: it fails with a *ConflictsError when users are in two
// segments (ConflictError policy), then serializes each segment.
func (b *Builder) Finish(ctx context.Context) (*Build, error) {
	if b.optsErr != nil {
		return nil, b.optsErr
	}
	b.finished = true
	if b.conflicts > 0 {
		b.locateFirstOccurrences(ctx)
		return nil, &ConflictsError{Users: b.conflicts, Samples: b.samples}
	}
	if b.all.cardinality() == 0 {
		return nil, errors.New("no users in the inputs")
	}
	order := make([]*buildSegment, len(b.segs))
	copy(order, b.segs)
	if len(b.opts.Segments) == 0 {
		sort.Slice(order, func(i, j int) bool { return order[i].name < order[j].name })
	}
	out := &Build{
		IDBits:            32,
		Rows:              uint64(b.rows),
		DuplicateRows:     b.dups,
		ConflictsResolved: b.resolved,
		BadLines:          b.bad,
	}
	if b.wide {
		out.IDBits = 64
	}
	for _, s := range order {
		data, err := s.ids.serialize()
		if err != nil {
			return nil, fmt.Errorf("serialize segment %s: %w", s.name, err)
		}
		out.Segments = append(out.Segments, newBuiltSegment(s.name, s.ids.cardinality(), data))
	}
	// Check the output with the loader's own checks (decode, counts,
	// exclusivity), so a build never publishes what workers would reject.
	if _, err := out.Snapshot(time.Unix(0, 0)); err != nil {
		return nil, fmt.Errorf("self-check of the built snapshot: %w", err)
	}
	if users, bytes := out.Users(), out.Bytes(); out.IDBits == 64 && users > 0 && float64(bytes)/float64(users) > 8 {
		b.log.Warn("64-bit segment bitmaps are large: roaring64 is compact only for clustered ids",
			"bytes_per_user", fmt.Sprintf("%.1f", float64(bytes)/float64(users)), "users", users, "bytes", bytes)
	}
	return out, nil
}
