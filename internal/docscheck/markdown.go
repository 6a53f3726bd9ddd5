package docscheck

// Reading the Markdown: pages, fenced blocks and their markers, headings
// and anchors, links and inline code outside the blocks.

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"unicode"
)

// Page is one Markdown file.
type Page struct {
	Path   string   // slash-separated, relative to the repository root
	Lines  []string // the file's lines
	Blocks []Block  // its fenced code blocks, in order
	// Prose is the file with every fenced block's lines blanked, so that
	// line numbers stay those of the file.
	Prose []string
}

// Block is one fenced code block.
type Block struct {
	Line   int    // the opening fence's line, from 1
	Lang   string // the first word of the info string ("" for none)
	Marker string // what the check marker before it says ("" for none)
	Text   string // the content, the fence's indentation removed
}

// Where names a line of a page for messages: README.md:12.
func (p *Page) Where(line int) string { return fmt.Sprintf("%s:%d", p.Path, line) }

// Load reads README.md, CONTRIBUTING.md and every .md file under docs/ of
// the repository at root.
func Load(root string) ([]*Page, error) {
	paths := []string{"README.md", "CONTRIBUTING.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			paths = append(paths, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var pages []*Page
	for _, p := range paths {
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(p)))
		if err != nil {
			return nil, err
		}
		pages = append(pages, Parse(p, string(data)))
	}
	return pages, nil
}

var (
	fenceRE  = regexp.MustCompile("^( *)(```+|~~~+)\\s*([^`\\s]*)[^`]*$")
	markerRE = regexp.MustCompile(`^<!--\s*check:\s*(.*?)\s*-->$`)
)

// Parse reads one page; path is how messages name it.
func Parse(path, text string) *Page {
	p := &Page{Path: path, Lines: strings.Split(strings.TrimSuffix(text, "\n"), "\n")}
	p.Prose = slices.Clone(p.Lines)
	for i := 0; i < len(p.Lines); i++ {
		m := fenceRE.FindStringSubmatch(p.Lines[i])
		if m == nil {
			continue
		}
		indent, fence := len(m[1]), m[2]
		b := Block{Line: i + 1, Lang: m[3]}
		for j := i - 1; j >= 0; j-- {
			prev := strings.TrimSpace(p.Lines[j])
			if prev == "" {
				continue
			}
			if mm := markerRE.FindStringSubmatch(prev); mm != nil {
				b.Marker = mm[1]
			}
			break
		}
		var body []string
		end := len(p.Lines)
		for j := i + 1; j < len(p.Lines); j++ {
			if t := strings.TrimSpace(p.Lines[j]); strings.HasPrefix(t, fence) && strings.Trim(t, fence[:1]) == "" {
				end = j
				break
			}
			body = append(body, strings.TrimPrefix(p.Lines[j], strings.Repeat(" ", indent)))
		}
		if len(body) > 0 {
			b.Text = strings.Join(body, "\n") + "\n"
		}
		p.Blocks = append(p.Blocks, b)
		for j := i; j <= end && j < len(p.Lines); j++ {
			p.Prose[j] = ""
		}
		i = end
	}
	return p
}

var (
	headingRE  = regexp.MustCompile(`^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	htmlIDRE   = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
	linkTextRE = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// Headings returns the page's headings' text, in order.
func (p *Page) Headings() []string {
	var out []string
	for _, l := range p.Prose {
		if m := headingRE.FindStringSubmatch(l); m != nil {
			out = append(out, m[2])
		}
	}
	return out
}

// Anchors returns every #fragment that leads somewhere on the page: the
// GitHub anchor of each heading (a repeated one gets -1, -2, ...) and
// the id or name of each <a> tag.
func (p *Page) Anchors() map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, h := range p.Headings() {
		s := Slug(h)
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	for _, l := range p.Prose {
		for _, m := range htmlIDRE.FindAllStringSubmatch(l, -1) {
			out[m[1]] = true
		}
	}
	return out
}

// Slug is the anchor GitHub gives a heading: its text without markup,
// lower case, every character but letters, digits, '_', '-' and spaces
// dropped, and each space a '-'.
func Slug(heading string) string {
	s := linkTextRE.ReplaceAllString(heading, "$1")
	s = strings.NewReplacer("`", "", "*", "").Replace(s)
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '_', r == '-':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// Link is one inline link of the page's prose.
type Link struct {
	Line   int
	Target string // as written: a URL, a path, path#anchor or #anchor
}

var linkRE = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// Links returns the inline links ([text](target)) outside code.
func (p *Page) Links() []Link {
	var out []Link
	for i, l := range p.Prose {
		for _, m := range linkRE.FindAllStringSubmatch(stripCodeSpans(l), -1) {
			out = append(out, Link{Line: i + 1, Target: m[1]})
		}
	}
	return out
}

var codeSpanRE = regexp.MustCompile("`[^`]+`")

func stripCodeSpans(l string) string { return codeSpanRE.ReplaceAllString(l, "``") }

// Span is one inline code span of the prose (tables included).
type Span struct {
	Line int
	Text string // without the backticks
}

// CodeSpans returns the inline code spans outside the fenced blocks.
func (p *Page) CodeSpans() []Span {
	var out []Span
	for i, l := range p.Prose {
		for _, m := range codeSpanRE.FindAllString(l, -1) {
			out = append(out, Span{Line: i + 1, Text: strings.Trim(m, "`")})
		}
	}
	return out
}

// Marker is a block's check marker, read: Kind is what the block is
// (policy, limits, config, plan, intent, status) or "none"; Invalid the
// error text a deliberately invalid example must fail with; Why the reason
// a block is not checked.
type Marker struct {
	Kind    string
	Invalid string
	Why     string
}

var (
	markerKindRE = regexp.MustCompile(`^([a-z]+)(?:,\s*invalid:\s*(.+))?$`)
	markerNoneRE = regexp.MustCompile(`^none\s*\((.+)\)$`)
)

// ParseMarker reads what follows "check:" in a marker: "KIND",
// "KIND, invalid: ERROR TEXT" or "none (WHY)".
func ParseMarker(s string) (Marker, error) {
	if m := markerNoneRE.FindStringSubmatch(s); m != nil {
		return Marker{Kind: "none", Why: strings.TrimSpace(m[1])}, nil
	}
	m := markerKindRE.FindStringSubmatch(s)
	if m == nil || m[1] == "none" {
		return Marker{}, fmt.Errorf("check marker %q: want <!-- check: KIND -->, <!-- check: KIND, invalid: ERROR TEXT --> or <!-- check: none (WHY) -->", s)
	}
	return Marker{Kind: m[1], Invalid: strings.TrimSpace(m[2])}, nil
}
