package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"
)

type exitCoder struct{ code int }

func (e exitCoder) Error() string { return fmt.Sprintf("exit %d", e.code) }
func (e exitCoder) ExitCode() int { return e.code }

func TestExit(t *testing.T) {
	for _, c := range []struct {
		err     error
		code    int
		printed string
	}{
		{nil, ExitOK, ""},
		{errors.New("boom"), ExitFailure, "capper: boom\n"},
		{Reported(errors.New("boom")), ExitFailure, ""},
		{fmt.Errorf("stop: %w", exitCoder{3}), 3, "capper: stop: exit 3\n"},
		{Reported(fmt.Errorf("stop: %w", exitCoder{3})), 3, ""},
		{UsageError(errors.New("--n: 0")), ExitUsage, "capper: --n: 0\n"},
		{fmt.Errorf("load: %w", UsageError(errors.New("bad"))), ExitUsage, "capper: load: bad\n"},
	} {
		var stderr bytes.Buffer
		if code := Exit("capper", c.err, &stderr); code != c.code || stderr.String() != c.printed {
			t.Errorf("Exit(%v) = %d, printed %q; want %d, %q", c.err, code, stderr.String(), c.code, c.printed)
		}
	}
	if Reported(nil) != nil || UsageError(nil) != nil {
		t.Error("Reported(nil) or UsageError(nil) is not nil")
	}
	if inner := errors.New("bad"); !errors.Is(UsageError(inner), inner) {
		t.Error("UsageError does not wrap its error")
	}
}

func TestNewLogger(t *testing.T) {
	var buf bytes.Buffer
	log, err := NewLogger(&buf, "info", LogJSON)
	if err != nil {
		t.Fatal(err)
	}
	log.Debug("hidden")
	log.Info("done", "elapsed", 1500*time.Millisecond, slog.Group("batch", "wait", 50*time.Millisecond), "n", 3)
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatalf("%v: %s", err, buf.String())
	}
	if m["elapsed"] != "1.5s" || m["batch"].(map[string]any)["wait"] != "50ms" || m["n"] != 3.0 {
		t.Fatalf("JSON line %s: want durations as text", buf.String())
	}

	buf.Reset()
	log, err = NewLogger(&buf, "warn", LogText)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hidden")
	log.Warn("slow", "took", 100*time.Millisecond)
	if got := buf.String(); !strings.Contains(got, "level=WARN msg=slow took=100ms") || strings.Contains(got, "hidden") {
		t.Fatalf("text line %q", got)
	}

	for _, c := range [][2]string{{"loud", LogJSON}, {"info", "xml"}} {
		if _, err := NewLogger(&buf, c[0], c[1]); err == nil {
			t.Errorf("NewLogger(%q, %q) accepted", c[0], c[1])
		}
	}

	buf.Reset()
	DefaultLogger(&buf).Error("cannot start", "after", time.Second)
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil || m["level"] != "ERROR" || m["after"] != "1s" {
		t.Fatalf("default logger line %s (%v)", buf.String(), err)
	}
}

func TestVersionLine(t *testing.T) {
	bi := &debug.BuildInfo{Main: debug.Module{Path: "github.com/capper-dev/capper", Version: "(devel)"}}
	for _, c := range []struct {
		version, revision string
		bi                *debug.BuildInfo
		settings          []debug.BuildSetting
		want              string
	}{
		{"v1.2.3", "", nil, nil, "capper v1.2.3 (go1.26.8, linux/amd64, revision unknown)"},
		{"v1.2.3", "abc123", nil, nil, "capper v1.2.3 (go1.26.8, linux/amd64, revision abc123)"},
		{"v1.2.3", "", bi, []debug.BuildSetting{{Key: "vcs.revision", Value: "20b5d7c0f5de714486c7422aa08ed8df44b5d671"}, {Key: "vcs.modified", Value: "false"}},
			"capper v1.2.3 (go1.26.8, linux/amd64, revision 20b5d7c0f5de714486c7422aa08ed8df44b5d671)"},
		{"dev", "", bi, []debug.BuildSetting{{Key: "vcs.revision", Value: "20b5d7c"}, {Key: "vcs.modified", Value: "true"}},
			"capper dev (go1.26.8, linux/amd64, revision 20b5d7c, modified)"},
		{"dev", "", &debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}}, nil, "capper v1.4.0 (go1.26.8, linux/amd64, revision unknown)"},
		{"", "", nil, nil, "capper dev (go1.26.8, linux/amd64, revision unknown)"},
	} {
		b := c.bi
		if b != nil {
			cp := *b
			cp.Settings = c.settings
			b = &cp
		}
		if got := buildOf(c.version, c.revision, b, "go1.26.8", "linux/amd64").Line("capper"); got != c.want {
			t.Errorf("versionLine(%q, %v) = %q, want %q", c.version, c.settings, got, c.want)
		}
	}
}

type grammar struct {
	Serve struct {
		Config string `required:"" help:"The user's \"config\": see $HOME/x.yaml [yaml] or a \\path\\." completion:"<file>"`
		Mode   string `enum:"fast,safe" default:"safe" help:"Mode: fast or safe."`
	} `cmd:"" help:"Serve what's asked."`
	Version    VersionCmd    `cmd:"" help:"Print the version."`
	Completion CompletionCmd `cmd:"" help:"Print a completion script."`
}

// TestCommands: the version and completion commands, run through kong.
func TestCommands(t *testing.T) {
	run := func(args ...string) (string, int) {
		var g grammar
		var stdout, stderr bytes.Buffer
		kctx, code, ok := Parse("tool", "A tool.", &g, args, &stdout, &stderr, VersionVars("tool", Build{Version: "v9.9.9", GoVersion: "go1.26.8"}))
		if !ok {
			return stderr.String(), code
		}
		code = Exit("tool", kctx.Run(), &stderr)
		return stdout.String(), code
	}
	if out, code := run("version"); code != 0 || !strings.HasPrefix(out, "tool v9.9.9 (go") {
		t.Errorf("version: %d %q", code, out)
	}
	for _, shell := range []string{"bash", "zsh", "fish"} {
		out, code := run("completion", shell)
		if code != 0 || !strings.Contains(out, "serve") || !strings.Contains(out, "mode") {
			t.Fatalf("completion %s: %d\n%s", shell, code, out)
		}
		// The help texts are in the zsh and fish scripts, made safe for
		// their quoted strings.
		if shell == "bash" {
			continue
		}
		if !strings.Contains(out, "Serve what\u2019s asked.") {
			t.Errorf("%s: the command's help is not in the script:\n%s", shell, out)
		}
		for _, bad := range []string{"what's", `"config"`, "$HOME", "[yaml]", `\path`, "Mode:"} {
			if strings.Contains(out, bad) {
				t.Errorf("%s script contains %q as is:\n%s", shell, bad, out)
			}
		}
	}
	if _, code := run("completion", "csh"); code != ExitUsage {
		t.Errorf("completion csh: exit %d", code)
	}
	if _, err := CompletionScript(&kong.Node{Name: "x"}, "csh"); err == nil {
		t.Error("CompletionScript accepted csh")
	}
}
