package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/policy"
	"github.com/capper-dev/capper/internal/testenv"
)

// TestCompletion: `capper completion SHELL` prints a script for each shell
// that knows every command; the shells that are installed accept it, and
// bash and fish complete the commands and an enum flag's values with it.
func TestCompletion(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish"} {
		out, errOut, code := capper(t, nil, "completion", shell)
		if code != 0 || strings.TrimSpace(out) == "" {
			t.Fatalf("completion %s: exit %d, %d bytes\n%s", shell, code, len(out), errOut)
		}
		for _, cmd := range []string{"run", "check-config", "inspect", "migrate", "version", "completion", "config"} {
			if !strings.Contains(out, cmd) {
				t.Errorf("%s completion does not mention %q:\n%s", shell, cmd, out)
			}
		}
		script := filepath.Join(t.TempDir(), "capper."+shell)
		if err := os.WriteFile(script, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := exec.LookPath(shell); err != nil {
			t.Logf("%s is not installed: its script is not run", shell)
			continue
		}
		if b, err := exec.Command(shell, "-n", script).CombinedOutput(); err != nil {
			t.Errorf("%s -n rejects the script: %v\n%s", shell, err, b)
		}
		var complete func(line string) string
		switch shell {
		case "bash":
			complete = func(line string) string {
				words := strings.Fields(line)
				if strings.HasSuffix(line, " ") {
					words = append(words, "")
				}
				quoted := make([]string, len(words))
				for i, w := range words {
					quoted[i] = "'" + w + "'"
				}
				prog := fmt.Sprintf(`source %s; COMP_WORDS=(%s); COMP_CWORD=%d; _capper_completions; echo "${COMPREPLY[*]}"`,
					script, strings.Join(quoted, " "), len(words)-1)
				return shellOutput(t, "bash", "-c", prog)
			}
		case "fish":
			complete = func(line string) string {
				return shellOutput(t, "fish", "-c", fmt.Sprintf("source %s; complete -C '%s'", script, line))
			}
		default:
			continue
		}
		cases := map[string][]string{
			"capper ":                  {"run", "check-config", "inspect", "migrate", "version", "completion"},
			"capper inspect --output ": {"table", "json"},
		}
		if shell == "bash" { // king's fish script completes no positional arguments
			cases["capper completion "] = []string{"bash", "zsh", "fish"}
		}
		for line, want := range cases {
			got := complete(line)
			for _, w := range want {
				if !slices.Contains(strings.Fields(got), w) {
					t.Errorf("%s completes %q with %q, want %q among them", shell, line, got, w)
				}
			}
		}
	}
	if _, errOut, code := capper(t, nil, "completion", "tcsh"); code != 2 || !strings.Contains(errOut, `"bash","zsh","fish"`) {
		t.Errorf("completion tcsh: exit %d, %q; want 2 naming the shells", code, errOut)
	}
}

func shellOutput(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}

func mustCapper(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, code := capper(t, nil, args...)
	if code != 0 {
		t.Fatalf("capper %v: exit %d\n%s", args, code, errOut)
	}
	return out
}

// jsonLines decodes every line of a log; a line that is not a JSON object
// fails the test.
func jsonLines(t *testing.T, log string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimRight(log, "\n"), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not a JSON log line: %q\nwhole log:\n%s", l, log)
		}
		lines = append(lines, m)
	}
	return lines
}

// findLine returns the first line at level whose msg or error contains s.
func findLine(t *testing.T, lines []map[string]any, level, s string) map[string]any {
	t.Helper()
	for _, l := range lines {
		msg, _ := l["msg"].(string)
		errText, _ := l["error"].(string)
		if l["level"] == level && (strings.Contains(msg, s) || strings.Contains(errText, s)) {
			return l
		}
	}
	t.Fatalf("no %s line mentions %q in %v", level, s, lines)
	return nil
}

