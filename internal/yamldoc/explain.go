package yamldoc

// What a decode error says to the person who wrote the document: each
// problem at its field's path and line (a problems.Problem, as a
// document's other problems are reported), an unknown key with the key it
// is likely a typo of, a value of the wrong kind with the kind wanted.
// yaml's own messages name a line and a Go type, not the key.

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/capper-dev/capper/internal/problems"
)

var (
	unknownField   = regexp.MustCompile(`^line (\d+): field (\S+) not found in type \S+$`)
	cannotDecode   = regexp.MustCompile("^line (\\d+): cannot unmarshal !!(\\w+)(?: `(.*)`)? into (.+)$")
	lineNumbered   = regexp.MustCompile(`^line (\d+): (.*)$`)
	leadingNumber  = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?`)
	truncatedValue = "..."
)

// Explain turns err, from decoding data into v strictly, into the
// document's problems (problems.From finds them in the error): an unknown
// key or a value of the wrong kind at its field's path and line. An error
// it cannot place (a YAML syntax error) is returned as it is.
func Explain(data []byte, v any, err error) error {
	t := reflect.TypeOf(v)
	var root yaml.Node
	if yaml.Unmarshal(data, &root) != nil {
		return err
	}
	at := spots(&root)
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		// An UnmarshalYAML of ours ("line 3: "1.5h" is not a duration"):
		// the scalar of that line it quotes.
		g := lineNumbered.FindStringSubmatch(err.Error())
		if g == nil {
			return err
		}
		line, _ := strconv.Atoi(g[1])
		s, ok := at.find(line, false, func(n *yaml.Node) bool { return strings.Contains(g[2], written(n.ShortTag(), n.Value)) })
		if !ok {
			return err
		}
		return problems.Problem{Path: s.path, Line: line, Msg: g[2]}
	}
	var ps problems.List
	for _, m := range te.Errors {
		ps = append(ps, at.explain(m, t))
	}
	return ps.Err()
}

// explain places one of yaml's type errors.
func (at spotList) explain(m string, t reflect.Type) problems.Problem {
	if g := unknownField.FindStringSubmatch(m); g != nil {
		line, _ := strconv.Atoi(g[1])
		s, ok := at.find(line, true, func(n *yaml.Node) bool { return n.Value == g[2] })
		if !ok {
			return problems.Problem{Line: line, Msg: fmt.Sprintf("unknown key %q", g[2])}
		}
		return problems.Problem{Path: s.path, Line: line, Msg: "unknown key" + suggest(g[2], keysOf(typeAt(t, s.path[:len(s.path)-1])))}
	}
	if g := cannotDecode.FindStringSubmatch(m); g != nil {
		line, _ := strconv.Atoi(g[1])
		kind, value, into := "!!"+g[2], strings.TrimSuffix(g[3], truncatedValue), g[4]
		s, ok := at.find(line, false, func(n *yaml.Node) bool { return n.ShortTag() == kind && strings.HasPrefix(n.Value, value) })
		if !ok {
			return problems.Problem{Line: line, Msg: notA(kind, g[3], into)}
		}
		return problems.Problem{Path: s.path, Line: line, Msg: notA(kind, s.node.Value, into)}
	}
	if g := lineNumbered.FindStringSubmatch(m); g != nil {
		line, _ := strconv.Atoi(g[1])
		return problems.Problem{Line: line, Msg: g[2]}
	}
	return problems.Problem{Msg: m}
}

// notA says that a value of yaml kind is not what goType takes; a number
// with a unit after it ("50/s") is shown without.
func notA(kind, value, goType string) string {
	want := wanted(goType)
	msg := fmt.Sprintf("%s is not %s", written(kind, value), want)
	if n := leadingNumber.FindString(value); kind == "!!str" && n != "" && strings.HasSuffix(want, "number") {
		msg += fmt.Sprintf(" (write the number alone: %s)", n)
	}
	return msg
}

// written is how a message shows a value of yaml kind (!!str, !!seq, ...).
func written(kind, value string) string {
	switch kind {
	case "!!seq":
		return "a list"
	case "!!map":
		return "a mapping"
	case "!!null":
		return "an empty value"
	}
	return strconv.Quote(value)
}

// wanted says what a Go type takes, in a document's words.
func wanted(goType string) string {
	switch {
	case strings.HasPrefix(goType, "[]"):
		return "a list"
	case strings.HasPrefix(goType, "map["):
		return "a mapping (key: value)"
	case goType == "float64", goType == "float32":
		return "a number"
	case strings.HasPrefix(goType, "int"), strings.HasPrefix(goType, "uint"):
		return "a whole number"
	case goType == "bool":
		return "true or false"
	case goType == "string":
		return "a single value (a string)"
	}
	return "a mapping (key: value)" // a struct
}

// suggest names the known key name is likely a typo of, else lists the
// keys (when few); "" when there are none to offer.
func suggest(name string, known []string) string {
	if len(known) == 0 {
		return ""
	}
	best, bestD := "", 3
	for _, k := range known {
		d := distance(normal(name), normal(k))
		if d < bestD && d <= max(1, len(name)/3) {
			best, bestD = k, d
		}
	}
	switch {
	case best != "":
		return "; did you mean " + best + "?"
	case len(known) <= 12:
		return "; the keys here: " + strings.Join(known, ", ")
	}
	return ""
}

// normal folds case, "-" and "_": minPriority is min_priority.
func normal(s string) string {
	return strings.NewReplacer("_", "", "-", "").Replace(strings.ToLower(s))
}

// distance is the edit distance of a and b, a swap of two neighbours
// counting one (brust is one from burst).
func distance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// typeAt is the type of the value at path in a document decoded into t;
// nil when the path leaves what t describes.
func typeAt(t reflect.Type, path problems.Path) reflect.Type {
	for _, s := range path {
		t = deref(t)
		switch {
		case t == nil:
			return nil
		case s.Key == "" && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array):
			t = t.Elem()
		case s.Key != "" && t.Kind() == reflect.Map:
			t = t.Elem()
		case s.Key != "" && t.Kind() == reflect.Struct:
			f, ok := fieldOf(t, s.Key)
			if !ok {
				return nil
			}
			t = f.Type
		default:
			return nil
		}
	}
	return deref(t)
}

func deref(t reflect.Type) reflect.Type {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// keysOf are the keys a struct type takes, in its fields' order (inline
// structs' included); none for any other type.
func keysOf(t reflect.Type) []string {
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	var keys []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, inline, ok := yamlKey(f)
		switch {
		case !ok:
		case inline:
			keys = append(keys, keysOf(deref(f.Type))...)
		default:
			keys = append(keys, name)
		}
	}
	return keys
}

// fieldOf is the field of struct t that key decodes into.
func fieldOf(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, inline, ok := yamlKey(f)
		switch {
		case !ok:
		case inline:
			if in := deref(f.Type); in.Kind() == reflect.Struct {
				if g, ok := fieldOf(in, key); ok {
					return g, true
				}
			}
		case name == key:
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// yamlKey is the key field f decodes from, as yaml.v3 reads its tag.
func yamlKey(f reflect.StructField) (name string, inline, ok bool) {
	tag := f.Tag.Get("yaml")
	if (!f.IsExported() && !f.Anonymous) || tag == "-" {
		return "", false, false
	}
	name, opts, _ := strings.Cut(tag, ",")
	if strings.Contains(opts, "inline") {
		return "", true, true
	}
	if name == "" {
		name = strings.ToLower(f.Name)
	}
	return name, false, true
}
