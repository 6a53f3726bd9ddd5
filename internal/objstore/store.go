// Package objstore owns the object stores capper publishes to and reads
// from: a directory or an S3 bucket/prefix behind one small interface, with
// atomic puts and conditional reads of small pointer objects, and the
// names of published versions. Segment snapshots, cap policies and
// campaign plans live in one.
package objstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// Store is a directory or an S3 bucket/prefix. Keys are slash-separated and
// relative to the store's root. A missing object is an error wrapping
// fs.ErrNotExist.
type Store interface {
	// Get opens an object for reading; size is -1 when the store cannot tell.
	Get(ctx context.Context, key string) (rc io.ReadCloser, size int64, err error)
	// Size returns an object's size.
	Size(ctx context.Context, key string) (int64, error)
	// GetIfChanged reads a small object (at most MaxSmallObject bytes)
	// unless its ETag still equals etag (then it returns ErrNotModified): how
	// a watcher polls a pointer object with one small round trip. An empty
	// etag always reads.
	GetIfChanged(ctx context.Context, key, etag string) (data []byte, newETag string, err error)
	// Put writes an object; readers see either the old or the whole new
	// content, never a part.
	Put(ctx context.Context, key string, r io.Reader) error
	// List returns the keys that start with prefix, in no particular order.
	List(ctx context.Context, prefix string) ([]string, error)
	// Delete removes an object; a missing object is not an error.
	Delete(ctx context.Context, key string) error
	// String names the store in messages ("/data/segments", "s3://b/p").
	String() string
}

// ErrNotModified is GetIfChanged's answer for an unchanged object.
var ErrNotModified = errors.New("not modified")

// MaxSmallObject bounds what GetIfChanged and ReadAll accept.
const MaxSmallObject = 1 << 20

// Options configures Open.
type Options struct {
	S3 S3Options
}

// S3Options configures an S3 store. Credentials come from the AWS default
// chain (environment, shared config, instance/pod roles); with a custom
// Endpoint, Open checks that the chain yields some.
type S3Options struct {
	// Region overrides the region from the environment/shared config. With
	// a custom Endpoint and no region anywhere, DefaultEndpointRegion.
	Region string
	// Endpoint is the base URL of an S3-compatible store (MinIO, gofakes3,
	// ...); empty means AWS.
	Endpoint string
	// UsePathStyle addresses buckets as endpoint/bucket instead of
	// bucket.endpoint; most S3-compatible stores need it.
	UsePathStyle bool
	// PartSize is the multipart part size; objects larger than one part are
	// uploaded in parts. Default 16 MiB, minimum 5 MiB (S3's limit).
	PartSize int64
	// Logger receives the AWS SDK's own messages (its warnings; its retries
	// when debug is enabled); nil discards them.
	Logger *slog.Logger
}

// Open opens the store at rawURL: "/path" or "relative/path" (a directory),
// "file:///path", or "s3://bucket[/prefix]".
func Open(ctx context.Context, rawURL string, opts Options) (Store, error) {
	switch {
	case rawURL == "":
		return nil, errors.New("open store: empty location")
	case strings.HasPrefix(rawURL, "s3://"):
		bucket, prefix, err := SplitS3URL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("open store %s: %w", rawURL, err)
		}
		st, err := newS3Store(ctx, bucket, prefix, opts.S3)
		if err != nil {
			return nil, fmt.Errorf("open store %s: %w", rawURL, err)
		}
		return st, nil
	case strings.HasPrefix(rawURL, "file://"):
		dir, err := FilePath(rawURL)
		if err != nil {
			return nil, fmt.Errorf("open store %s: %w", rawURL, err)
		}
		return newDirStore(dir), nil
	case strings.Contains(rawURL, "://"):
		return nil, fmt.Errorf("open store %s: unsupported scheme (want a directory, file:// or s3://)", rawURL)
	default:
		return newDirStore(rawURL), nil
	}
}

// FilePath is the path of a file:/// URL.
func FilePath(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	if u.Host != "" && u.Host != "localhost" {
		return "", fmt.Errorf("file URL with host %q: want file:///absolute/path", u.Host)
	}
	if u.Path == "" {
		return "", errors.New("file URL without a path")
	}
	return filepath.FromSlash(u.Path), nil
}

// SplitS3URL splits s3://bucket/some/key into "bucket" and "some/key".
func SplitS3URL(raw string) (bucket, key string, err error) {
	rest := strings.TrimPrefix(raw, "s3://")
	bucket, key, _ = strings.Cut(rest, "/")
	if bucket == "" {
		return "", "", errors.New("no bucket in S3 URL (want s3://bucket/prefix)")
	}
	return bucket, key, nil
}

// versionTime is the time part of a published version.
const versionTime = "20060102T150405.000Z"

// versionRE: a published version, <UTC time to the millisecond>-<first 8
// hex of the content's sha256>; names sort by publication time.
var versionRE = regexp.MustCompile(`^[0-9]{8}T[0-9]{6}\.[0-9]{3}Z-[0-9a-f]{8}$`)

// NewVersion names what is published at t with content data (a policy, a
// campaign plan, a set of plans): the time, then the first 8 hex digits
// of data's sha256.
func NewVersion(data []byte, t time.Time) string {
	sum := sha256.Sum256(data)
	return t.UTC().Format(versionTime) + "-" + hex.EncodeToString(sum[:4])
}

// IsVersion reports whether v is of NewVersion's form
// (20261123T101500.000Z-3f2a9c1b).
func IsVersion(v string) bool { return versionRE.MatchString(v) }

// VersionTime is when version v was published (false: not a version).
func VersionTime(v string) (time.Time, bool) {
	if !IsVersion(v) {
		return time.Time{}, false
	}
	t, err := time.Parse(versionTime, v[:len(versionTime)])
	return t, err == nil
}

// ReadAll reads a small object whole (at most MaxSmallObject bytes).
func ReadAll(ctx context.Context, st Store, key string) ([]byte, error) {
	rc, _, err := st.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	data, err := readSmall(rc, MaxSmallObject)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	return data, nil
}

// readSmall reads at most limit bytes; more is an error.
func readSmall(r io.Reader, limit int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("larger than %d bytes", limit)
	}
	return data, nil
}
