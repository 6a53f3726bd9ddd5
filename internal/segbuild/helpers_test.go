package segbuild

import (
	"github.com/capper-dev/capper/internal/objstore"

	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/testenv"
)

// t0 is a fixed build time; versions built at t0 start with 20261121T160000Z.
var t0 = time.Date(2026, 11, 21, 16, 0, 0, 0, time.UTC)

func fixedNow(t time.Time) func() time.Time { return func() time.Time { return t } }

// buildCSV builds from CSV text read as one (re-readable) input named name.
func buildCSV(t testing.TB, opts BuilderOptions, name, csv string) (*Build, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(csv), 0o644); err != nil {
		t.Fatal(err)
	}
	in, err := FileInput(path, "")
	if err != nil {
		t.Fatal(err)
	}
	in.Name = name // shorter messages to match on
	b := NewBuilder(opts)
	if err := b.ReadInput(context.Background(), in); err != nil {
		return nil, err
	}
	return b.Finish(context.Background())
}

func mustBuildCSV(t testing.TB, opts BuilderOptions, csv string) *Build {
	t.Helper()
	b, err := buildCSV(t, opts, "in.csv", csv)
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	return b
}

// storeCase is one kind of real store.
type storeCase struct {
	name string
	open func(t *testing.T) objstore.Store
}

func storeCases() []storeCase {
	return []storeCase{
		{name: "dir", open: func(t *testing.T) objstore.Store { return openDir(t, t.TempDir()) }},
		{name: "s3", open: func(t *testing.T) objstore.Store { return openS3(t, objstore.S3Options{}) }},
	}
}

func openDir(t testing.TB, dir string) objstore.Store {
	t.Helper()
	st, err := objstore.Open(context.Background(), dir, objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// openS3 starts gofakes3 and opens a store on it through the real SDK and
// the default credential chain.
func openS3(t testing.TB, opts objstore.S3Options) objstore.Store {
	t.Helper()
	opts = startS3(t, opts)
	st, err := objstore.Open(context.Background(), "s3://capper/segments/prod", objstore.Options{S3: opts})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// startS3 starts gofakes3 (bucket "capper"), points the default credential
// chain at it and returns opts with its endpoint.
func startS3(t testing.TB, opts objstore.S3Options) objstore.S3Options {
	t.Helper()
	s3 := testenv.StartS3(t, "capper")
	s3.SetEnv(t)
	opts.Endpoint = s3.URL
	opts.UsePathStyle = true
	return opts
}

func timeHours(n int) time.Duration { return time.Duration(n) * time.Hour }

func putBytes(t testing.TB, st objstore.Store, key string, data []byte) {
	t.Helper()
	if err := st.Put(context.Background(), key, strings.NewReader(string(data))); err != nil {
		t.Fatal(err)
	}
}

func getBytes(t testing.TB, st objstore.Store, key string) []byte {
	t.Helper()
	rc, _, err := st.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func wantErrContains(t testing.TB, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("want an error containing %q, got nil", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("error %q does not contain %q", err, p)
		}
	}
}

func asErr[T error](t testing.TB, err error) T {
	t.Helper()
	var target T
	if !errors.As(err, &target) {
		t.Fatalf("error %v (%T) is not a %T", err, err, target)
	}
	return target
}
