package segments_test

import (
	"github.com/capper-dev/capper/internal/objstore"
	"github.com/capper-dev/capper/internal/segbuild"
	"github.com/capper-dev/capper/internal/segments"

	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
)

// publishSmall publishes smallCSV and returns its manifest.
func publishSmall(t *testing.T, st objstore.Store) *segments.Manifest {
	t.Helper()
	b := mustBuildCSV(t, segbuild.BuilderOptions{Segments: []string{"new", "active", "dormant"}}, smallCSV)
	m, err := segbuild.Publish(context.Background(), st, b, segbuild.PublishOptions{Now: fixedNow(t0)})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestLoadRejectsCorruptSnapshots(t *testing.T) {
	type corruption struct {
		name    string
		corrupt func(t *testing.T, st objstore.Store, m *segments.Manifest)
		want    func(m *segments.Manifest) []string
	}
	obj := func(m *segments.Manifest) string { return "snapshots/" + m.Version + "/new.roaring" }
	cases := []corruption{
		{
			name: "truncated object",
			corrupt: func(t *testing.T, st objstore.Store, m *segments.Manifest) {
				data := getBytes(t, st, obj(m))
				putBytes(t, st, obj(m), data[:len(data)-3])
			},
			want: func(m *segments.Manifest) []string {
				return []string{"load snapshot " + m.Version, "object " + obj(m), fmt.Sprintf("size mismatch (manifest %d bytes, got %d)", m.Segments[0].Bytes, m.Segments[0].Bytes-3)}
			},
		},
		{
			name: "longer object",
			corrupt: func(t *testing.T, st objstore.Store, m *segments.Manifest) {
				putBytes(t, st, obj(m), append(getBytes(t, st, obj(m)), 0))
			},
			want: func(m *segments.Manifest) []string {
				return []string{"object " + obj(m), fmt.Sprintf("size mismatch (manifest %d bytes, got %d)", m.Segments[0].Bytes, m.Segments[0].Bytes+1)}
			},
		},
		{
			name: "wrong sha256",
			corrupt: func(t *testing.T, st objstore.Store, m *segments.Manifest) {
				data := getBytes(t, st, obj(m))
				data[len(data)-1] ^= 0xff // same size, other content
				putBytes(t, st, obj(m), data)
			},
			want: func(m *segments.Manifest) []string {
				return []string{"object " + obj(m), "sha256 mismatch (manifest " + m.Segments[0].SHA256 + ", got "}
			},
		},
		{
			name:    "missing object",
			corrupt: func(t *testing.T, st objstore.Store, m *segments.Manifest) { deleteKey(t, st, obj(m)) },
			want: func(m *segments.Manifest) []string {
				return []string{"load snapshot " + m.Version, "object " + obj(m)}
			},
		},
		{
			name: "missing manifest",
			corrupt: func(t *testing.T, st objstore.Store, m *segments.Manifest) {
				deleteKey(t, st, "snapshots/"+m.Version+"/manifest.json")
			},
			want: func(m *segments.Manifest) []string {
				return []string{"load snapshot " + m.Version, "object snapshots/" + m.Version + "/manifest.json"}
			},
		},
		{
			name:    "missing LATEST",
			corrupt: func(t *testing.T, st objstore.Store, m *segments.Manifest) { deleteKey(t, st, "LATEST") },
			want:    func(m *segments.Manifest) []string { return []string{"load snapshot: read LATEST from "} },
		},
		{
			name: "garbage in LATEST",
			corrupt: func(t *testing.T, st objstore.Store, m *segments.Manifest) {
				putBytes(t, st, "LATEST", []byte("../../etc\n"))
			},
			want: func(m *segments.Manifest) []string {
				return []string{`LATEST in`, `version "../../etc" is not of the form`}
			},
		},
		{
			name: "manifest users disagree",
			corrupt: func(t *testing.T, st objstore.Store, m *segments.Manifest) {
				editManifest(t, st, m, func(m *segments.Manifest) { m.Segments[0].Users++ })
			},
			want: func(m *segments.Manifest) []string {
				return []string{"object " + obj(m), "holds 2 users, manifest says 3"}
			},
		},
		{
			name: "object path escapes the version",
			corrupt: func(t *testing.T, st objstore.Store, m *segments.Manifest) {
				editManifest(t, st, m, func(m *segments.Manifest) { m.Segments[0].Object = "../x.roaring" })
			},
			want: func(m *segments.Manifest) []string {
				return []string{`object name "../x.roaring" is not a plain file name`}
			},
		},
		{
			name: "invalid segment name",
			corrupt: func(t *testing.T, st objstore.Store, m *segments.Manifest) {
				editManifest(t, st, m, func(m *segments.Manifest) { m.Segments[0].Name = "none" })
			},
			want: func(m *segments.Manifest) []string { return []string{`segments[0]: segment name "none" is reserved`} },
		},
		{
			name: "unknown format",
			corrupt: func(t *testing.T, st objstore.Store, m *segments.Manifest) {
				editManifest(t, st, m, func(m *segments.Manifest) { m.Format = 2 })
			},
			want: func(m *segments.Manifest) []string { return []string{"format 2 is not supported"} },
		},
		{
			name: "overlapping segments",
			corrupt: func(t *testing.T, st objstore.Store, m *segments.Manifest) {
				// A well-formed object for "new" that also holds user 3,
				// which "active" holds: sizes and sha256 all match.
				bm := roaring.BitmapOf(1, 2, 3)
				data, err := bm.ToBytes()
				if err != nil {
					t.Fatal(err)
				}
				putBytes(t, st, obj(m), data)
				editManifest(t, st, m, func(m *segments.Manifest) {
					sum := sha256.Sum256(data)
					m.Segments[0].Users, m.Segments[0].Bytes, m.Segments[0].SHA256 = 3, int64(len(data)), hex.EncodeToString(sum[:])
				})
			},
			want: func(m *segments.Manifest) []string {
				return []string{"load snapshot " + m.Version, `segments "new" (object ` + obj(m) + `) and "active" (object snapshots/` + m.Version + `/active.roaring) share users`}
			},
		},
		{
			name: "undecodable object with matching sha256",
			corrupt: func(t *testing.T, st objstore.Store, m *segments.Manifest) {
				data := []byte("this is not a roaring bitmap")
				putBytes(t, st, obj(m), data)
				editManifest(t, st, m, func(m *segments.Manifest) {
					sum := sha256.Sum256(data)
					m.Segments[0].Bytes, m.Segments[0].SHA256 = int64(len(data)), hex.EncodeToString(sum[:])
				})
			},
			want: func(m *segments.Manifest) []string { return []string{"object " + obj(m) + ": decode:"} },
		},
	}
	for _, sc := range storeCases() {
		for _, c := range cases {
			t.Run(sc.name+"/"+c.name, func(t *testing.T) {
				st := sc.open(t)
				m := publishSmall(t, st)
				c.corrupt(t, st, m)
				s, err := segments.Load(context.Background(), st, segments.LoadOptions{})
				if s != nil {
					t.Fatalf("got a snapshot from a broken store")
				}
				wantErrContains(t, err, c.want(m)...)
				t.Log(err)
			})
		}
	}
}

func TestLoadAcceptRejects(t *testing.T) {
	st := openDir(t, t.TempDir())
	m := publishSmall(t, st)
	errUnknown := errors.New(`segment "dormant" is not in the config`)
	_, err := segments.Load(context.Background(), st, segments.LoadOptions{Accept: func(s *segments.Snapshot) error {
		if s.Has("dormant") {
			return errUnknown
		}
		return nil
	}})
	if !errors.Is(err, errUnknown) {
		t.Fatalf("err = %v", err)
	}
	wantErrContains(t, err, "load snapshot "+m.Version, "rejected")
}

func deleteKey(t *testing.T, st objstore.Store, key string) {
	t.Helper()
	if err := st.Delete(context.Background(), key); err != nil {
		t.Fatal(err)
	}
}

// editManifest rewrites the stored manifest (m keeps the published values).
func editManifest(t *testing.T, st objstore.Store, m *segments.Manifest, edit func(*segments.Manifest)) {
	t.Helper()
	cp := *m
	cp.Segments = append([]segments.ManifestSegment(nil), m.Segments...)
	edit(&cp)
	data, err := cp.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	putBytes(t, st, "snapshots/"+m.Version+"/manifest.json", data)
}

func TestSnapshotNilAndCurrentZeroValue(t *testing.T) {
	var s *segments.Snapshot
	if s.Lookup(1) != segments.None || s.Version() != "" || s.IDBits() != 0 || s.Segments() != nil || !s.CreatedAt().IsZero() || s.Has("new") {
		t.Fatal("nil snapshot must behave as an empty one")
	}
	var c segments.Current
	if c.Load() != nil || c.Lookup(1) != segments.None {
		t.Fatal("zero segments.Current must hold nil")
	}
	b := mustBuildCSV(t, segbuild.BuilderOptions{}, "1,new\n")
	snap, err := b.Snapshot(t0)
	if err != nil {
		t.Fatal(err)
	}
	c.Store(snap)
	if c.Lookup(1) != "new" || c.Load().Version() != b.Manifest(t0).Version {
		t.Fatal("segments.Current does not serve the stored snapshot")
	}
}

func TestLookupDoesNotAllocate(t *testing.T) {
	b := mustBuildCSV(t, segbuild.BuilderOptions{}, strings.Repeat("", 0)+"1,new\n70000,active\n5,dormant\n")
	s, err := b.Snapshot(t0)
	if err != nil {
		t.Fatal(err)
	}
	var c segments.Current
	c.Store(s)
	ids := []uint64{1, 70000, 5, 6, 1 << 33}
	allocs := testing.AllocsPerRun(1000, func() {
		for _, id := range ids {
			c.Lookup(id)
		}
	})
	if allocs != 0 {
		t.Fatalf("Lookup allocates %.1f times per run", allocs)
	}
}
