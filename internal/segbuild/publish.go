package segbuild

// Publishing a build (objects, manifest, then LATEST) and pruning old
// versions.

import (
	"github.com/capper-dev/capper/internal/objstore"
	"github.com/capper-dev/capper/internal/segments"

	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"
)

// DefaultKeep is how many snapshot versions Publish keeps by default.
const DefaultKeep = 5

// PublishOptions configures Publish.
type PublishOptions struct {
	// Keep is how many versions to keep (the newest; default DefaultKeep).
	// The version LATEST names is never deleted.
	Keep int
	// Now stamps the snapshot (created_at and version); default time.Now.
	Now func() time.Time
	// Logger gets retention warnings; nil discards.
	Logger *slog.Logger
}

// Publish writes the build as a new snapshot: the segment objects and
// manifest.json under snapshots/<version>/, then LATEST. A reader that
// follows LATEST therefore never sees a partial snapshot. Afterwards it
// deletes old versions (see Prune); a failed clean-up is logged, since the
// snapshot is published by then.
func Publish(ctx context.Context, st objstore.Store, b *Build, opts PublishOptions) (*segments.Manifest, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Keep <= 0 {
		opts.Keep = DefaultKeep
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if b == nil || len(b.Segments) == 0 {
		return nil, errors.New("publish snapshot: empty build")
	}
	m := b.Manifest(opts.Now())
	if err := m.Validate(m.Version); err != nil {
		return nil, fmt.Errorf("publish snapshot %s: %w", m.Version, err)
	}
	for i, s := range b.Segments {
		key := segments.VersionKey(m.Version, m.Segments[i].Object)
		if err := st.Put(ctx, key, bytes.NewReader(s.Data)); err != nil {
			return nil, fmt.Errorf("publish snapshot %s to %s: object %s: %w", m.Version, st, key, err)
		}
	}
	data, err := m.Marshal()
	if err != nil {
		return nil, fmt.Errorf("publish snapshot %s: manifest: %w", m.Version, err)
	}
	if err := st.Put(ctx, segments.VersionKey(m.Version, segments.ManifestObject), bytes.NewReader(data)); err != nil {
		return nil, fmt.Errorf("publish snapshot %s to %s: manifest: %w", m.Version, st, err)
	}
	if err := st.Put(ctx, segments.LatestKey, strings.NewReader(m.Version+"\n")); err != nil {
		return nil, fmt.Errorf("publish snapshot %s to %s: %s: %w", m.Version, st, segments.LatestKey, err)
	}
	if deleted, err := Prune(ctx, st, opts.Keep); err != nil {
		log.Warn("deleting old segment snapshots failed", "store", st.String(), "err", err)
	} else if len(deleted) > 0 {
		log.Info("deleted old segment snapshots", "store", st.String(), "versions", deleted)
	}
	return m, nil
}

// Prune deletes all but the newest keep versions under snapshots/, never the
// one LATEST names, and returns the deleted versions. Versions start with
// their creation time, so they sort by age.
func Prune(ctx context.Context, st objstore.Store, keep int) ([]string, error) {
	if keep < 1 {
		keep = 1
	}
	latest, err := segments.ReadLatest(ctx, st)
	if err != nil {
		return nil, fmt.Errorf("prune %s: %w", st, err)
	}
	keys, err := st.List(ctx, segments.SnapshotsDir)
	if err != nil {
		return nil, fmt.Errorf("prune %s: %w", st, err)
	}
	byVersion := make(map[string][]string)
	for _, k := range keys {
		v, _, ok := strings.Cut(strings.TrimPrefix(k, segments.SnapshotsDir), "/")
		if !ok || segments.ValidateVersion(v) != nil {
			continue // not ours: leave it alone
		}
		byVersion[v] = append(byVersion[v], k)
	}
	versions := make([]string, 0, len(byVersion))
	for v := range byVersion {
		versions = append(versions, v)
	}
	sort.Sort(sort.Reverse(sort.StringSlice(versions)))
	var deleted []string
	for i, v := range versions {
		if i < keep || v == latest {
			continue
		}
		// Objects first, manifest last: a half-deleted version is then
		// recognisably broken (no manifest or missing objects) either way.
		ks := byVersion[v]
		sort.Slice(ks, func(a, b int) bool {
			return !strings.HasSuffix(ks[a], "/"+segments.ManifestObject) && strings.HasSuffix(ks[b], "/"+segments.ManifestObject)
		})
		for _, k := range ks {
			if err := st.Delete(ctx, k); err != nil {
				return deleted, fmt.Errorf("prune %s: delete %s: %w", st, k, err)
			}
		}
		deleted = append(deleted, v)
	}
	return deleted, nil
}
