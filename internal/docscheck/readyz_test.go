package docscheck

// The /readyz conditions: the page that owns them lists every answer the
// code can give /readyz, and only those. The answers are read from the
// code: the checks internal/app gives the /readyz handler, and the error
// messages each of them makes.

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

const (
	readyzPage    = "docs/reference/metrics-and-alerts.md"
	readyzHeading = "### /readyz"
)

// readinessChecks are the checks internal/app gives the /readyz handler
// (newOpsServer's arguments after info) that are not written in place,
// each with where the errors it returns are made. A check written in place
// (a func literal) is read itself.
var readinessChecks = map[string]errorSource{
	"engine.Ready":      {dir: "internal/capping", method: "health.ready"},
	"cons.worker.Ready": {dir: "internal/dispatch", call: "setNotReady"},
	"cons.controlReady": {dir: "internal/control", method: "Follower.Ready"},
	"usersGate.ready":   {dir: "internal/app", method: "usersGate.ready"},
}

// errorSource is where a readiness check's errors are made: the body of
// method (Type.name) in dir, or the last argument of every call of the
// function or method call in dir.
type errorSource struct {
	dir, method, call string
}

// readyzMessage is one error a readiness check can answer with.
type readyzMessage struct {
	where string         // file:line
	text  string         // the format, with … for what is not a constant
	re    *regexp.Regexp // the format, its verbs and … as wildcards
}

// readyzMessages returns every error message the readiness checks of
// internal/app can make.
func readyzMessages(root string) ([]readyzMessage, error) {
	fset := token.NewFileSet()
	files, err := parseDir(fset, filepath.Join(root, "internal/app"))
	if err != nil {
		return nil, err
	}
	var calls []*ast.CallExpr
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			if c, ok := n.(*ast.CallExpr); ok {
				if id, ok := c.Fun.(*ast.Ident); ok && id.Name == "newOpsServer" {
					calls = append(calls, c)
				}
			}
			return true
		})
	}
	if len(calls) != 1 || len(calls[0].Args) < 6 {
		return nil, fmt.Errorf("internal/app: want one call of newOpsServer(addr, reg, pprof, info, live, checks...), found %d", len(calls))
	}
	var out []readyzMessage
	for _, arg := range calls[0].Args[5:] {
		var msgs []readyzMessage
		if lit, ok := arg.(*ast.FuncLit); ok {
			msgs = messagesIn(fset, lit.Body)
		} else {
			name := types.ExprString(arg)
			src, ok := readinessChecks[name]
			if !ok {
				return nil, fmt.Errorf("%s: /readyz has a check readyz_test.go does not know, %s: add where its errors are made to readinessChecks, and its answers to %s",
					fset.Position(arg.Pos()), name, readyzPage)
			}
			if msgs, err = src.messages(root); err != nil {
				return nil, fmt.Errorf("%s (/readyz's check %s): %w", src.dir, name, err)
			}
		}
		if len(msgs) == 0 {
			return nil, fmt.Errorf("%s: the check %s makes no error message the test can read (errors.New or fmt.Errorf)",
				fset.Position(arg.Pos()), types.ExprString(arg))
		}
		out = append(out, msgs...)
	}
	return out, nil
}

// parseDir parses the non-test Go files of dir.
func parseDir(fset *token.FileSet, dir string) ([]*ast.File, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	var files []*ast.File
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

func (s errorSource) messages(root string) ([]readyzMessage, error) {
	fset := token.NewFileSet()
	files, err := parseDir(fset, filepath.Join(root, s.dir))
	if err != nil {
		return nil, err
	}
	var out []readyzMessage
	found := false
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncDecl:
				if s.method != "" && n.Recv != nil && len(n.Recv.List) == 1 &&
					strings.TrimPrefix(types.ExprString(n.Recv.List[0].Type), "*")+"."+n.Name.Name == s.method {
					found = true
					out = append(out, messagesIn(fset, n.Body)...)
				}
			case *ast.CallExpr:
				if s.call != "" && calls(n, s.call) && len(n.Args) > 0 {
					found = true
					out = append(out, messagesIn(fset, n.Args[len(n.Args)-1])...)
				}
			}
			return true
		})
	}
	if !found {
		return nil, fmt.Errorf("no %s%s found", s.method, s.call)
	}
	return out, nil
}

// calls says whether c calls the function or method name.
func calls(c *ast.CallExpr, name string) bool {
	switch f := c.Fun.(type) {
	case *ast.Ident:
		return f.Name == name
	case *ast.SelectorExpr:
		return f.Sel.Name == name
	}
	return false
}

// messagesIn returns the messages of the errors.New and fmt.Errorf calls
// under n.
func messagesIn(fset *token.FileSet, n ast.Node) []readyzMessage {
	var out []readyzMessage
	ast.Inspect(n, func(n ast.Node) bool {
		c, ok := n.(*ast.CallExpr)
		if !ok || len(c.Args) == 0 {
			return true
		}
		if name := types.ExprString(c.Fun); name != "errors.New" && name != "fmt.Errorf" {
			return true
		}
		text := constantText(c.Args[0])
		out = append(out, readyzMessage{where: strings.TrimPrefix(fset.Position(c.Pos()).String(), root+"/"), text: text, re: messageRE(text)})
		return true
	})
	return out
}

