package objstore

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/capper-dev/capper/internal/testenv"
)

func openDir(t testing.TB, dir string) Store {
	t.Helper()
	st, err := Open(context.Background(), dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// openS3 starts gofakes3 (bucket "capper") and opens s3://capper/segments/prod
// on it through the real SDK and the default credential chain.
func openS3(t testing.TB, opts S3Options) Store {
	t.Helper()
	s3 := testenv.StartS3(t, "capper")
	s3.SetEnv(t)
	opts.Endpoint = s3.URL
	opts.UsePathStyle = true
	st, err := Open(context.Background(), "s3://capper/segments/prod", Options{S3: opts})
	if err != nil {
		t.Fatal(err)
	}
	return st
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

// TestStores: Put, Get, Size, ReadAll, GetIfChanged, List and Delete behave
// the same on a directory and on S3.
func TestStores(t *testing.T) {
	ctx := context.Background()
	for name, open := range map[string]func(t *testing.T) Store{
		"dir": func(t *testing.T) Store { return openDir(t, t.TempDir()) },
		"s3":  func(t *testing.T) Store { return openS3(t, S3Options{}) },
	} {
		t.Run(name, func(t *testing.T) {
			st := open(t)
			if err := st.Put(ctx, "a/b/obj", strings.NewReader("hello")); err != nil {
				t.Fatal(err)
			}
			if n, err := st.Size(ctx, "a/b/obj"); err != nil || n != 5 {
				t.Fatalf("Size = %d, %v", n, err)
			}
			if _, err := st.Size(ctx, "a/b/missing"); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("Size of a missing object: %v", err)
			}
			data, err := ReadAll(ctx, st, "a/b/obj")
			if err != nil || string(data) != "hello" {
				t.Fatalf("ReadAll = %q, %v", data, err)
			}
			got, etag, err := st.GetIfChanged(ctx, "a/b/obj", "")
			if err != nil || string(got) != "hello" || etag == "" {
				t.Fatalf("GetIfChanged = %q %q %v", got, etag, err)
			}
			if _, _, err := st.GetIfChanged(ctx, "a/b/obj", etag); !errors.Is(err, ErrNotModified) {
				t.Fatalf("unchanged GetIfChanged: %v", err)
			}
			if err := st.Put(ctx, "a/b/obj", strings.NewReader("bye")); err != nil {
				t.Fatal(err)
			}
			if got, _, err := st.GetIfChanged(ctx, "a/b/obj", etag); err != nil || string(got) != "bye" {
				t.Fatalf("changed GetIfChanged = %q %v", got, err)
			}
			keys, err := st.List(ctx, "a/")
			if err != nil || len(keys) != 1 || keys[0] != "a/b/obj" {
				t.Fatalf("List = %v %v", keys, err)
			}
			for range 2 { // a missing object is not an error
				if err := st.Delete(ctx, "a/b/obj"); err != nil {
					t.Fatal(err)
				}
			}
			if keys, err := st.List(ctx, "a/"); err != nil || len(keys) != 0 {
				t.Fatalf("List after Delete = %v %v", keys, err)
			}
		})
	}
}

// TestS3MultipartPut puts an object larger than the part size, so the
// uploader must use a multipart upload, and reads it back intact.
func TestS3MultipartPut(t *testing.T) {
	ctx := context.Background()
	st := openS3(t, S3Options{PartSize: 5 << 20})
	data := make([]byte, 7<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	if err := st.Put(ctx, "big", bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if got := st.(*s3Store).multipartUploads.Load(); got != 1 {
		t.Fatalf("multipart uploads = %d, want 1", got)
	}
	rc, size, err := st.Get(ctx, "big")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	back, err := io.ReadAll(rc)
	if err != nil || size != int64(len(data)) || !bytes.Equal(back, data) {
		t.Fatalf("read back %d bytes (size %d), err %v; want the %d bytes written", len(back), size, err, len(data))
	}
}

func TestOpenStoreURLs(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for _, u := range []string{dir, "file://" + dir} {
		st, err := Open(ctx, u, Options{})
		if err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		if st.String() != dir {
			t.Fatalf("%s opened %s", u, st)
		}
	}
	for u, want := range map[string]string{
		"":                  "empty location",
		"http://x/y":        "unsupported scheme",
		"file://host/x":     "want file:///absolute/path",
		"s3:///prefix-only": "no bucket",
	} {
		_, err := Open(ctx, u, Options{})
		wantErrContains(t, err, want)
	}
	_, _, err := openDir(t, dir).Get(ctx, "LATEST")
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing object: %v, want fs.ErrNotExist", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "LATEST")); err == nil {
		t.Fatal("nothing should have been written")
	}
}

func TestS3MissingObjectIsNotExist(t *testing.T) {
	st := openS3(t, S3Options{})
	_, _, err := st.Get(context.Background(), "LATEST")
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing object: %v, want fs.ErrNotExist", err)
	}
	wantErrContains(t, err, "s3://capper/segments/prod/LATEST")
}
