package segbuild

// A finished build: its segments, manifest and summary table.

import (
	"github.com/capper-dev/capper/internal/segments"

	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"time"
)

// Build is a finished, not yet published, set of segment bitmaps.
type Build struct {
	IDBits   int            // 32 or 64
	Segments []BuiltSegment // priority order

	Rows              uint64 // rows read (well-formed and bad)
	DuplicateRows     uint64 // a user listed again in the same segment
	ConflictsResolved uint64 // users in several segments, kept in the first by priority
	BadLines          []BadLine
}

// BuiltSegment is one serialized segment bitmap.
type BuiltSegment struct {
	Name   string
	Users  uint64
	Data   []byte // roaring portable serialization (roaring64 when IDBits is 64)
	SHA256 string // hex
}

func newBuiltSegment(name string, users uint64, data []byte) BuiltSegment {
	sum := sha256.Sum256(data)
	return BuiltSegment{Name: name, Users: users, Data: data, SHA256: hex.EncodeToString(sum[:])}
}

// Users is the total number of users.
func (b *Build) Users() uint64 {
	var n uint64
	for _, s := range b.Segments {
		n += s.Users
	}
	return n
}

// Bytes is the total size of the segment objects.
func (b *Build) Bytes() int64 {
	var n int64
	for _, s := range b.Segments {
		n += int64(len(s.Data))
	}
	return n
}

// segments.Manifest describes the build as a snapshot created at now (truncated to
// the second, UTC).
func (b *Build) Manifest(now time.Time) *segments.Manifest {
	m := &segments.Manifest{Format: segments.ManifestFormat, CreatedAt: now.UTC().Truncate(time.Second), IDBits: b.IDBits}
	for _, s := range b.Segments {
		m.Segments = append(m.Segments, segments.ManifestSegment{
			Name: s.Name, Object: s.Name + segments.ObjectSuffix, Users: s.Users, Bytes: int64(len(s.Data)), SHA256: s.SHA256,
		})
	}
	m.Version = segments.VersionString(m.CreatedAt, m.IDBits, m.Segments)
	return m
}

// segments.Snapshot decodes the build into a snapshot without a store, through the
// same checks as Load (for a demo or a test that needs one in memory).
func (b *Build) Snapshot(now time.Time) (*segments.Snapshot, error) {
	m := b.Manifest(now)
	s, err := segments.Decode(m, b.objects())
	if err != nil {
		return nil, fmt.Errorf("snapshot of build %s: %w", m.Version, err)
	}
	return s, nil
}

// objects are the segment objects in manifest order.
func (b *Build) objects() [][]byte {
	out := make([][]byte, len(b.Segments))
	for i, s := range b.Segments {
		out[i] = s.Data
	}
	return out
}

// WriteSummary prints a table of the segments and the build's counters.
func (b *Build) WriteSummary(w io.Writer, elapsed time.Duration) error {
	rows := [][]string{{"segment", "users", "bytes", "bits/user"}}
	for _, s := range b.Segments {
		rows = append(rows, []string{s.Name, fmt.Sprint(s.Users), fmt.Sprint(len(s.Data)), bitsPerUser(int64(len(s.Data)), s.Users)})
	}
	rows = append(rows, []string{"total", fmt.Sprint(b.Users()), fmt.Sprint(b.Bytes()), bitsPerUser(b.Bytes(), b.Users())})
	widths := make([]int, len(rows[0]))
	for _, r := range rows {
		for i, c := range r {
			widths[i] = max(widths[i], len(c))
		}
	}
	var sb strings.Builder
	for _, r := range rows {
		// Names left-aligned, numbers right-aligned.
		fmt.Fprintf(&sb, "%-*s", widths[0], r[0])
		for i := 1; i < len(r); i++ {
			fmt.Fprintf(&sb, "  %*s", widths[i], r[i])
		}
		sb.WriteByte('\n')
	}
	fmt.Fprintf(&sb, "\nid bits %d, rows read %d, duplicate rows %d, bad lines %d, conflicts resolved %d, elapsed %s\n",
		b.IDBits, b.Rows, b.DuplicateRows, len(b.BadLines), b.ConflictsResolved, elapsed.Round(time.Millisecond))
	_, err := io.WriteString(w, sb.String())
	return err
}

func bitsPerUser(bytes int64, users uint64) string {
	if users == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", float64(bytes)*8/float64(users))
}