// TestRunFailsInJSON: whatever makes `capper run` exit, it says it in JSON
// lines on stderr, as the rest of its log, including the warning about
// unknown CAPPER_* variables.
func TestRunFailsInJSON(t *testing.T) {
	dir := t.TempDir()

	t.Run("config cannot be loaded", func(t *testing.T) {
		bad := filepath.Join(dir, "bad.yaml")
		if err := os.WriteFile(bad, []byte("worker:\n  batch_sise: 10\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		out, errOut, code := capper(t, nil, "run", "--config", bad)
		if code != 2 || out != "" {
			t.Fatalf("exit %d, stdout %q; want 2 (a wrong config) and nothing", code, out)
		}
		lines := jsonLines(t, errOut)
		findLine(t, lines, "ERROR", `line 2: worker.batch_sise: unknown key; did you mean batch_size?`)
		if len(lines) != 1 {
			t.Fatalf("want the error once:\n%s", errOut)
		}
	})

	// The worker loads its Redis scripts, then opens the snapshot store.
	redis := testenv.StartRedis(t, testenv.RedisOptions{})
	s3 := testenv.StartS3(t, "capper")
	writeConfig := func(t *testing.T, source, format string) string {
		t.Helper()
		cfg := exampleConfig(t)
		cfg.Redis.Addrs = []string{redis.Addr()}
		cfg.Segments.Source = source
		cfg.Segments.S3.Endpoint = s3.URL
		cfg.Segments.S3.UsePathStyle = true
		cfg.Log.Format = format
		y, err := cfg.Effective()
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(t.TempDir(), "capper.yaml")
		if err := os.WriteFile(p, y, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	keys := []string{"AWS_ACCESS_KEY_ID=" + s3.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s3.SecretKey}

	t.Run("missing bucket", func(t *testing.T) {
		path := writeConfig(t, "s3://nope/segments", "json")
		env := append(append(testenv.NoAWSEnv(t), keys...), "CAPPER_NO_SUCH_SETTING=1")
		_, errOut, code := capper(t, env, "run", "--config", path)
		if code != 1 {
			t.Fatalf("exit %d, want 1\n%s", code, errOut)
		}
		lines := jsonLines(t, errOut)
		findLine(t, lines, "WARN", "matches no config key")
		l := findLine(t, lines, "ERROR", "bucket nope does not exist")
		if e := fmt.Sprint(l["error"]); strings.Contains(e, "no such object") || strings.Contains(e, "segments.required") ||
			!strings.Contains(e, "segments.source s3://nope/segments: the bucket does not exist or is not reachable") {
			t.Errorf("a missing bucket must name segments.source, not a missing object nor segments.required: %v", l)
		}
	})

	t.Run("nothing published", func(t *testing.T) {
		path := writeConfig(t, "s3://capper/segmnts", "json")
		_, errOut, code := capper(t, append(testenv.NoAWSEnv(t), keys...), "run", "--config", path)
		if code != 1 {
			t.Fatalf("exit %d, want 1\n%s", code, errOut)
		}
		l := findLine(t, jsonLines(t, errOut), "ERROR", "segments.source s3://capper/segmnts: no snapshot there: run segment-builder")
		if e := fmt.Sprint(l["error"]); !strings.Contains(e, "s3://capper/segmnts/LATEST: no such object") {
			t.Errorf("the missing object is not named: %v", l)
		}
	})

	t.Run("redis down", func(t *testing.T) {
		path := writeConfig(t, "s3://capper/segments", "json")
		cfg, err := config.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)) // nothing listens
		cfg.Redis.Addrs = []string{addr}
		y, err := cfg.Effective()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, y, 0o644); err != nil {
			t.Fatal(err)
		}
		_, errOut, code := capper(t, append(testenv.NoAWSEnv(t), keys...), "run", "--config", path)
		if code != 1 {
			t.Fatalf("exit %d, want 1\n%s", code, errOut)
		}
		l := findLine(t, jsonLines(t, errOut), "ERROR", "connect to Redis (redis.addrs ["+addr+"]): ")
		if e := fmt.Sprint(l["error"]); !strings.Contains(e, "connection refused") {
			t.Errorf("the cause is not named: %v", l)
		}
	})

	t.Run("no credentials", func(t *testing.T) {
		path := writeConfig(t, "s3://capper/segments", "json")
		_, errOut, code := capper(t, testenv.NoAWSEnv(t), "run", "--config", path)
		if code != 1 {
			t.Fatalf("exit %d, want 1\n%s", code, errOut)
		}
		findLine(t, jsonLines(t, errOut), "ERROR",
			"no AWS credentials for s3://capper: set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile, or a role")
	})

	t.Run("text format", func(t *testing.T) {
		path := writeConfig(t, "s3://nope/segments", "text")
		_, errOut, code := capper(t, append(testenv.NoAWSEnv(t), keys...), "run", "--config", path)
		if code != 1 || !strings.Contains(errOut, "level=ERROR") || !strings.Contains(errOut, "bucket nope does not exist") {
			t.Fatalf("exit %d, want 1 and a text log line\n%s", code, errOut)
		}
		if strings.Contains(errOut, "capper: ") {
			t.Fatalf("the error is printed twice:\n%s", errOut)
		}
	})
}

// TestPolicyCheckAndDiff: `capper policy check` prints every problem of a
// document with its field path and exits 1, ok documents (and worker
// configs) exit 0; `capper policy diff` says what changes in words.
func TestPolicyCheckAndDiff(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte(`time_zone: Mars/Olympus
default_policy:
  limits:
    - {name: daily, window: 24h, calendar: day, max: 1}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := capper(t, nil, "policy", "check", "../../configs/policy.yaml", bad)
	if code != 1 {
		t.Fatalf("exit %d, want 1:\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"configs/policy.yaml: ok", bad + ": line 1: time_zone", "Mars/Olympus", bad + ": line 4: default_policy.limits[0]"} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}
	old, cand := "../../internal/policy/testdata/diff-old.yaml", "../../internal/policy/testdata/diff-new.yaml"
	if out, errOut, code := capper(t, nil, "policy", "check", old, cand); code != 0 {
		t.Fatalf("check of good documents: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = capper(t, nil, "policy", "diff", old, cand)
	if code != 0 || !strings.Contains(out, `segment "active": limit "daily": max 3 -> 2`) || !strings.Contains(out, `renamed to "first-day" (counts kept)`) {
		t.Fatalf("diff: exit %d\n%s%s", code, out, errOut)
	}
	if out, _, code := capper(t, nil, "policy", "diff", cand, cand); code != 0 || !strings.Contains(out, "no change") {
		t.Fatalf("diff of a document with itself: exit %d\n%s", code, out)
	}
	if _, errOut, code := capper(t, nil, "policy", "diff", old, bad); code != 1 || !strings.Contains(errOut, "Mars/Olympus") {
		t.Fatalf("diff against a bad document: exit %d\n%s", code, errOut)
	}
}

// TestPolicyPublishAndHistory: publish refuses a policy with problems and
// writes nothing; a good one becomes a version LATEST names, with what it
// changes; the same bytes again publish nothing; history lists the
// versions with the one in use marked. Against a real S3 protocol
// (gofakes3) and a directory.
func TestPolicyPublishAndHistory(t *testing.T) {
	s3 := testenv.StartS3(t, "policies")
	env := append(testenv.NoAWSEnv(t), "AWS_ACCESS_KEY_ID="+s3.AccessKey, "AWS_SECRET_ACCESS_KEY="+s3.SecretKey, "AWS_REGION="+s3.Region)
	// A worker config names the store (policy.source) and how to reach it
	// (segments.s3): no flag repeats them.
	cfg := exampleConfig(t)
	cfg.Policy.Source = "s3://policies/from-config"
	cfg.Segments.S3.Endpoint, cfg.Segments.S3.UsePathStyle = s3.URL, true
	y, err := cfg.Effective()
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(t.TempDir(), "capper.yaml")
	if err := os.WriteFile(cfgPath, y, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, store := range []struct {
		name  string
		store string // after --to or --from; none: the config's
		args  []string
	}{
		{"s3", "s3://policies/capper", []string{"--s3-endpoint", s3.URL, "--s3-path-style"}},
		{"dir", t.TempDir(), nil},
		{"config", "", []string{"--config", cfgPath}},
		{"s3 with config", "s3://policies/other", []string{"--config", cfgPath}},
	} {
		t.Run(store.name, func(t *testing.T) {
			old, cand := "../../internal/policy/testdata/diff-old.yaml", "../../internal/policy/testdata/diff-new.yaml"
			bad := filepath.Join(t.TempDir(), "bad.yaml")
			if err := os.WriteFile(bad, []byte("default_policy:\n  limits:\n    - {name: d, window: 24h}\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			with := func(args []string, flag string) []string {
				if store.store != "" {
					args = append(args, flag, store.store)
				}
				return append(args, store.args...)
			}
			publish := func(file string) (string, string, int) {
				return capper(t, env, with([]string{"policy", "publish", file}, "--to")...)
			}
			history := func() string {
				t.Helper()
				args := with([]string{"policy", "history"}, "--from")
				out, errOut, code := capper(t, env, args...)
				if code != 0 {
					t.Fatalf("history: exit %d\n%s%s", code, out, errOut)
				}
				return out
			}
			if out := history(); !strings.Contains(out, "no policy published") {
				t.Fatalf("history of an empty store:\n%s", out)
			}
			if out, errOut, code := publish(bad); code != 1 || !strings.Contains(out, `default_policy.limits[0] (limit "d").max: is required`) || !strings.Contains(out, "not published") {
				t.Fatalf("publish of a bad policy: exit %d\n%s%s", code, out, errOut)
			}
			if out := history(); !strings.Contains(out, "no policy published") {
				t.Fatalf("a refused policy was stored:\n%s", out)
			}
			out, errOut, code := publish(old)
			if code != 0 || !strings.Contains(out, "published ") {
				t.Fatalf("publish: exit %d\n%s%s", code, out, errOut)
			}
			first := strings.Fields(strings.SplitN(out, "published ", 2)[1])[0]
			if err := policy.ValidateVersion(first); err != nil {
				t.Fatal(err)
			}
			if out, _, code := publish(old); code != 0 || !strings.Contains(out, "unchanged, "+first+" is in use") {
				t.Fatalf("publish of the same bytes: exit %d\n%s", code, out)
			}
			out, errOut, code = publish(cand)
			if code != 0 || !strings.Contains(out, `segment "active": limit "daily": max 3 -> 2`) {
				t.Fatalf("publish of the candidate: exit %d\n%s%s", code, out, errOut)
			}
			second := strings.Fields(strings.SplitN(out, "published ", 2)[1])[0]
			h := history()
			if !strings.Contains(h, "  "+first+"  published") || !strings.Contains(h, "* "+second+"  published") ||
				!strings.Contains(h, `max 3 -> 2`) || strings.Index(h, first) > strings.Index(h, second) {
				t.Fatalf("history:\n%s", h)
			}
		})
	}

	// Without a region anywhere (AWS, no endpoint), the error says what to
	// set, not the SDK's "Invalid region".
	_, errOut, code := capper(t, testenv.NoAWSEnv(t), "policy", "history", "--from", "s3://policies/capper")
	if code != 1 || !strings.Contains(errOut, "no AWS region for s3://policies: set segments.s3.region") || strings.Contains(errOut, "Invalid region") {
		t.Fatalf("no region: exit %d\n%s", code, errOut)
	}
	// A config whose policy.source is a file names no store.
	cfg.Policy.Source = "file:///etc/capper/policy.yaml"
	if y, err = cfg.Effective(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, y, 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, code = capper(t, env, "policy", "history", "--config", cfgPath)
	if code != 2 || !strings.Contains(errOut, `--from: the config's policy.source ("file:///etc/capper/policy.yaml") is not a policy store`) {
		t.Fatalf("a policy file for a store: exit %d\n%s", code, errOut)
	}
}
