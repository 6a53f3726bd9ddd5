package plans

// The plan store: a directory or an S3 bucket/prefix (the segment
// snapshots' kind) holding
//
//	plans/<version>/plan.json          a plan's manifest, never changed
//	plans/<version>/audience.roaring   its audience (roaring portable)
//	index/<version>.json               an active set: the plans' versions
//	LATEST                             the index in use, written last
//
// so that a reader following LATEST never sees a set that is not whole.
// Publishing writes the plan, then a new index with it (replacing an
// earlier plan of the same campaign), then LATEST; withdrawing writes an
// index without it. An index keeps ended plans for Retention after the
// latest end among its plans, for capper replay --plans; workers load
// only the plans whose window has not ended.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"time"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/objstore"
)

// Keys of a plan store.
const (
	LatestKey    = "LATEST"
	plansDir     = "plans/"
	indexDir     = "index/"
	manifestName = "plan.json"
	audienceName = "audience.roaring"
	format       = 1
)

// Manifest is a published plan.
type Manifest struct {
	Format    int              `json:"format"`
	Version   string           `json:"version"`
	Campaign  string           `json:"campaign"`
	Priority  capping.Priority `json:"priority"`
	Starts    time.Time        `json:"starts"`
	Ends      time.Time        `json:"ends"`
	Message   Message          `json:"message"`
	Audience  Object           `json:"audience"`
	CreatedAt time.Time        `json:"created_at"`
}

