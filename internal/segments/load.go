package segments

// Loading a snapshot version and verifying all of it.

import (
	"github.com/capper-dev/capper/internal/objstore"

	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// LoadOptions configures Load.
type LoadOptions struct {
	// Accept, when set, is a last check by the caller (e.g. the worker
	// rejects segments its config does not know). A rejected snapshot is a
	// load failure.
	Accept func(*Snapshot) error
}

// Load reads LATEST and loads the version it names (see LoadVersion).
func Load(ctx context.Context, st objstore.Store, opts LoadOptions) (*Snapshot, error) {
	version, _, err := readLatest(ctx, st, "")
	if err != nil {
		return nil, err
	}
	return LoadVersion(ctx, st, version, opts)
}

// ReadLatest reads LATEST: the version in use.
func ReadLatest(ctx context.Context, st objstore.Store) (string, error) {
	v, _, err := readLatest(ctx, st, "")
	return v, err
}

// readLatest reads LATEST (conditionally when etag is set).
func readLatest(ctx context.Context, st objstore.Store, etag string) (version, newETag string, err error) {
	data, newETag, err := st.GetIfChanged(ctx, LatestKey, etag)
	if errors.Is(err, objstore.ErrNotModified) {
		return "", newETag, err
	}
	if err != nil {
		return "", "", fmt.Errorf("load snapshot: read %s from %s: %w", LatestKey, st, err)
	}
	version = strings.TrimSpace(string(data))
	if err := ValidateVersion(version); err != nil {
		return "", "", fmt.Errorf("load snapshot: %s in %s: %w", LatestKey, st, err)
	}
	return version, newETag, nil
}

// LoadVersion loads snapshots/<version>/ and verifies all of it: the
// manifest, each object's size and sha256, that each bitmap decodes and holds
// the number of users the manifest says, and that no two segments share a
// user. Any failure is an error naming the version, the object and the
// problem; nothing partial is returned.
func LoadVersion(ctx context.Context, st objstore.Store, version string, opts LoadOptions) (*Snapshot, error) {
	s, err := loadVersion(ctx, st, version, opts)
	if err != nil {
		return nil, fmt.Errorf("load snapshot %s from %s: %w", version, st, err)
	}
	return s, nil
}

func loadVersion(ctx context.Context, st objstore.Store, version string, opts LoadOptions) (*Snapshot, error) {
	if err := ValidateVersion(version); err != nil {
		return nil, err
	}
	m, err := readManifest(ctx, st, version)
	if err != nil {
		return nil, err
	}
	datas := make([][]byte, len(m.Segments))
	for i, seg := range m.Segments {
		key := VersionKey(version, seg.Object)
		data, err := readObject(ctx, st, key, seg.Bytes, seg.SHA256)
		if err != nil {
			return nil, fmt.Errorf("object %s: %w", key, err)
		}
		datas[i] = data
	}
	s, err := newSnapshot(m, datas)
	if err != nil {
		return nil, err
	}
	if opts.Accept != nil {
		if err := opts.Accept(s); err != nil {
			return nil, fmt.Errorf("rejected: %w", err)
		}
	}
	return s, nil
}

func readManifest(ctx context.Context, st objstore.Store, version string) (*Manifest, error) {
	key := VersionKey(version, ManifestObject)
	data, err := objstore.ReadAll(ctx, st, key)
	if err != nil {
		return nil, fmt.Errorf("object %s: %w", key, err)
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("object %s: decode JSON: %w", key, err)
	}
	if err := m.Validate(version); err != nil {
		return nil, fmt.Errorf("object %s: %w", key, err)
	}
	return &m, nil
}

// readObject reads a whole object into one buffer of the size the manifest
// gives (the bitmap will reference it), hashing as it goes.
func readObject(ctx context.Context, st objstore.Store, key string, size int64, wantSHA string) ([]byte, error) {
	rc, _, err := st.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	h := sha256.New()
	r := io.TeeReader(rc, h)
	data := make([]byte, size)
	n, err := io.ReadFull(r, data)
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("size mismatch (manifest %d bytes, got %d): truncated", size, n)
	}
	if err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	// Anything after the expected size is also a mismatch.
	extra, err := io.Copy(io.Discard, r)
	if err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	if extra > 0 {
		return nil, fmt.Errorf("size mismatch (manifest %d bytes, got %d)", size, size+extra)
	}
	got := hex.EncodeToString(h.Sum(nil))
	if got != wantSHA {
		return nil, fmt.Errorf("sha256 mismatch (manifest %s, got %s)", wantSHA, got)
	}
	return data, nil
}

// Decode turns a manifest and its objects (in manifest order, already
// verified) into a snapshot through the same checks as a load, without a
// store: a freshly built snapshot is checked this way before it is published.
func Decode(m *Manifest, objects [][]byte) (*Snapshot, error) {
	if err := m.Validate(m.Version); err != nil {
		return nil, err
	}
	return newSnapshot(m, objects)
}
