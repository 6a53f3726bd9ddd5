package docscheck

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// checkLinks returns one problem per relative link of the pages that
// leads nowhere: a file or directory that does not exist, or an #anchor
// that is not on its page. exists says whether a repository path exists.
func checkLinks(pages []*Page, exists func(string) bool) []string {
	byPath := map[string]*Page{}
	for _, p := range pages {
		byPath[p.Path] = p
	}
	var problems []string
	for _, p := range pages {
		for _, l := range p.Links() {
			if strings.Contains(l.Target, "://") || strings.HasPrefix(l.Target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(l.Target, "#")
			target := p.Path
			if file != "" {
				target = path.Clean(path.Join(path.Dir(p.Path), file))
				if strings.HasPrefix(target, "../") {
					problems = append(problems, fmt.Sprintf("%s: %s leaves the repository", p.Where(l.Line), l.Target))
					continue
				}
				if !exists(target) {
					problems = append(problems, fmt.Sprintf("%s: %s: no such file", p.Where(l.Line), l.Target))
					continue
				}
			}
			if anchor == "" {
				continue
			}
			tp, ok := byPath[target]
			if !ok {
				problems = append(problems, fmt.Sprintf("%s: %s: an anchor into a page the checks do not read", p.Where(l.Line), l.Target))
				continue
			}
			if !tp.Anchors()[anchor] {
				problems = append(problems, fmt.Sprintf("%s: %s: %s has no heading or <a id> with anchor #%s", p.Where(l.Line), l.Target, target, anchor))
			}
		}
	}
	return problems
}

func repoPathExists(p string) bool {
	_, err := os.Stat(filepath.Join(root, filepath.FromSlash(p)))
	return err == nil
}

// TestLinks: every relative link and #anchor of the docs resolves.
func TestLinks(t *testing.T) {
	pages := loadPages(t)
	n := 0
	for _, p := range pages {
		n += len(p.Links())
	}
	if n < 50 {
		t.Fatalf("found only %d links", n)
	}
	for _, problem := range checkLinks(pages, repoPathExists) {
		t.Error(problem)
	}
}

// TestLinksCanFail: a missing file, a missing anchor on another page and
// on the same page are reported; GitHub's anchors of repeated headings
// and <a id> tags resolve.
func TestLinksCanFail(t *testing.T) {
	a := Parse("docs/a.md", "# Title\n\n## Same\n\n## Same\n\n<a id=\"here\"></a>\n\nSee [b](b.md#no-such), [c](c.md), [self](#nowhere), "+
		"[ok](b.md#its-heading-with-code), [ok](#same-1), [ok](#here), [web](https://example.com/x#y) and `[code](nowhere.md)`.\n")
	b := Parse("docs/b.md", "# Its heading: with `code`\n")
	exists := func(p string) bool { return p == "docs/a.md" || p == "docs/b.md" }
	got := checkLinks([]*Page{a, b}, exists)
	want := []string{"b.md#no-such", "c.md: no such file", "#nowhere"}
	if len(got) != len(want) {
		t.Fatalf("got %d problems, want %d: %q", len(got), len(want), got)
	}
	for i, w := range want {
		if !strings.Contains(got[i], w) {
			t.Errorf("problem %d is %q, want it to name %q", i, got[i], w)
		}
	}
}