// Object is a plan's audience object: its key, users, size and sha256.
type Object struct {
	Key    string `json:"key"`
	Users  uint64 `json:"users"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// Index is an active set of plans.
type Index struct {
	Format    int       `json:"format"`
	Version   string    `json:"version"`
	CreatedAt time.Time `json:"created_at"`
	Plans     []Ref     `json:"plans"`
}

// Ref names a plan of an index.
type Ref struct {
	Campaign string    `json:"campaign"`
	Version  string    `json:"version"`
	Ends     time.Time `json:"ends"` // the plan's, so that a worker skips an ended one unread
}

// Retention is how long an index keeps an ended plan, counted from the
// latest end among its plans (not the clock: a scratch store of a past
// week's plans keeps them all).
const Retention = 35 * 24 * time.Hour

func manifestKey(v string) string { return plansDir + v + "/" + manifestName }
func audienceKey(v string) string { return plansDir + v + "/" + audienceName }
func indexKey(v string) string    { return indexDir + v + ".json" }

// Publish stores a checked plan (spec, its priority, its audience
// serialized) and makes it active: a plan of the same campaign is
// replaced. It returns the plan's manifest.
func Publish(ctx context.Context, st objstore.Store, spec *Spec, prio capping.Priority, audience []byte, users uint64, now time.Time) (*Manifest, error) {
	sum := sha256.Sum256(audience)
	m := &Manifest{Format: format, Campaign: spec.Campaign, Priority: prio, Starts: spec.Starts.UTC(), Ends: spec.Ends.UTC(),
		Message: spec.Message, CreatedAt: now.UTC(),
		Audience: Object{Users: users, Bytes: int64(len(audience)), SHA256: hex.EncodeToString(sum[:])}}
	seed, _ := json.Marshal(m)
	m.Version = objstore.NewVersion(seed, now)
	m.Audience.Key = audienceKey(m.Version)
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := st.Put(ctx, m.Audience.Key, bytes.NewReader(audience)); err != nil {
		return nil, fmt.Errorf("publish %s: audience: %w", m, err)
	}
	if err := st.Put(ctx, manifestKey(m.Version), bytes.NewReader(data)); err != nil {
		return nil, fmt.Errorf("publish %s: manifest: %w", m, err)
	}
	err = update(ctx, st, now, func(refs []Ref) ([]Ref, error) {
		refs = slices.DeleteFunc(refs, func(r Ref) bool { return r.Campaign == m.Campaign })
		return append(refs, Ref{Campaign: m.Campaign, Version: m.Version, Ends: m.Ends}), nil
	})
	if err != nil {
		return nil, fmt.Errorf("publish %s: %w", m, err)
	}
	return m, nil
}

// Withdraw makes a campaign's plan inactive (its slots are free at the
// workers' next poll).
func Withdraw(ctx context.Context, st objstore.Store, campaign string, now time.Time) error {
	return update(ctx, st, now, func(refs []Ref) ([]Ref, error) {
		n := len(refs)
		refs = slices.DeleteFunc(refs, func(r Ref) bool { return r.Campaign == campaign })
		if len(refs) == n {
			return nil, fmt.Errorf("no active plan of campaign %q in %s", campaign, st)
		}
		return refs, nil
	})
}

// update writes a new index from the current one (edit changes its plans;
// those that ended Retention before the latest end leave it), then LATEST.
func update(ctx context.Context, st objstore.Store, now time.Time, edit func([]Ref) ([]Ref, error)) error {
	cur, err := ReadIndex(ctx, st)
	if err != nil {
		return err
	}
	refs, err := edit(slices.Clone(cur.Plans))
	if err != nil {
		return err
	}
	var last time.Time
	for _, r := range refs {
		if r.Ends.After(last) {
			last = r.Ends
		}
	}
	refs = slices.DeleteFunc(refs, func(r Ref) bool { return r.Ends.Add(Retention).Before(last) })
	slices.SortFunc(refs, func(a, b Ref) int { return strings.Compare(a.Campaign, b.Campaign) })
	idx := Index{Format: format, CreatedAt: now.UTC(), Plans: refs}
	seed, _ := json.Marshal(idx)
	idx.Version = objstore.NewVersion(seed, now)
	data, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return err
	}
	if err := st.Put(ctx, indexKey(idx.Version), bytes.NewReader(data)); err != nil {
		return fmt.Errorf("index %s: %w", idx.Version, err)
	}
	if err := st.Put(ctx, LatestKey, strings.NewReader(idx.Version+"\n")); err != nil {
		return fmt.Errorf("%s: %w", LatestKey, err)
	}
	return nil
}

// ReadIndex reads the index LATEST names (an empty one when the store has
// none yet).
func ReadIndex(ctx context.Context, st objstore.Store) (*Index, error) {
	data, _, err := st.GetIfChanged(ctx, LatestKey, "")
	if errors.Is(err, fs.ErrNotExist) {
		return &Index{Format: format}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s of %s: %w", LatestKey, st, err)
	}
	return readIndex(ctx, st, strings.TrimSpace(string(data)))
}

// ReadIndexVersion reads an index by its version (an older set).
func ReadIndexVersion(ctx context.Context, st objstore.Store, version string) (*Index, error) {
	return readIndex(ctx, st, version)
}

func readIndex(ctx context.Context, st objstore.Store, version string) (*Index, error) {
	var idx Index
	if err := readJSON(ctx, st, indexKey(version), &idx); err != nil {
		return nil, fmt.Errorf("index %s: %w", version, err)
	}
	if idx.Format != format || idx.Version != version {
		return nil, fmt.Errorf("index %s: format %d version %q, want format %d version %q", version, idx.Format, idx.Version, format, version)
	}
	for i, r := range idx.Plans {
		if r.Campaign == "" || r.Version == "" || r.Ends.IsZero() {
			return nil, fmt.Errorf("index %s: plans[%d]: campaign, version and ends are required", version, i)
		}
	}
	return &idx, nil
}

// ReadManifest reads a plan's manifest.
func ReadManifest(ctx context.Context, st objstore.Store, version string) (*Manifest, error) {
	var m Manifest
	if err := readJSON(ctx, st, manifestKey(version), &m); err != nil {
		return nil, fmt.Errorf("plan %s: %w", version, err)
	}
	if m.Format != format || m.Version != version {
		return nil, fmt.Errorf("plan %s: format %d version %q, want format %d version %q", version, m.Format, m.Version, format, version)
	}
	return &m, nil
}

func readJSON(ctx context.Context, st objstore.Store, key string, v any) error {
	data, err := objstore.ReadAll(ctx, st, key)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	return nil
}

// SplitStore reads STORE[@SET]: an @ not followed by a set's version is
// part of the store's name.
func SplitStore(s string) (store, version string) {
	if i := strings.LastIndexByte(s, '@'); i >= 0 && objstore.IsVersion(s[i+1:]) {
		return s[:i], s[i+1:]
	}
	return s, ""
}

func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }

func trim(b []byte) string { return strings.TrimSpace(string(b)) }
