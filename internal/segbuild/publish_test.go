package segbuild

import (
	"github.com/capper-dev/capper/internal/objstore"
	"github.com/capper-dev/capper/internal/segments"

	"context"
	"encoding/json"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

const smallCSV = "user_id,segment\n1,new\n2,new\n3,active\n10,active\n11,dormant\n"

func TestPublishLoadRoundTrip(t *testing.T) {
	for _, sc := range storeCases() {
		t.Run(sc.name, func(t *testing.T) {
			ctx := context.Background()
			st := sc.open(t)
			b := mustBuildCSV(t, BuilderOptions{Segments: []string{"new", "active", "dormant", "lapsed"}}, smallCSV)
			m, err := Publish(ctx, st, b, PublishOptions{Now: fixedNow(t0)})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(m.Version, "20261121T160000Z-") || segments.ValidateVersion(m.Version) != nil {
				t.Fatalf("version %q", m.Version)
			}
			if got := strings.TrimSpace(string(getBytes(t, st, "LATEST"))); got != m.Version {
				t.Fatalf("LATEST = %q, want %q", got, m.Version)
			}
			// The manifest on the store is the documented shape.
			var onDisk map[string]any
			if err := json.Unmarshal(getBytes(t, st, "snapshots/"+m.Version+"/manifest.json"), &onDisk); err != nil {
				t.Fatal(err)
			}
			if onDisk["format"] != 1.0 || onDisk["id_bits"] != 32.0 || onDisk["created_at"] != "2026-11-21T16:00:00Z" || onDisk["version"] != m.Version {
				t.Fatalf("manifest %v", onDisk)
			}
			segs := onDisk["segments"].([]any)
			first := segs[0].(map[string]any)
			if len(segs) != 4 || first["name"] != "new" || first["object"] != "new.roaring" || first["users"] != 2.0 {
				t.Fatalf("manifest segments %v", segs)
			}

			s, err := segments.Load(ctx, st, segments.LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if s.Version() != m.Version || s.IDBits() != 32 || !s.CreatedAt().Equal(t0) {
				t.Fatalf("loaded %s bits %d created %s", s.Version(), s.IDBits(), s.CreatedAt())
			}
			want := map[uint64]string{1: "new", 2: "new", 3: "active", 10: "active", 11: "dormant", 0: segments.None, 4: segments.None, 1 << 40: segments.None}
			for id, seg := range want {
				if got := s.Lookup(id); got != seg {
					t.Errorf("Lookup(%d) = %q, want %q", id, got, seg)
				}
			}
			var names []string
			for _, in := range s.Segments() {
				names = append(names, in.Name)
			}
			if !slices.Equal(names, []string{"new", "active", "dormant", "lapsed"}) {
				t.Fatalf("segments %v: want the config's order, the empty one included", names)
			}
			if in := s.Segments()[3]; in.Users != 0 || in.Bytes == 0 || len(in.SHA256) != 64 {
				t.Fatalf("empty segment info %+v", in)
			}
		})
	}
}

// TestS3MultipartRoundTrip publishes an object larger than the part size,
// so the uploader must use a multipart upload, and loads it back intact.
func TestS3MultipartRoundTrip(t *testing.T) {
	ctx := context.Background()
	st := openS3(t, objstore.S3Options{PartSize: 5 << 20})
	bld := NewBuilder(BuilderOptions{})
	// Every 17th id: array containers of ~3855 ids, 2 bytes per id, so
	// 3.6M ids make a ~7 MB object: two parts.
	const n = 3_600_000
	for i := uint64(0); i < n; i++ {
		seg := "big"
		if i%1000 == 0 {
			seg = "small"
		}
		if err := bld.Add(i*17, seg, Position{Source: "gen", Line: int64(i + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	b, err := bld.Finish(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if size := len(b.Segments[0].Data); b.Segments[0].Name != "big" || size < 6<<20 {
		t.Fatalf("segment %s is %d bytes; the test needs more than one 5 MiB part", b.Segments[0].Name, size)
	}
	m, err := Publish(ctx, st, b, PublishOptions{Now: fixedNow(t0)})
	if err != nil {
		t.Fatal(err)
	}
	s, err := segments.Load(ctx, st, segments.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Version() != m.Version || s.Users() != n {
		t.Fatalf("loaded %s with %d users", s.Version(), s.Users())
	}
	for _, i := range []uint64{0, 1, 999, 1000, 123_456, n - 1} {
		want := "big"
		if i%1000 == 0 {
			want = "small"
		}
		if got := s.Lookup(i * 17); got != want {
			t.Errorf("Lookup(%d) = %q, want %q", i*17, got, want)
		}
		if got := s.Lookup(i*17 + 1); got != segments.None {
			t.Errorf("Lookup(%d) = %q, want none", i*17+1, got)
		}
	}
}

func TestRetentionKeepsNewestAndLatest(t *testing.T) {
	for _, sc := range storeCases() {
		t.Run(sc.name, func(t *testing.T) {
			ctx := context.Background()
			st := sc.open(t)
			var versions []string
			for i := range 7 {
				b := mustBuildCSV(t, BuilderOptions{}, "1,new\n2,active\n")
				m, err := Publish(ctx, st, b, PublishOptions{Keep: 3, Now: fixedNow(t0.Add(time.Duration(i) * time.Hour))})
				if err != nil {
					t.Fatal(err)
				}
				versions = append(versions, m.Version)
			}
			if got := listVersions(t, st); !slices.Equal(got, versions[4:]) {
				t.Fatalf("after 7 publishes with keep 3: %v, want %v", got, versions[4:])
			}
			// LATEST pointing at an old version (a rollback) protects it.
			putBytes(t, st, "LATEST", []byte(versions[4]+"\n"))
			deleted, err := Prune(ctx, st, 1)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(deleted, []string{versions[5]}) {
				t.Fatalf("deleted %v, want %v", deleted, versions[5:6])
			}
			if got := listVersions(t, st); !slices.Equal(got, []string{versions[4], versions[6]}) {
				t.Fatalf("after prune keep 1: %v", got)
			}
			if _, err := segments.Load(ctx, st, segments.LoadOptions{}); err != nil {
				t.Fatalf("LATEST's version must still load: %v", err)
			}
		})
	}
}

func listVersions(t *testing.T, st objstore.Store) []string {
	t.Helper()
	keys, err := st.List(context.Background(), "snapshots/")
	if err != nil {
		t.Fatal(err)
	}
	var vs []string
	for _, k := range keys {
		v, _, _ := strings.Cut(strings.TrimPrefix(k, "snapshots/"), "/")
		if !slices.Contains(vs, v) {
			vs = append(vs, v)
		}
	}
	slices.Sort(vs)
	return vs
}

func TestDirStoreLeavesNoTempFilesOrEmptyDirs(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := openDir(t, "file://"+dir)
	for i := range 3 {
		b := mustBuildCSV(t, BuilderOptions{}, "1,new\n")
		if _, err := Publish(ctx, st, b, PublishOptions{Keep: 1, Now: fixedNow(t0.Add(time.Duration(i) * time.Minute))}); err != nil {
			t.Fatal(err)
		}
	}
	var files []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(dir, p)
		files = append(files, rel)
		return nil
	})
	if len(files) != 6 { // ., LATEST, snapshots, snapshots/V, manifest, new.roaring
		t.Fatalf("store holds %v", files)
	}
}