// constantText is a string expression with … for each part that is not a
// constant.
func constantText(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.BasicLit:
		if s, err := strconv.Unquote(e.Value); err == nil {
			return s
		}
	case *ast.BinaryExpr:
		if e.Op == token.ADD {
			return constantText(e.X) + constantText(e.Y)
		}
	case *ast.ParenExpr:
		return constantText(e.X)
	}
	return "…"
}

var verbRE = regexp.MustCompile(`%[-+# 0-9.]*[a-zA-Z]|…`)

// messageRE matches what a page may write for a message: its constant
// text, each verb or … standing for any word(s) (ERROR, TOPIC, N).
func messageRE(text string) *regexp.Regexp {
	parts := verbRE.Split(text, -1)
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(strings.ReplaceAll(p, "%%", "%"))
	}
	return regexp.MustCompile("^" + strings.Join(parts, ".+") + "$")
}

// readyzRows returns the code spans of the first column of the table in
// the page's /readyz section: what it says /readyz answers.
func readyzRows(p *Page) ([]Span, error) {
	start := -1
	for i, l := range p.Prose {
		if strings.TrimSpace(l) == readyzHeading {
			start = i
			break
		}
	}
	if start < 0 {
		return nil, fmt.Errorf("%s has no heading %q", p.Path, readyzHeading)
	}
	var out []Span
	for i := start + 1; i < len(p.Prose); i++ {
		l := p.Prose[i]
		if m := headingRE.FindStringSubmatch(l); m != nil && len(m[1]) <= 3 {
			break
		}
		cells := strings.Split(l, " | ")
		if !strings.HasPrefix(l, "| ") || len(cells) < 2 ||
			i+1 < len(p.Prose) && strings.HasPrefix(p.Prose[i+1], "| ---") { // the header row
			continue
		}
		for _, m := range codeSpanRE.FindAllString(strings.TrimPrefix(cells[0], "| "), -1) {
			out = append(out, Span{Line: i + 1, Text: strings.Trim(m, "`")})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: the section %q has no table of answers", p.Path, readyzHeading)
	}
	return out, nil
}

// checkReadyz returns one problem per message of the code the page does
// not list, and per answer the page lists that the code does not make.
func checkReadyz(p *Page, rows []Span, msgs []readyzMessage) []string {
	var problems []string
	for _, m := range msgs {
		found := false
		for _, r := range rows {
			found = found || m.re.MatchString(r.Text)
		}
		if !found {
			problems = append(problems, fmt.Sprintf("%s: /readyz can answer %q (%s); the table of %s does not list it",
				p.Path, m.text, m.where, readyzHeading))
		}
	}
	for _, r := range rows {
		found := false
		for _, m := range msgs {
			found = found || m.re.MatchString(r.Text)
		}
		if !found {
			problems = append(problems, fmt.Sprintf("%s: %q: no readiness check of the code answers that", p.Where(r.Line), r.Text))
		}
	}
	return problems
}

// TestReadyzConditions: the /readyz section of the metrics page lists
// every answer the readiness checks of the code can give, and nothing
// else.
func TestReadyzConditions(t *testing.T) {
	msgs, err := readyzMessages(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		t.Logf("%s: %q", m.where, m.text)
	}
	if len(msgs) < 8 {
		t.Fatalf("found only %d readiness messages: %v", len(msgs), msgs)
	}
	data, err := os.ReadFile(filepath.Join(root, readyzPage))
	if err != nil {
		t.Fatal(err)
	}
	p := Parse(readyzPage, string(data))
	rows, err := readyzRows(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, problem := range checkReadyz(p, rows, msgs) {
		t.Error(problem)
	}
	t.Run("can fail", func(t *testing.T) {
		p := Parse(readyzPage, "# M\n\n"+readyzHeading+"\n\n| says | when |\n| --- | --- |\n"+
			"| `redis cannot decide: ERROR` | x |\n| `redis cannot decide N intents: ERROR`, `the moon is full` | y |\n\n## Next\n\n| `no segment snapshot loaded` | z |\n")
		rows, err := readyzRows(p)
		if err != nil {
			t.Fatal(err)
		}
		got := checkReadyz(p, rows, []readyzMessage{
			{text: "redis cannot decide: %w", re: messageRE("redis cannot decide: %w")},
			{text: "redis cannot decide %d intents: %w", re: messageRE("redis cannot decide %d intents: %w")},
			{text: "no segment snapshot loaded", re: messageRE("no segment snapshot loaded")},
		})
		want := []string{`"no segment snapshot loaded"`, `:8: "the moon is full"`}
		if len(got) != len(want) {
			t.Fatalf("got %q, want %d problems", got, len(want))
		}
		for i, w := range want {
			if !strings.Contains(got[i], w) {
				t.Errorf("problem %q, want it to say %q", got[i], w)
			}
		}
	})
}
