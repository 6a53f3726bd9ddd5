package objstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/smithy-go/logging"

	"github.com/capper-dev/capper/internal/testenv"
)

// TestS3MissingBucket: every operation on a bucket that was never created
// says so, and is not taken for a missing object.
func TestS3MissingBucket(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartS3(t, "capper")
	srv.SetEnv(t)
	st, err := Open(ctx, "s3://nope/segments", Options{S3: S3Options{Endpoint: srv.URL, UsePathStyle: true}})
	if err != nil {
		t.Fatal(err)
	}
	const want = "bucket nope does not exist"
	check := func(op string, err error) {
		t.Helper()
		wantErrContains(t, err, want)
		if errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: %v is taken for a missing object", op, err)
		}
	}
	_, _, err = st.Get(ctx, "LATEST")
	check("Get", err)
	wantErrContains(t, err, "s3://nope/segments/LATEST")
	_, _, err = st.GetIfChanged(ctx, "LATEST", "")
	check("GetIfChanged", err)
	_, err = st.Size(ctx, "LATEST")
	check("Size", err)
	check("Put", st.Put(ctx, "LATEST", strings.NewReader("v1\n")))
	_, err = st.List(ctx, "snapshots/")
	check("List", err)
	check("Delete", st.Delete(ctx, "LATEST"))

	// A missing object in a bucket that exists is still fs.ErrNotExist,
	// also for a HEAD (which has no error code to tell the two apart).
	ok, err := Open(ctx, "s3://capper/segments", Options{S3: S3Options{Endpoint: srv.URL, UsePathStyle: true}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ok.Size(ctx, "LATEST"); !errors.Is(err, fs.ErrNotExist) || strings.Contains(err.Error(), "bucket") {
		t.Fatalf("Size of a missing object: %v", err)
	}
}

// regionOf is the region the store's client signs with.
func regionOf(t *testing.T, st Store) string {
	t.Helper()
	return st.(*s3Store).client.Options().Region
}

// TestS3EndpointRegion: with a custom endpoint and no region configured
// anywhere, the region is DefaultEndpointRegion and the store works; any
// configured region wins.
func TestS3EndpointRegion(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartS3(t, "capper")
	withKeys := func(t *testing.T) {
		testenv.ClearAWSEnv(t)
		t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
		t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	}
	open := func(t *testing.T, opts S3Options) Store {
		t.Helper()
		opts.Endpoint, opts.UsePathStyle = srv.URL, true
		st, err := Open(ctx, "s3://capper/segments", Options{S3: opts})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}

	t.Run("none configured", func(t *testing.T) {
		withKeys(t)
		st := open(t, S3Options{})
		if got := regionOf(t, st); got != DefaultEndpointRegion {
			t.Fatalf("region %q, want %q", got, DefaultEndpointRegion)
		}
		if err := st.Put(ctx, "LATEST", strings.NewReader("v1\n")); err != nil {
			t.Fatal(err)
		}
		if data, err := ReadAll(ctx, st, "LATEST"); err != nil || string(data) != "v1\n" {
			t.Fatalf("ReadAll = %q, %v", data, err)
		}
	})
	t.Run("option", func(t *testing.T) {
		withKeys(t)
		if got := regionOf(t, open(t, S3Options{Region: "eu-west-3"})); got != "eu-west-3" {
			t.Fatalf("region %q", got)
		}
	})
	for _, name := range []string{"AWS_REGION", "AWS_DEFAULT_REGION"} {
		t.Run(name, func(t *testing.T) {
			withKeys(t)
			t.Setenv(name, "ap-south-1")
			if got := regionOf(t, open(t, S3Options{})); got != "ap-south-1" {
				t.Fatalf("region %q", got)
			}
		})
	}
	t.Run("profile", func(t *testing.T) {
		withKeys(t)
		cfg := filepath.Join(t.TempDir(), "config")
		if err := os.WriteFile(cfg, []byte("[profile minio]\nregion = sa-east-1\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Setenv("AWS_CONFIG_FILE", cfg)
		t.Setenv("AWS_PROFILE", "minio")
		if got := regionOf(t, open(t, S3Options{})); got != "sa-east-1" {
			t.Fatalf("region %q", got)
		}
	})
	t.Run("no endpoint: a region is required", func(t *testing.T) {
		// AWS itself needs a real region; without one, the SDK would fail
		// every request with "Invalid region: region was not a valid DNS
		// name". Open says what to set instead.
		withKeys(t)
		_, err := Open(ctx, "s3://capper/segments", Options{})
		wantErrContains(t, err, "no AWS region for s3://capper: set segments.s3.region in the config (or --s3-region), AWS_REGION, or a profile's region")
	})
}

// TestS3NoCredentials: with a custom endpoint and nothing in the default
// chain (the metadata service disabled, so nothing is probed), Open says
// what is missing.
func TestS3NoCredentials(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartS3(t, "capper")
	testenv.ClearAWSEnv(t)
	_, err := Open(ctx, "s3://capper/segments", Options{S3: S3Options{Endpoint: srv.URL, UsePathStyle: true}})
	wantErrContains(t, err, "no AWS credentials for s3://capper: set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile, or a role")

	// A profile's keys are enough.
	creds := filepath.Join(t.TempDir(), "credentials")
	if err := os.WriteFile(creds, []byte("[minio]\naws_access_key_id = test\naws_secret_access_key = test\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", creds)
	t.Setenv("AWS_PROFILE", "minio")
	st, err := Open(ctx, "s3://capper/segments", Options{S3: S3Options{Endpoint: srv.URL, UsePathStyle: true}})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Put(ctx, "LATEST", strings.NewReader("v1\n")); err != nil {
		t.Fatal(err)
	}
}

// TestS3SDKLogger: the SDK's own messages go to the store's slog logger as
// JSON lines (warnings always, retries only with debug on).
func TestS3SDKLogger(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartS3(t, "capper")
	srv.SetEnv(t)
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		var buf bytes.Buffer
		log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: level}))
		st, err := Open(ctx, "s3://capper/segments", Options{S3: S3Options{Endpoint: srv.URL, UsePathStyle: true, Logger: log}})
		if err != nil {
			t.Fatal(err)
		}
		o := st.(*s3Store).client.Options()
		if got, want := o.ClientLogMode.IsRetries(), level == slog.LevelDebug; got != want {
			t.Errorf("level %s: retries logged %v, want %v", level, got, want)
		}
		sdk := logging.WithContext(ctx, o.Logger)
		sdk.Logf(logging.Warn, "Response has no supported checksum. Not validating response payload.")
		sdk.Logf(logging.Debug, "retrying request S3/GetObject, attempt %d", 2)
		var lines []map[string]any
		for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatalf("level %s: not a JSON line: %q", level, l)
			}
			lines = append(lines, m)
		}
		want := 1
		if level == slog.LevelDebug {
			want = 2
		}
		if len(lines) != want {
			t.Fatalf("level %s: %d lines, want %d:\n%s", level, len(lines), want, buf.String())
		}
		if lines[0]["level"] != "WARN" || lines[0]["component"] != "aws-sdk" || !strings.HasPrefix(lines[0]["msg"].(string), "Response has no supported checksum") {
			t.Fatalf("warning logged as %v", lines[0])
		}
	}
	// Without a logger, nothing is printed anywhere (the SDK's default
	// writes plain text to stderr).
	st, err := Open(ctx, "s3://capper/segments", Options{S3: S3Options{Endpoint: srv.URL, UsePathStyle: true}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := st.(*s3Store).client.Options().Logger.(sdkLogger); !ok {
		t.Fatalf("SDK logger is %T", st.(*s3Store).client.Options().Logger)
	}
}
