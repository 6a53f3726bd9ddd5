package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/capper-dev/capper/internal/objstore"
	"github.com/capper-dev/capper/internal/segments"
	"github.com/capper-dev/capper/internal/testenv"
)

const testConfig = `capping:
  segments:
    - name: new
      limits: [{name: daily, window: 24h, max: 1}, {name: weekly, window: 168h, max: 3}]
    - name: active
      limits: [{name: daily, window: 24h, max: 3}]
    - name: dormant
      limits: [{name: daily, window: 24h, max: 1}]
`

// buildBinary compiles segment-builder as a user would get it.
func buildBinary(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "segment-builder")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

type result struct {
	code           int
	stdout, stderr string
}

func runBinary(t *testing.T, bin string, stdin []byte, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Stdin = bytes.NewReader(stdin)
	cmd.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{code: code, stdout: out.String(), stderr: errOut.String()}
}

// want checks the exit code, and that stdout and stderr contain the given
// strings; stderr's JSON log lines are read as their message and values
// (see logText). A failed build (exit 1) says so in JSON lines only.
func (r result) want(t *testing.T, code int, stdout, stderr []string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, code, r.stdout, r.stderr)
	}
	for _, s := range stdout {
		if !strings.Contains(r.stdout, s) {
			t.Fatalf("stdout does not contain %q:\n%s", s, r.stdout)
		}
	}
	logs := logText(r.stderr)
	for _, s := range stderr {
		if !strings.Contains(logs, s) {
			t.Fatalf("stderr does not contain %q:\n%s", s, r.stderr)
		}
	}
	if code == 1 {
		for _, l := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
			if !json.Valid([]byte(l)) {
				t.Fatalf("stderr line %q is not a JSON log line:\n%s", l, r.stderr)
			}
		}
	}
}

// logText is stderr with every JSON log line replaced by its message and
// its values (strings as they are, lists one item a line); other lines are
// kept.
func logText(stderr string) string {
	var b strings.Builder
	for _, l := range strings.Split(stderr, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) != nil {
			b.WriteString(l + "\n")
			continue
		}
		for k, v := range m {
			if k == "time" || k == "level" {
				continue
			}
			switch v := v.(type) {
			case []any:
				for _, item := range v {
					fmt.Fprintf(&b, "%v\n", item)
				}
			default:
				fmt.Fprintf(&b, "%v\n", v)
			}
		}
	}
	return b.String()
}

