package policy

// Policies as versioned data: a store (a directory or an S3 bucket/prefix,
// the segment snapshots' kind) holds policies/<version>/policy.yaml, one
// object per published version, never changed, and policies/LATEST naming
// the version in use, written last, so that a reader following LATEST
// never sees a policy that is not whole.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"time"

	"github.com/capper-dev/capper/internal/objstore"
)

// Keys of a policy store.
const (
	storeDir  = "policies/"
	LatestKey = storeDir + "LATEST"
	fileName  = "policy.yaml"
)

// ContentHash is the first 12 hex digits of the sha256 of a policy's bytes:
// the version of a policy read from a file, and part of a published one.
func ContentHash(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:6])
}

// NewVersion names a policy published at t.
func NewVersion(data []byte, t time.Time) string { return objstore.NewVersion(data, t) }

// ValidateVersion checks a published version's form.
func ValidateVersion(v string) error {
	if !objstore.IsVersion(v) {
		return fmt.Errorf("policy version %q is not of the form 20261123T101500.000Z-3f2a9c1b", v)
	}
	return nil
}

func versionKey(v string) string { return storeDir + v + "/" + fileName }

// Published is the outcome of Publish.
type Published struct {
	Version string
	// Unchanged: the policy in use already had these bytes; nothing was
	// written.
	Unchanged bool
	// Changes are what the new version changes from the one in use
	// (Diff), or why that one could not be compared; none for the first.
	Changes []string
}

// Publish checks data as a policy and, when it has no problem, stores it
// as a new version and points LATEST at it (in that order). A policy with
// problems is refused with all of them. Publishing the bytes LATEST already
// names writes nothing.
func Publish(ctx context.Context, st objstore.Store, data []byte, now time.Time) (Published, error) {
	d, err := Parse(data)
	if err != nil {
		return Published{}, err
	}
	if err := d.Problems().Err(); err != nil {
		return Published{}, fmt.Errorf("policy refused:\n%w", err)
	}
	var changes []string
	cur, err := Latest(ctx, st)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return Published{}, err
	default:
		// A version in use that cannot be read (corrupt) is what a new
		// one replaces, not a reason to refuse it.
		old, err := ReadVersion(ctx, st, cur)
		var od *Document
		if err == nil {
			if bytes.Equal(old, data) {
				return Published{Version: cur, Unchanged: true}, nil
			}
			od, err = Parse(old)
		}
		if err != nil {
			changes = []string{fmt.Sprintf("the version in use, %s, cannot be read (%v)", cur, err)}
		} else {
			changes = Diff(od, d)
		}
		// Versions sort by time: a new one sorts after the one in use,
		// even published within its millisecond (or on a clock behind).
		if t, ok := objstore.VersionTime(cur); ok && !now.After(t) {
			now = t.Add(time.Millisecond)
		}
	}
	v := NewVersion(data, now)
	if err := st.Put(ctx, versionKey(v), bytes.NewReader(data)); err != nil {
		return Published{}, fmt.Errorf("publish policy %s to %s: %w", v, st, err)
	}
	if err := st.Put(ctx, LatestKey, strings.NewReader(v+"\n")); err != nil {
		return Published{}, fmt.Errorf("publish policy %s to %s: write %s: %w", v, st, LatestKey, err)
	}
	return Published{Version: v, Changes: changes}, nil
}

// Latest returns the version LATEST names (an error wrapping
// fs.ErrNotExist when the store has none).
func Latest(ctx context.Context, st objstore.Store) (string, error) {
	v, _, err := latestIfChanged(ctx, st, "")
	return v, err
}

func latestIfChanged(ctx context.Context, st objstore.Store, etag string) (version, newETag string, err error) {
	data, newETag, err := st.GetIfChanged(ctx, LatestKey, etag)
	if errors.Is(err, objstore.ErrNotModified) {
		return "", newETag, err
	}
	if err != nil {
		return "", "", fmt.Errorf("read %s from %s: %w", LatestKey, st, err)
	}
	version = strings.TrimSpace(string(data))
	if err := ValidateVersion(version); err != nil {
		return "", "", fmt.Errorf("%s in %s: %w", LatestKey, st, err)
	}
	return version, newETag, nil
}

// ReadVersion reads a published version's bytes and checks them against the
// hash in its name.
func ReadVersion(ctx context.Context, st objstore.Store, version string) ([]byte, error) {
	if err := ValidateVersion(version); err != nil {
		return nil, err
	}
	data, err := objstore.ReadAll(ctx, st, versionKey(version))
	if err != nil {
		return nil, fmt.Errorf("read policy %s from %s: %w", version, st, err)
	}
	if h := ContentHash(data)[:8]; !strings.HasSuffix(version, "-"+h) {
		return nil, fmt.Errorf("read policy %s from %s: content hash %s does not match the version (corrupt or changed after publishing)", version, st, h)
	}
	return data, nil
}

// Version is one published policy.
type Version struct {
	Name      string
	Published time.Time
	Current   bool // LATEST names it
}

// History lists the published versions, oldest first.
func History(ctx context.Context, st objstore.Store) ([]Version, error) {
	keys, err := st.List(ctx, storeDir)
	if err != nil {
		return nil, fmt.Errorf("list policies in %s: %w", st, err)
	}
	cur, err := Latest(ctx, st)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	var out []Version
	for _, k := range keys {
		v, ok := strings.CutSuffix(strings.TrimPrefix(k, storeDir), "/"+fileName)
		if !ok || ValidateVersion(v) != nil {
			continue
		}
		at, _ := objstore.VersionTime(v)
		out = append(out, Version{Name: v, Published: at, Current: v == cur})
	}
	slices.SortFunc(out, func(a, b Version) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
