package objstore

// The directory store.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// dirStore keeps objects as files under a directory. Put writes a temporary
// file and renames it, so readers see whole files only.
type dirStore struct {
	root string
}

const tmpPrefix = ".tmp-"

func newDirStore(root string) *dirStore { return &dirStore{root: filepath.Clean(root)} }

func (d *dirStore) String() string { return d.root }

func (d *dirStore) path(key string) (string, error) {
	if key == "" || strings.HasPrefix(key, "/") {
		return "", fmt.Errorf("invalid key %q", key)
	}
	for _, el := range strings.Split(key, "/") {
		if el == "" || el == "." || el == ".." {
			return "", fmt.Errorf("invalid key %q", key)
		}
	}
	return filepath.Join(d.root, filepath.FromSlash(key)), nil
}

func (d *dirStore) Get(_ context.Context, key string) (io.ReadCloser, int64, error) {
	p, err := d.path(key)
	if err != nil {
		return nil, 0, err
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	if fi.IsDir() {
		f.Close()
		return nil, 0, fmt.Errorf("%s is a directory", p)
	}
	return f, fi.Size(), nil
}

// Size returns the file's size.
func (d *dirStore) Size(_ context.Context, key string) (int64, error) {
	p, err := d.path(key)
	if err != nil {
		return 0, err
	}
	fi, err := os.Stat(p)
	if err != nil {
		return 0, err
	}
	if fi.IsDir() {
		return 0, fmt.Errorf("%s is a directory", p)
	}
	return fi.Size(), nil
}

// GetIfChanged reads the file and uses a hash of its content as the ETag.
// For a local file the read is as cheap as a stat, and unlike size+mtime it
// cannot miss a rewrite within the file system's timestamp granularity.
func (d *dirStore) GetIfChanged(ctx context.Context, key, etag string) ([]byte, string, error) {
	rc, _, err := d.Get(ctx, key)
	if err != nil {
		return nil, "", err
	}
	defer rc.Close()
	data, err := readSmall(rc, MaxSmallObject)
	if err != nil {
		return nil, "", fmt.Errorf("read %s: %w", filepath.Join(d.root, key), err)
	}
	sum := sha256.Sum256(data)
	tag := hex.EncodeToString(sum[:16])
	if etag != "" && tag == etag {
		return nil, tag, ErrNotModified
	}
	return data, tag, nil
}

func (d *dirStore) Put(_ context.Context, key string, r io.Reader) (err error) {
	p, err := d.path(key)
	if err != nil {
		return err
	}
	dir := filepath.Dir(p)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, tmpPrefix+"*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err := io.Copy(f, r); err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	// Durable before it becomes visible: LATEST must never name objects
	// that a crash could lose.
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", p, err)
	}
	if err := f.Chmod(0o644); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", p, err)
	}
	if err := os.Rename(f.Name(), p); err != nil {
		return err
	}
	return nil
}

func (d *dirStore) List(_ context.Context, prefix string) ([]string, error) {
	// Walk the deepest directory the prefix names, then filter.
	base := prefix
	if i := strings.LastIndex(base, "/"); i >= 0 {
		base = base[:i]
	} else {
		base = ""
	}
	start := d.root
	if base != "" {
		p, err := d.path(base)
		if err != nil {
			return nil, err
		}
		start = p
	}
	var keys []string
	err := filepath.WalkDir(start, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p == start {
				return fs.SkipAll
			}
			return err
		}
		if de.IsDir() || strings.HasPrefix(de.Name(), tmpPrefix) {
			return nil
		}
		rel, err := filepath.Rel(d.root, p)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if strings.HasPrefix(key, prefix) {
			keys = append(keys, key)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", filepath.Join(d.root, prefix), err)
	}
	return keys, nil
}

func (d *dirStore) Delete(_ context.Context, key string) error {
	p, err := d.path(key)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	// Remove directories left empty, up to the root (S3 has no directories;
	// keep the two stores looking alike). A non-empty one stops the climb.
	for dir := filepath.Dir(p); dir != d.root && strings.HasPrefix(dir, d.root); dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil {
			break
		}
	}
	return nil
}
