package plans

// The active plans in memory: loaded whole and verified, or not at all,
// and asked per intent which of them hold its user.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/objstore"
)

// Plan is a plan in force: its manifest, and what the engine gets for its
// users. Its audience is in the set's index.
type Plan struct {
	*Manifest
	planned capping.Planned
}

// Set is a set of plans, the highest priority first, and the index of
// their audiences. A nil Set holds none.
type Set struct {
	version string
	plans   []*Plan
	idx     *index
}

// Version is the index the set was loaded from ("" for none).
func (s *Set) Version() string {
	if s == nil {
		return ""
	}
	return s.version
}

// Plans are the set's plans, the highest priority first.
func (s *Set) Plans() []*Plan {
	if s == nil {
		return nil
	}
	return s.plans
}

// Bytes is what the set's audiences take in memory.
func (s *Set) Bytes() int64 {
	if s == nil || s.idx == nil {
		return 0
	}
	return s.idx.bytes()
}

// held is the positions of the plans whose audience holds user, the
// highest priority first.
func (s *Set) held(user uint64) []uint8 {
	if s == nil || s.idx == nil || user > math.MaxUint32 {
		return nil
	}
	return s.idx.lookup(uint32(user))
}

// For appends to dst the plans of a priority above prio whose window has
// not ended at and whose audience holds user: what the engine books for an
// intent (capping.Request.Planned).
func (s *Set) For(dst []capping.Planned, user uint64, prio capping.Priority, at time.Time) []capping.Planned {
	for _, i := range s.held(user) {
		p := s.plans[i]
		if p.Priority <= prio {
			break // the highest first: none of the rest is above prio
		}
		if at.Before(p.Ends) {
			dst = append(dst, p.planned)
		}
	}
	return dst
}

// Owns reports whether a plan of campaign holds user: an intent of the
// campaign to the user is one of the plan's own sends.
func (s *Set) Owns(user uint64, campaign string) bool {
	for _, i := range s.held(user) {
		if s.plans[i].Campaign == campaign {
			return true
		}
	}
	return false
}

// Load reads the set LATEST names (version "") or an older one, and
// verifies every plan (its manifest, and its audience's size, sha256 and
// users); any failure fails the whole set, naming the plan. Plans that
// ended by activeAt are left out unread (zero: none is); plans of prev
// with the same version are reused, not read again.
func Load(ctx context.Context, st objstore.Store, version string, prev *Set, activeAt time.Time) (*Set, error) {
	var idx *Index
	var err error
	if version == "" {
		idx, err = ReadIndex(ctx, st)
	} else {
		idx, err = ReadIndexVersion(ctx, st, version)
	}
	if err != nil {
		return nil, err
	}
	return loadIndex(ctx, st, idx, prev, activeAt)
}

func loadIndex(ctx context.Context, st objstore.Store, idx *Index, prev *Set, activeAt time.Time) (*Set, error) {
	known := map[string]int{}
	for i, p := range prev.Plans() {
		known[p.Version] = i
	}
	type entry struct {
		plan *Plan
		from int             // its position in prev, or -1
		bm   *roaring.Bitmap // a plan not in prev: its audience
	}
	var es []entry
	for _, r := range idx.Plans {
		if !activeAt.IsZero() && !activeAt.Before(r.Ends) {
			continue
		}
		e := entry{from: -1}
		if i, ok := known[r.Version]; ok {
			e.plan, e.from = prev.plans[i], i
		} else {
			var err error
			if e.plan, e.bm, err = loadPlan(ctx, st, r.Version); err != nil {
				return nil, fmt.Errorf("plans %s: %w", idx.Version, err)
			}
		}
		if p := e.plan; p.Campaign != r.Campaign || !p.Ends.Equal(r.Ends) {
			return nil, fmt.Errorf("plans %s: %s is of campaign %q ending %s, the index says %q ending %s", idx.Version, p.Manifest,
				p.Campaign, p.Ends.Format(time.RFC3339), r.Campaign, r.Ends.Format(time.RFC3339))
		}
		es = append(es, e)
	}
	if len(es) > MaxPlans {
		return nil, fmt.Errorf("plans %s: %d plans in force, at most %d", idx.Version, len(es), MaxPlans)
	}
	slices.SortStableFunc(es, func(a, b entry) int { return int(b.plan.Priority) - int(a.plan.Priority) })
	s := &Set{version: idx.Version, plans: make([]*Plan, len(es))}
	from, bms := make([]int, len(es)), make([]*roaring.Bitmap, len(es))
	for i, e := range es {
		s.plans[i], from[i], bms[i] = e.plan, e.from, e.bm
	}
	var pidx *index
	if prev != nil {
		pidx = prev.idx
	}
	s.idx = buildIndex(pidx, from, bms)
	return s, nil
}

// loadPlan reads and verifies a plan and its audience.
func loadPlan(ctx context.Context, st objstore.Store, version string) (*Plan, *roaring.Bitmap, error) {
	m, err := ReadManifest(ctx, st, version)
	if err != nil {
		return nil, nil, err
	}
	if m.Audience.Key != audienceKey(version) {
		return nil, nil, fmt.Errorf("%s: audience at %q, want %q", m, m.Audience.Key, audienceKey(version))
	}
	rc, _, err := st.Get(ctx, m.Audience.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: audience: %w", m, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, m.Audience.Bytes+1))
	if err != nil {
		return nil, nil, fmt.Errorf("%s: audience: %w", m, err)
	}
	if int64(len(data)) != m.Audience.Bytes {
		return nil, nil, fmt.Errorf("%s: audience is %d bytes, the manifest says %d", m, len(data), m.Audience.Bytes)
	}
	if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != m.Audience.SHA256 {
		return nil, nil, fmt.Errorf("%s: audience sha256 is %x, the manifest says %s", m, sum, m.Audience.SHA256)
	}
	bm := roaring.New()
	if _, err := bm.ReadFrom(bytes.NewReader(data)); err != nil {
		return nil, nil, fmt.Errorf("%s: audience: %w", m, err)
	}
	if n := bm.GetCardinality(); n != m.Audience.Users {
		return nil, nil, fmt.Errorf("%s: audience holds %d users, the manifest says %d", m, n, m.Audience.Users)
	}
	return &Plan{Manifest: m, planned: capping.NewPlanned(capping.Planned{Campaign: m.Campaign, Priority: m.Priority,
		Starts: m.Starts, Ends: m.Ends, Channel: m.Message.Channel, Category: m.Message.Category, Tags: m.Message.Tags})}, bm, nil
}

// withoutEnded is s without the plans that ended by t (s itself when none
// did); the index is rebuilt from s's.
func (s *Set) withoutEnded(t time.Time) *Set {
	var keep []*Plan
	var from []int
	for i, p := range s.Plans() {
		if t.Before(p.Ends) {
			keep, from = append(keep, p), append(from, i)
		}
	}
	if len(keep) == len(s.Plans()) {
		return s
	}
	return &Set{version: s.version, plans: keep, idx: buildIndex(s.idx, from, make([]*roaring.Bitmap, len(keep)))}
}

// Current holds the active set; it is swapped whole.
type Current struct{ p atomic.Pointer[Set] }

// Load is the set in use (nil: none).
func (c *Current) Load() *Set { return c.p.Load() }

// Store swaps s in.
func (c *Current) Store(s *Set) { c.p.Store(s) }
