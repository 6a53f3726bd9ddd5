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

// Plan is an active plan: its manifest and its audience.
type Plan struct {
	*Manifest
	audience *roaring.Bitmap
	planned  capping.Planned // what the engine gets for its users
}

// Set is an active set of plans, the highest priority first. A nil Set
// holds none.
type Set struct {
	version string
	plans   []*Plan
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

// Holds reports whether a plan's audience holds a user.
func (p *Plan) Holds(user uint64) bool {
	return user <= math.MaxUint32 && p.audience.Contains(uint32(user))
}

// For appends to dst the plans of a priority above prio whose window has
// not ended at and whose audience holds user: what the engine books for an
// intent (capping.Request.Planned).
func (s *Set) For(dst []capping.Planned, user uint64, prio capping.Priority, at time.Time) []capping.Planned {
	if s == nil || user > math.MaxUint32 {
		return dst
	}
	for _, p := range s.plans {
		if p.Priority <= prio {
			break // the highest first: none of the rest is above prio
		}
		if at.Before(p.Ends) && p.audience.Contains(uint32(user)) {
			dst = append(dst, p.planned)
		}
	}
	return dst
}

// Load reads the set LATEST names and verifies every plan (its manifest,
// and its audience's size, sha256 and users); any failure fails the whole
// set, naming the plan. Plans of prev with the same version are reused, not
// read again.
func Load(ctx context.Context, st objstore.Store, prev *Set) (*Set, error) {
	idx, err := ReadIndex(ctx, st)
	if err != nil {
		return nil, err
	}
	return loadIndex(ctx, st, idx, prev)
}

func loadIndex(ctx context.Context, st objstore.Store, idx *Index, prev *Set) (*Set, error) {
	known := map[string]*Plan{}
	for _, p := range prev.Plans() {
		known[p.Version] = p
	}
	s := &Set{version: idx.Version}
	for _, r := range idx.Plans {
		p := known[r.Version]
		if p == nil {
			var err error
			if p, err = loadPlan(ctx, st, r.Version); err != nil {
				return nil, fmt.Errorf("plans %s: %w", idx.Version, err)
			}
		}
		if p.Campaign != r.Campaign {
			return nil, fmt.Errorf("plans %s: %s is of campaign %q, the index says %q", idx.Version, p.Manifest, p.Campaign, r.Campaign)
		}
		s.plans = append(s.plans, p)
	}
	slices.SortStableFunc(s.plans, func(a, b *Plan) int { return int(b.Priority) - int(a.Priority) })
	return s, nil
}

func loadPlan(ctx context.Context, st objstore.Store, version string) (*Plan, error) {
	m, err := ReadManifest(ctx, st, version)
	if err != nil {
		return nil, err
	}
	if m.Audience.Key != audienceKey(version) {
		return nil, fmt.Errorf("%s: audience at %q, want %q", m, m.Audience.Key, audienceKey(version))
	}
	rc, _, err := st.Get(ctx, m.Audience.Key)
	if err != nil {
		return nil, fmt.Errorf("%s: audience: %w", m, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, m.Audience.Bytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: audience: %w", m, err)
	}
	if int64(len(data)) != m.Audience.Bytes {
		return nil, fmt.Errorf("%s: audience is %d bytes, the manifest says %d", m, len(data), m.Audience.Bytes)
	}
	if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != m.Audience.SHA256 {
		return nil, fmt.Errorf("%s: audience sha256 is %x, the manifest says %s", m, sum, m.Audience.SHA256)
	}
	bm := roaring.New()
	if _, err := bm.ReadFrom(bytes.NewReader(data)); err != nil {
		return nil, fmt.Errorf("%s: audience: %w", m, err)
	}
	if n := bm.GetCardinality(); n != m.Audience.Users {
		return nil, fmt.Errorf("%s: audience holds %d users, the manifest says %d", m, n, m.Audience.Users)
	}
	return &Plan{Manifest: m, audience: bm, planned: capping.Planned{Campaign: m.Campaign, Priority: m.Priority,
		Starts: m.Starts, Ends: m.Ends, Channel: m.Message.Channel, Category: m.Message.Category, Tags: m.Message.Tags}}, nil
}

// Current holds the active set; it is swapped whole.
type Current struct{ p atomic.Pointer[Set] }

// Load is the set in use (nil: none).
func (c *Current) Load() *Set { return c.p.Load() }

// Store swaps s in.
func (c *Current) Store(s *Set) { c.p.Store(s) }
