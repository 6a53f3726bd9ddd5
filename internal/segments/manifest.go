package segments

// The manifest: what a snapshot holds and how to verify it.

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/capper-dev/capper/internal/clip"
)

// ManifestFormat is the manifest format this package writes and reads.
const ManifestFormat = 1

// Manifest is snapshots/<version>/manifest.json: what a snapshot holds and
// how to verify it.
type Manifest struct {
	Format    int               `json:"format"`
	Version   string            `json:"version"`
	CreatedAt time.Time         `json:"created_at"`
	IDBits    int               `json:"id_bits"`
	Segments  []ManifestSegment `json:"segments"` // priority order
}

// ManifestSegment is one segment's entry in the manifest.
type ManifestSegment struct {
	Name   string `json:"name"`
	Object string `json:"object"` // file name under snapshots/<version>/
	Users  uint64 `json:"users"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// VersionString is "<created_at as 20060102T150405Z>-<8 hex>", where the hex
// is the start of a sha256 over the id width and each segment's name and
// object sha256: identical content gives an identical suffix, and versions
// sort by time.
func VersionString(createdAt time.Time, idBits int, segs []ManifestSegment) string {
	h := sha256.New()
	fmt.Fprintf(h, "id_bits %d\n", idBits)
	for _, s := range segs {
		fmt.Fprintf(h, "%s %s\n", s.Name, s.SHA256)
	}
	return createdAt.UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(h.Sum(nil))[:8]
}

// Marshal is the manifest.json a publisher writes.
func (m *Manifest) Marshal() ([]byte, error) {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Validate checks everything about the manifest of a version that does not
// need the objects, so that nothing unchecked is used to build a key.
func (m *Manifest) Validate(version string) error {
	if m.Format != ManifestFormat {
		return fmt.Errorf("format %d is not supported (want %d)", m.Format, ManifestFormat)
	}
	if m.Version != version {
		return fmt.Errorf("version %q does not match its location %q", clip.String(m.Version, 80), version)
	}
	if m.CreatedAt.IsZero() {
		return fmt.Errorf("created_at is missing")
	}
	if m.IDBits != 32 && m.IDBits != 64 {
		return fmt.Errorf("id_bits %d is not 32 or 64", m.IDBits)
	}
	if len(m.Segments) == 0 {
		return fmt.Errorf("no segments")
	}
	names := make(map[string]bool, len(m.Segments))
	objects := make(map[string]bool, len(m.Segments))
	for i, s := range m.Segments {
		if err := ValidateSegmentName(s.Name); err != nil {
			return fmt.Errorf("segments[%d]: %w", i, err)
		}
		if names[s.Name] {
			return fmt.Errorf("segments[%d]: segment %q is listed twice", i, s.Name)
		}
		names[s.Name] = true
		if s.Object == "" || s.Object == "." || s.Object == ".." || s.Object == ManifestObject ||
			strings.ContainsAny(s.Object, `/\`) || strings.Contains(s.Object, "..") {
			return fmt.Errorf("segments[%d] (%s): object name %q is not a plain file name", i, s.Name, clip.String(s.Object, 80))
		}
		if objects[s.Object] {
			return fmt.Errorf("segments[%d] (%s): object %q is used twice", i, s.Name, s.Object)
		}
		objects[s.Object] = true
		if s.Bytes <= 0 {
			return fmt.Errorf("segments[%d] (%s): bytes %d is not positive", i, s.Name, s.Bytes)
		}
		if len(s.SHA256) != 64 || strings.ToLower(s.SHA256) != s.SHA256 {
			return fmt.Errorf("segments[%d] (%s): sha256 %q is not 64 lower-case hex digits", i, s.Name, clip.String(s.SHA256, 80))
		}
		if _, err := hex.DecodeString(s.SHA256); err != nil {
			return fmt.Errorf("segments[%d] (%s): sha256 %q is not 64 lower-case hex digits", i, s.Name, clip.String(s.SHA256, 80))
		}
	}
	return nil
}
