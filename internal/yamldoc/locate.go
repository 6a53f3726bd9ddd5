package yamldoc

// Where a field is in a document's text: the line of each key and value,
// by its path (problems.Path), so that a problem found after decoding (a
// value out of range) names its line too.

import (
	"slices"

	"go.yaml.in/yaml/v3"

	"github.com/capper-dev/capper/internal/problems"
)

// spot is a key or a value of the document, and its path.
type spot struct {
	node *yaml.Node
	key  bool
	path problems.Path
}

type spotList []spot

// spots lists every key and value under root, in document order. An item
// of a list that has a name key is shown named, as the documents' checks
// show it: budgets[0] (budget "push-fcm").
func spots(root *yaml.Node) spotList {
	var at spotList
	var walk func(n *yaml.Node, path problems.Path)
	walk = func(n *yaml.Node, path problems.Path) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, path)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p := append(slices.Clip(path), problems.Step{Key: k.Value})
				at = append(at, spot{node: k, key: true, path: p}, spot{node: v, path: p})
				walk(v, p)
			}
		case yaml.SequenceNode:
			var kind string
			if len(path) > 0 {
				kind = path[len(path)-1].Key
				if len(kind) > 1 && kind[len(kind)-1] == 's' {
					kind = kind[:len(kind)-1]
				}
			}
			for i, c := range n.Content {
				p := path.Index(i)
				if name, ok := nameOf(c); ok && kind != "" {
					p = path.Named(i, kind, name)
				}
				at = append(at, spot{node: c, path: p})
				walk(c, p)
			}
		}
	}
	walk(root, nil)
	return at
}

// nameOf is the value of a mapping's name key.
func nameOf(n *yaml.Node) (string, bool) {
	if n.Kind != yaml.MappingNode {
		return "", false
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "name" && n.Content[i+1].Kind == yaml.ScalarNode {
			return n.Content[i+1].Value, true
		}
	}
	return "", false
}

// find is the first key (key) or value on line that match accepts.
func (at spotList) find(line int, key bool, match func(*yaml.Node) bool) (spot, bool) {
	for _, s := range at {
		if s.node.Line == line && s.key == key && match(s.node) {
			return s, true
		}
	}
	return spot{}, false
}

// Locate sets the line of each problem of ps from data, the document they
// were found in: the line of its field's key, or, for a field the
// document leaves out, of the nearest enclosing one. A path is matched by
// its keys and indexes, not by the names shown with them. ps is not
// changed; a document that does not parse leaves the lines unknown.
func Locate(data []byte, ps problems.List) problems.List {
	var root yaml.Node
	if len(ps) == 0 || yaml.Unmarshal(data, &root) != nil {
		return ps
	}
	at := spots(&root)
	out := slices.Clone(ps)
	for i, p := range out {
		best := 0
		for _, s := range at {
			// A key's line, or a list item's (a value's is its key's).
			item := s.path[len(s.path)-1].Key == ""
			if (s.key || item) && len(s.path) > best && within(s.path, p.Path) {
				best, out[i].Line = len(s.path), s.node.Line
			}
		}
	}
	return out
}

// within reports whether prefix is p or a path above it, by keys and
// indexes.
func within(prefix, p problems.Path) bool {
	if len(prefix) > len(p) {
		return false
	}
	for i, s := range prefix {
		if s.Key != p[i].Key || (s.Key == "" && s.Index != p[i].Index) {
			return false
		}
	}
	return true
}