func write(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func gzipped(t *testing.T, s string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write([]byte(s))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func load(t *testing.T, url string, opts objstore.Options) *segments.Snapshot {
	t.Helper()
	st, err := objstore.Open(context.Background(), url, opts)
	if err != nil {
		t.Fatal(err)
	}
	s, err := segments.Load(context.Background(), st, segments.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func wantNothingPublished(t *testing.T, out string) {
	t.Helper()
	if _, err := os.Stat(out); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a failed build wrote %s (%v)", out, err)
	}
}

func TestBinary(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	cfg := write(t, dir, "capper.yaml", testConfig)

	t.Run("files, directory and config", func(t *testing.T) {
		in := write(t, dir, "rows/a.csv", "user_id,segment\n1,new\n2,new\n3,active\n")
		write(t, dir, "lists/active.txt", "10\n11\n")
		out := filepath.Join(t.TempDir(), "store")
		r := runBinary(t, bin, nil, nil, "--input", in, "--input", filepath.Join(dir, "lists"), "--out", out, "--config", cfg)
		r.want(t, 0, []string{"segment  users  bytes  bits/user", "new          2", "active       3", "dormant      0", "total        5", "rows read 5", "published "}, nil)
		s := load(t, out, objstore.Options{})
		for id, want := range map[uint64]string{1: "new", 2: "new", 3: "active", 10: "active", 11: "active", 12: segments.None} {
			if got := s.Lookup(id); got != want {
				t.Errorf("Lookup(%d) = %q, want %q", id, got, want)
			}
		}
		var names []string
		for _, in := range s.Segments() {
			names = append(names, in.Name)
		}
		if strings.Join(names, ",") != "new,active,dormant" {
			t.Fatalf("segments %v: want the config's order", names)
		}
		if !strings.Contains(r.stdout, "published "+s.Version()+" to "+out) {
			t.Fatalf("stdout names another version:\n%s", r.stdout)
		}
	})

	t.Run("gzip on stdin, file URL out", func(t *testing.T) {
		out := t.TempDir()
		r := runBinary(t, bin, gzipped(t, "5\tnew\n6\tactive\n"), nil, "--input", "-", "--out", "file://"+out)
		r.want(t, 0, []string{"rows read 2"}, nil)
		s := load(t, "file://"+out, objstore.Options{})
		if s.Lookup(5) != "new" || s.Lookup(6) != "active" {
			t.Fatal("wrong lookups")
		}
	})

	t.Run("64-bit ids", func(t *testing.T) {
		out := t.TempDir()
		rows := fmt.Sprintf("%d,new\n%d,active\n", uint64(math.MaxUint64), uint64(7))
		runBinary(t, bin, []byte(rows), nil, "-i", "-", "-o", out).want(t, 0, []string{"id bits 64"}, nil)
		s := load(t, out, objstore.Options{})
		if s.IDBits() != 64 || s.Lookup(math.MaxUint64) != "new" || s.Lookup(7) != "active" {
			t.Fatalf("bits %d", s.IDBits())
		}
		var m map[string]any
		data, err := os.ReadFile(filepath.Join(out, "snapshots", s.Version(), "manifest.json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(data, &m); err != nil || m["id_bits"] != 64.0 {
			t.Fatalf("manifest id_bits: %v %v", m["id_bits"], err)
		}
	})

	t.Run("conflict fails with both positions", func(t *testing.T) {
		a := write(t, dir, "conflict/a.csv", "1,new\n2,new\n")
		b := write(t, dir, "conflict/b.csv", "9,active\n2,active\n")
		out := filepath.Join(t.TempDir(), "store")
		r := runBinary(t, bin, nil, nil, "--input", a, "--input", b, "--out", out)
		r.want(t, 1, nil, []string{"build failed, nothing published", "1 user is in more than one segment",
			fmt.Sprintf(`"new" at %s:2 and "active" at %s:2`, a, b)})
		if strings.Contains(r.stderr, "user 2") {
			t.Fatalf("a user id is logged above debug:\n%s", r.stderr)
		}
		wantNothingPublished(t, out)
		// At debug, the user ids too.
		r = runBinary(t, bin, nil, nil, "--input", a, "--input", b, "--out", out, "--log-level", "debug")
		r.want(t, 1, nil, []string{fmt.Sprintf(`user 2: "new" at %s:2 and "active" at %s:2`, a, b)})
	})

	t.Run("conflict first seen on stdin", func(t *testing.T) {
		b := write(t, dir, "conflict/c.csv", "4,active\n")
		r := runBinary(t, bin, []byte("4,new\n"), nil, "--input", "-", "--input", b, "--dry-run")
		r.want(t, 1, nil, []string{fmt.Sprintf(`"new" at <stdin> (line not kept: stdin is read once) and "active" at %s:1`, b)})
	})

	t.Run("priority resolves by config order", func(t *testing.T) {
		a := write(t, dir, "prio/a.csv", "1,dormant\n2,active\n1,active\n2,new\n3,dormant\n")
		out := t.TempDir()
		r := runBinary(t, bin, nil, nil, "--input", a, "--out", out, "--config", cfg, "--on-conflict", "priority")
		r.want(t, 0, []string{"conflicts resolved 2"}, nil)
		s := load(t, out, objstore.Options{})
		if s.Lookup(1) != "active" || s.Lookup(2) != "new" || s.Lookup(3) != "dormant" {
			t.Fatalf("lookups %s %s %s", s.Lookup(1), s.Lookup(2), s.Lookup(3))
		}
	})

	t.Run("malformed line fails, nothing published", func(t *testing.T) {
		a := write(t, dir, "bad/a.csv", "user_id,segment\n1,new\noops\n2,new\n")
		out := filepath.Join(t.TempDir(), "store")
		r := runBinary(t, bin, nil, nil, "--input", a, "--out", out)
		r.want(t, 1, nil, []string{fmt.Sprintf(`%s:3: want 2 fields, user_id,segment`, a)})
		wantNothingPublished(t, out)

		r = runBinary(t, bin, nil, nil, "--input", a, "--out", out, "--max-errors", "1")
		r.want(t, 0, []string{"bad lines 1"}, []string{"skipped 1 malformed lines (--max-errors=1)", fmt.Sprintf(`%s:3: want 2 fields`, a)})

		// A malformed line's content may hold a user id: only at debug.
		b := write(t, dir, "bad/b.csv", "4242;new\n1x,new\n3,new\n")
		r = runBinary(t, bin, nil, nil, "--input", b, "--dry-run", "--max-errors", "5", "--log-format", "text")
		r.want(t, 0, nil, []string{"level=WARN", fmt.Sprintf(`%s:1: want 2 fields, user_id,segment`, b), fmt.Sprintf(`%s:2: user_id \"…\" is not`, b)})
		if strings.Contains(r.stderr, "4242") || strings.Contains(r.stderr, "1x") {
			t.Fatalf("a malformed line's content is logged above debug:\n%s", r.stderr)
		}
		r = runBinary(t, bin, nil, nil, "--input", b, "--dry-run", "--max-errors", "5", "--log-level", "debug")
		r.want(t, 0, nil, []string{`(line "4242;new")`})
	})

	t.Run("unknown segment lists the config's", func(t *testing.T) {
		a := write(t, dir, "unknown/a.csv", "1,new\n2,vip\n")
		r := runBinary(t, bin, nil, nil, "--input", a, "--config", cfg, "--dry-run")
		r.want(t, 1, nil, []string{fmt.Sprintf(`%s:2: unknown segment "vip" (the config's segments are: new, active, dormant)`, a)})
	})

	t.Run("dry run publishes nothing", func(t *testing.T) {
		a := write(t, dir, "dry/a.csv", "1,new\n")
		out := filepath.Join(t.TempDir(), "store")
		r := runBinary(t, bin, nil, nil, "--input", a, "--out", out, "--dry-run")
		r.want(t, 0, []string{"dry run: nothing published (version would be "}, nil)
		wantNothingPublished(t, out)
	})

	t.Run("usage errors", func(t *testing.T) {
		a := write(t, dir, "usage/a.csv", "1,new\n")
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"--out", t.TempDir()}, "missing --input"},
			{[]string{"--input", a}, "missing --out"},
			{[]string{"--input", a, "--out", "x", "--on-conflict", "priority"}, "--on-conflict=priority needs --config for the segment order"},
			{[]string{"--input", a, "--out", "x", "--on-conflict", "first"}, "--on-conflict must be one of"},
			{[]string{"--input", a, "--out", "x", "--bogus"}, "unknown flag --bogus"},
			{[]string{"--input", a, "--out", "x", "--config", filepath.Join(dir, "missing.yaml")}, "missing.yaml"},
		} {
			// The error, then the usage the CLI reference promises.
			runBinary(t, bin, nil, nil, c.args...).want(t, 2, nil, []string{c.want, "Usage: segment-builder"})
		}
		runBinary(t, bin, nil, nil, "--help").want(t, 0, []string{"Usage: segment-builder", "--on-conflict", "--log-format", "version"}, nil)
		runBinary(t, bin, nil, nil, "--input", a, "--out", "x", "--log-format", "xml").want(t, 2, nil, []string{"--log-format must be one of"})
		runBinary(t, bin, nil, nil, "version", "--bogus").want(t, 2, nil, []string{"unknown flag --bogus"})
		runBinary(t, bin, nil, nil, "--input", filepath.Join(dir, "nope.csv"), "--dry-run").want(t, 1, nil, []string{"nope.csv: no such file or directory"})
	})

	t.Run("version", func(t *testing.T) {
		runBinary(t, bin, nil, nil, "version").want(t, 0, []string{"segment-builder dev (go1.", ", revision "}, nil)
	})

	t.Run("s3 errors and the region default", func(t *testing.T) {
		s3 := testenv.StartS3(t, "capper")
		a := write(t, dir, "s3/b.csv", "1,new\n")
		keys := append(testenv.NoAWSEnv(t), "AWS_ACCESS_KEY_ID="+s3.AccessKey, "AWS_SECRET_ACCESS_KEY="+s3.SecretKey)
		// No region anywhere: the custom endpoint gets us-east-1.
		runBinary(t, bin, nil, keys, "--input", a, "--out", "s3://capper/noregion", "--s3-endpoint", s3.URL, "--s3-path-style").
			want(t, 0, []string{"to s3://capper/noregion"}, nil)
		r := runBinary(t, bin, nil, keys, "--input", a, "--out", "s3://nope/segments", "--s3-endpoint", s3.URL, "--s3-path-style")
		r.want(t, 1, nil, []string{"bucket nope does not exist"})
		if r.stdout != "" {
			t.Fatalf("built before finding that the bucket is missing:\n%s", r.stdout)
		}
		runBinary(t, bin, nil, keys, "--input", "s3://nope/in.csv", "--dry-run", "--s3-endpoint", s3.URL, "--s3-path-style").
			want(t, 1, nil, []string{"bucket nope does not exist"})
		runBinary(t, bin, nil, testenv.NoAWSEnv(t), "--input", a, "--out", "s3://capper/segments", "--s3-endpoint", s3.URL, "--s3-path-style").
			want(t, 1, nil, []string{"no AWS credentials for s3://capper: set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile, or a role"})
	})

	t.Run("s3 out through the default credential chain", func(t *testing.T) {
		s3 := testenv.StartS3(t, "capper")
		env := []string{"AWS_ACCESS_KEY_ID=" + s3.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s3.SecretKey, "AWS_REGION=" + s3.Region, "AWS_EC2_METADATA_DISABLED=true"}
		a := write(t, dir, "s3/a.csv", "1,new\n2,active\n")
		r := runBinary(t, bin, nil, env, "--input", a, "--out", "s3://capper/segments", "--s3-endpoint", s3.URL, "--s3-path-style")
		r.want(t, 0, []string{"to s3://capper/segments"}, nil)
		s3.SetEnv(t)
		s := load(t, "s3://capper/segments", objstore.Options{S3: objstore.S3Options{Endpoint: s3.URL, UsePathStyle: true}})
		if s.Lookup(1) != "new" || s.Lookup(2) != "active" {
			t.Fatal("wrong lookups from S3")
		}
	})

	t.Run("campaign plans", func(t *testing.T) {
		store := t.TempDir()
		pdir := t.TempDir()
		write(t, pdir, "users.csv", "1\n2\n3\n")
		plan := `campaign: cart-rescue
priority: high
starts: 2099-11-24T18:00:00Z
ends: 2099-11-24T20:00:00Z
message: {channel: push, category: marketing}
audience: [users.csv]
`
		good := write(t, pdir, "plan.yaml", plan)
		r := runBinary(t, bin, nil, nil, "plan", "publish", good, "--to", store, "--config", cfg)
		r.want(t, 0, []string{"published plan ", "of campaign cart-rescue to " + store, "priority high", "3 users"}, nil)
		runBinary(t, bin, nil, nil, "plan", "list", "--from", store).
			want(t, 0, []string{"cart-rescue  high", "2099-11-24T18:00:00Z", "push marketing", "1 plans in " + store, "1 in force, 0 ended"}, nil)

		// Bad plans name the field (or the line), and publish nothing.
		latest := func() string {
			b, err := os.ReadFile(filepath.Join(store, "LATEST"))
			if err != nil {
				t.Fatal(err)
			}
			return string(b)
		}
		before := latest()
		for _, c := range []struct{ name, from, to, want string }{
			{"unknown channel", "channel: push", "channel: fax", `message.channel: "fax" is not one of the policy's channels`},
			{"window ends before it starts", "ends: 2099-11-24T20:00:00Z", "ends: 2099-11-24T17:00:00Z", "ends: 2099-11-24T17:00:00Z is not after starts"},
			{"bad audience line", "users.csv", "bad.csv", "bad.csv:2: "},
			{"unknown key", "audience:", "audiences:", "line 6"},
		} {
			write(t, pdir, "bad.csv", "1\n12x\n")
			bad := write(t, pdir, "bad-plan.yaml", strings.Replace(plan, c.from, c.to, 1))
			r := runBinary(t, bin, nil, nil, "plan", "publish", bad, "--to", store, "--config", cfg)
			if r.code == 0 || !strings.Contains(r.stderr, c.want) {
				t.Fatalf("%s: exit %d, stderr lacks %q:\n%s", c.name, r.code, c.want, r.stderr)
			}
			// An audience line's content may be a user id: only at debug.
			if strings.Contains(r.stderr, "12x") {
				t.Fatalf("%s: a malformed audience line's content is logged above debug:\n%s", c.name, r.stderr)
			}
			if latest() != before {
				t.Fatalf("%s: a bad plan changed the active set", c.name)
			}
		}
		// The line's content at debug; a tolerated line named, not shown.
		badPlan := write(t, pdir, "bad-plan.yaml", strings.Replace(plan, "users.csv", "bad.csv", 1))
		r = runBinary(t, bin, nil, nil, "plan", "publish", badPlan, "--to", store, "--config", cfg, "--log-level", "debug")
		r.want(t, 1, nil, []string{`12x`})
		r = runBinary(t, bin, nil, nil, "plan", "publish", badPlan, "--to", store, "--config", cfg, "--max-errors", "1")
		r.want(t, 0, []string{"1 users"}, []string{"skipped 1 malformed lines (--max-errors=1)", "bad.csv:2: "})
		if strings.Contains(r.stderr, "12x") {
			t.Fatalf("a skipped audience line's content is logged above debug:\n%s", r.stderr)
		}
		runBinary(t, bin, nil, nil, "plan", "withdraw", "cart-rescue", "--from", store).
			want(t, 0, []string{"withdrew the plan of campaign cart-rescue"}, nil)
		runBinary(t, bin, nil, nil, "plan", "list", "--from", store).want(t, 0, []string{"0 plans in " + store}, nil)
		r = runBinary(t, bin, nil, nil, "plan", "withdraw", "cart-rescue", "--from", store)
		if r.code == 0 || !strings.Contains(r.stderr, `no active plan of campaign "cart-rescue"`) {
			t.Fatalf("withdrawing twice: exit %d\n%s", r.code, r.stderr)
		}
	})
}
