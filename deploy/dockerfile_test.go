package deploy

import (
	"bufio"
	"debug/elf"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// There is no Docker engine in the test environment: these tests read the
// Dockerfile and run its build command with the local Go toolchain, which is
// what the build stage does inside golang:1.26.

const repoRoot = ".."

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	line int
	cmd  string // upper case: FROM, RUN, ...
	args string
}

type stage struct {
	image, name string
	args        map[string]string // ARG defaults declared in the stage
	ins         []instruction
}

type dockerfile struct {
	globalArgs map[string]string
	stages     []*stage
}

func parseDockerfile(t *testing.T, path string) *dockerfile {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	df := &dockerfile{globalArgs: map[string]string{}}
	var cur strings.Builder
	start := 0
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if cur.Len() == 0 && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if cur.Len() == 0 {
			start = n
		}
		if strings.HasPrefix(line, "#") { // a comment inside a continued instruction
			continue
		}
		if body, ok := strings.CutSuffix(line, "\\"); ok {
			cur.WriteString(body + " ")
			continue
		}
		cur.WriteString(line)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		in := instruction{line: start, cmd: strings.ToUpper(cmd), args: strings.Join(strings.Fields(args), " ")}
		cur.Reset()
		switch {
		case in.cmd == "FROM":
			fields := strings.Fields(in.args)
			fields = slices.DeleteFunc(fields, func(s string) bool { return strings.HasPrefix(s, "--platform=") })
			st := &stage{image: fields[0], args: map[string]string{}}
			if len(fields) == 3 && strings.EqualFold(fields[1], "AS") {
				st.name = fields[2]
			}
			df.stages = append(df.stages, st)
		case in.cmd == "ARG":
			name, def, _ := strings.Cut(in.args, "=")
			if len(df.stages) == 0 {
				df.globalArgs[name] = def
			} else {
				df.stages[len(df.stages)-1].args[name] = def
			}
			fallthrough
		default:
			if len(df.stages) > 0 {
				st := df.stages[len(df.stages)-1]
				st.ins = append(st.ins, in)
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return df
}

func (s *stage) all(cmd string) []instruction {
	var out []instruction
	for _, in := range s.ins {
		if in.cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

// goBuildRun returns the build stage's RUN that runs go build, without its
// --mount options.
func goBuildRun(t *testing.T, s *stage) string {
	t.Helper()
	var found []string
	for _, in := range s.all("RUN") {
		if !strings.Contains(in.args, "go build") {
			continue
		}
		fields := strings.Fields(in.args)
		for len(fields) > 0 && strings.HasPrefix(fields[0], "--mount=") {
			fields = fields[1:]
		}
		found = append(found, strings.Join(fields, " "))
	}
	if len(found) != 1 {
		t.Fatalf("want one RUN with go build in stage %s, got %q", s.name, found)
	}
	return found[0]
}

func TestDockerfile(t *testing.T) {
	df := parseDockerfile(t, filepath.Join(repoRoot, "Dockerfile"))
	if len(df.stages) != 2 {
		t.Fatalf("want 2 stages (build, runtime), got %d", len(df.stages))
	}
	build, runtimeStage := df.stages[0], df.stages[1]
	goImage := strings.ReplaceAll(build.image, "${GO_VERSION}", df.globalArgs["GO_VERSION"])
	if build.name != "build" || goImage != "golang:1.26" {
		t.Errorf("build stage %q from %q (%s), want build from golang:1.26", build.name, build.image, goImage)
	}
	if runtimeStage.image != "gcr.io/distroless/static-debian12:nonroot" {
		t.Errorf("runtime image %q, want gcr.io/distroless/static-debian12:nonroot", runtimeStage.image)
	}
	if _, ok := build.args["VERSION"]; !ok {
		t.Error("the build stage declares no ARG VERSION")
	}

	cmd := goBuildRun(t, build)
	for _, want := range []string{"CGO_ENABLED=0 ", "-trimpath", `-X main.version=${VERSION}`, " -o /out/ ", "./cmd/capper", "./cmd/segment-builder"} {
		if !strings.Contains(cmd+" ", want) {
			t.Errorf("build command lacks %q: %s", want, cmd)
		}
	}
	// CGO_ENABLED=0 must be set for the go build itself, not some other
	// command of the RUN.
	if strings.Contains(cmd, "&&") || strings.Contains(cmd, ";") {
		t.Errorf("the build RUN should be one command: %s", cmd)
	}

	users := runtimeStage.all("USER")
	if len(users) != 1 || (users[0].args != "nonroot" && users[0].args != "nonroot:nonroot") {
		t.Errorf("runtime USER %v, want nonroot", users)
	}
	entry := runtimeStage.all("ENTRYPOINT")
	var argv []string
	if len(entry) != 1 || json.Unmarshal([]byte(entry[0].args), &argv) != nil || !slices.Equal(argv, []string{"/capper"}) {
		t.Errorf(`ENTRYPOINT %v, want ["/capper"] (exec form)`, entry)
	}
	copied := ""
	for _, in := range runtimeStage.all("COPY") {
		if strings.HasPrefix(in.args, "--from=build ") {
			copied += in.args
		}
	}
	for _, bin := range []string{"/out/capper", "/out/segment-builder"} {
		if !strings.Contains(copied, bin) {
			t.Errorf("the runtime stage does not copy %s from the build stage", bin)
		}
	}
	if len(runtimeStage.all("RUN")) > 0 {
		t.Error("the runtime stage runs commands; distroless has no shell")
	}
}

// TestDockerfileBuildCommand runs the build stage's go build command as the
// image build would (other output directory, local GOOS/GOARCH) and checks
// that both binaries are static and `capper version` prints the stamp.
func TestDockerfileBuildCommand(t *testing.T) {
	df := parseDockerfile(t, filepath.Join(repoRoot, "Dockerfile"))
	cmd := goBuildRun(t, df.stages[0])
	out := t.TempDir()
	cmd = strings.Replace(cmd, " -o /out/ ", " -o "+out+"/ ", 1)
	const version = "v9.9.9-dockerfile-test"
	sh := exec.Command("sh", "-c", cmd)
	sh.Dir = repoRoot
	sh.Env = append(os.Environ(), "VERSION="+version, "TARGETOS="+runtime.GOOS, "TARGETARCH="+runtime.GOARCH)
	if b, err := sh.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, b)
	}
	for _, bin := range []string{"capper", "segment-builder"} {
		f, err := elf.Open(filepath.Join(out, bin))
		if err != nil {
			t.Fatalf("%s: %v", bin, err)
		}
		libs, _ := f.ImportedLibraries()
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s has a dynamic loader: not a static binary", bin)
			}
		}
		if len(libs) > 0 {
			t.Errorf("%s links %v: not a static binary", bin, libs)
		}
		f.Close()
	}
	v, err := exec.Command(filepath.Join(out, "capper"), "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(v), "capper "+version+" (") {
		t.Errorf("capper version = %q, %v; want the stamped %s", v, err, version)
	}
	if b, err := exec.Command(filepath.Join(out, "segment-builder"), "--help").CombinedOutput(); err != nil {
		t.Errorf("segment-builder --help: %v\n%s", err, b)
	}
}

// ignorePattern is one .dockerignore line, matched as Docker does: `*` and
// `?` within a path element, `**` across elements, and a match on a
// directory excludes everything below it.
type ignorePattern struct {
	re     *regexp.Regexp
	negate bool
}

func parseDockerignore(t *testing.T) []ignorePattern {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	var ps []ignorePattern
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		p := ignorePattern{}
		if rest, ok := strings.CutPrefix(line, "!"); ok {
			p.negate, line = true, rest
		}
		line = strings.TrimPrefix(filepath.ToSlash(filepath.Clean(line)), "/")
		var re strings.Builder
		re.WriteString("^")
		for i := 0; i < len(line); i++ {
			switch c := line[i]; {
			case strings.HasPrefix(line[i:], "**/"):
				re.WriteString("(.*/)?")
				i += 2
			case strings.HasPrefix(line[i:], "**"):
				re.WriteString(".*")
				i++
			case c == '*':
				re.WriteString("[^/]*")
			case c == '?':
				re.WriteString("[^/]")
			default:
				re.WriteString(regexp.QuoteMeta(string(c)))
			}
		}
		re.WriteString("$")
		p.re = regexp.MustCompile(re.String())
		ps = append(ps, p)
	}
	return ps
}

