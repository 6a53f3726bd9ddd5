// Package problems is how capper reports what is wrong with a document (the
// worker config, a cap policy, the engine's rules): every problem at once,
// each at the path of its field from the document's root, e.g.
// segments[0] (segment "new").limits[2] (limit "x").window.
//
// It is a package of its own because three packages report through it and
// none of them is the others' owner: capping checks the engine's rules,
// policy the document they come from (it adds capping's problems to its
// own, then places and orders them by path), config the worker config
// (which holds a policy under capping:). A Path is made of steps, not
// written as a string, so that policy can compare, order and re-place
// capping's paths by their keys and indexes; String writes it once, the
// way every message shows it.
package problems

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Path is where a problem is: the keys and list items from the document's
// root. Build one with Key and the methods; a Path is never changed in
// place, so one path can be the parent of many.
type Path []Step

// Step is one step of a Path: a mapping key, or (Key "") the item at Index
// of a list, shown with its Kind and Name when the list's items have names
// (segment "new", limit "daily").
type Step struct {
	Key        string
	Index      int
	Kind, Name string
}

// Key is the path of a key from the root; dots separate nested keys:
// Key("kafka.topics.input").
func Key(k string) Path { return Path(nil).Key(k) }

// Key is the path of key k under p; dots separate nested keys.
func (p Path) Key(k string) Path {
	q := slices.Clip(p)
	for s := range strings.SplitSeq(k, ".") {
		q = append(q, Step{Key: s})
	}
	return q
}

// Index is the path of item i of the list at p: p[i].
func (p Path) Index(i int) Path { return append(slices.Clip(p), Step{Index: i}) }

// Named is the path of item i of the list at p, named: p[i] (kind "name").
func (p Path) Named(i int, kind, name string) Path {
	return append(slices.Clip(p), Step{Index: i, Kind: kind, Name: name})
}

// Under is p below parent: Key("window").Under(Key("limits").Index(0)) is
// limits[0].window.
func (p Path) Under(parent Path) Path { return append(slices.Clip(parent), p...) }

// Item is the index of the item of list key that p goes through, -1 when
// it goes through none: for segments[2] (segment "a").limits[1] (limit
// "b").max, Item("limits") is 1; for segments[2] (segment "a").limits, -1.
func (p Path) Item(key string) int {
	for i := 0; i+1 < len(p); i++ {
		if p[i].Key == key && p[i+1].Key == "" {
			return p[i+1].Index
		}
	}
	return -1
}

// Top is p's top-level key ("" for an empty path).
func (p Path) Top() string {
	if len(p) == 0 {
		return ""
	}
	return p[0].Key
}

// String writes p as messages show it:
// segments[0] (segment "new").limits[2] (limit "x").window.
func (p Path) String() string {
	var b strings.Builder
	for i, s := range p {
		switch {
		case s.Key != "":
			if i > 0 {
				b.WriteByte('.')
			}
			b.WriteString(s.Key)
		case s.Kind != "":
			fmt.Fprintf(&b, "[%d] (%s %q)", s.Index, s.Kind, s.Name)
		default:
			fmt.Fprintf(&b, "[%d]", s.Index)
		}
	}
	return b.String()
}

// Problem is one thing wrong, at the path of its field and, when the
// document's text is known (yamldoc.Locate), its line.
type Problem struct {
	Path Path
	Msg  string
	Line int // 0: not known
}

// Error writes the problem as every message shows it: "line 12: path: msg",
// without the parts that are not known.
func (p Problem) Error() string {
	s := p.Msg
	if len(p.Path) > 0 {
		s = p.Path.String() + ": " + s
	}
	if p.Line > 0 {
		s = fmt.Sprintf("line %d: %s", p.Line, s)
	}
	return s
}

// List collects every problem of a document, in the order they are found.
type List []Problem

// Add adds a problem at path, its message formatted as by fmt.Sprintf.
func (l *List) Add(path Path, format string, args ...any) {
	*l = append(*l, Problem{Path: path, Msg: fmt.Sprintf(format, args...)})
}

// Err returns the problems as one error, one per line (nil without any);
// errors.As finds each Problem.
func (l List) Err() error {
	errs := make([]error, len(l))
	for i, p := range l {
		errs[i] = p
	}
	return errors.Join(errs...)
}

// From is every Problem in err's tree (Err's, or one wrapped), in order;
// none when err holds no Problem.
func From(err error) List {
	var l List
	var walk func(error)
	walk = func(e error) {
		switch u := e.(type) {
		case nil:
		case Problem:
			l = append(l, u)
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				walk(x)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	walk(err)
	return l
}