// ignored reports whether the build context leaves out path (slash
// separated, relative to the repository root).
func ignored(ps []ignorePattern, path string) bool {
	parts := strings.Split(path, "/")
	excluded := false
	for _, p := range ps {
		for i := 1; i <= len(parts); i++ {
			if p.re.MatchString(strings.Join(parts[:i], "/")) {
				excluded = !p.negate
				break
			}
		}
	}
	return excluded
}

func TestDockerignore(t *testing.T) {
	ps := parseDockerignore(t)
	// Everything the two binaries are built from stays in the context.
	list := exec.Command("go", "list", "-deps", "-f",
		`{{if .Module}}{{if .Module.Main}}{{.Dir}}|{{join .GoFiles ","}}|{{join .EmbedFiles ","}}{{end}}{{end}}`,
		"./cmd/capper", "./cmd/segment-builder")
	list.Dir = repoRoot
	out, err := list.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	needed := []string{"go.mod", "go.sum"}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		dir, files, _ := strings.Cut(line, "|")
		rel, err := filepath.Rel(root, dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range strings.FieldsFunc(files, func(r rune) bool { return r == ',' || r == '|' }) {
			needed = append(needed, filepath.ToSlash(filepath.Join(rel, f)))
		}
	}
	if len(needed) < 20 {
		t.Fatalf("go list found only %v", needed)
	}
	for _, f := range needed {
		if ignored(ps, f) {
			t.Errorf(".dockerignore leaves out %s, which the build needs", f)
		}
	}
	// VCS data, local tools and test data stay out.
	mustIgnore := []string{".git/HEAD", ".bin/helm", ".bin/staticcheck", "deploy/deploy_test.go", "cmd/capper/main_test.go"}
	err = filepath.WalkDir(repoRoot, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		if d.IsDir() && d.Name() == "testdata" {
			rel, _ := filepath.Rel(repoRoot, path)
			mustIgnore = append(mustIgnore, filepath.ToSlash(rel)+"/x")
			return filepath.SkipDir
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(mustIgnore, func(s string) bool { return strings.Contains(s, "testdata/") }) {
		t.Fatal("found no testdata directory to check")
	}
	for _, f := range mustIgnore {
		if !ignored(ps, f) {
			t.Errorf(".dockerignore does not leave out %s", f)
		}
	}
}

func TestDockerignoreMatcher(t *testing.T) {
	ps := []ignorePattern{}
	for _, p := range []string{`^\.git$`, `^(.*/)?testdata$`, `^(.*/)?[^/]*_test\.go$`, `^docs$`} {
		ps = append(ps, ignorePattern{re: regexp.MustCompile(p)})
	}
	ps = append(ps, ignorePattern{re: regexp.MustCompile(`^docs/keep\.md$`), negate: true})
	for path, want := range map[string]bool{
		".git/HEAD": true, ".gitignore": false, "internal/x/testdata/a.csv": true, "testdata/a": true,
		"internal/x/testdatax/a": false, "a_test.go": true, "internal/a_test.go": true, "internal/a.go": false,
		"docs/a.md": true, "docs/keep.md": false,
	} {
		if got := ignored(ps, path); got != want {
			t.Errorf("ignored(%s) = %v, want %v", path, got, want)
		}
	}
}
