package segbuild

// Inputs: files, directories, stdin and S3 objects, read line by line.

import (
	"github.com/capper-dev/capper/internal/segments"

	"github.com/capper-dev/capper/internal/objstore"

	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/capper-dev/capper/internal/clip"
)

const stdinName = "<stdin>"

// Input is one source of rows for a Builder.
type Input struct {
	// Name is how messages refer to it: a path, a URL or "<stdin>".
	Name string
	// Segment, when set, makes this a list of user ids, one per line, all in
	// this segment (a <segment>.txt file). Otherwise lines are
	// "user_id,segment" (CSV) or "user_id<TAB>segment" (TSV).
	Segment string
	// Size in bytes, -1 when not known (for progress).
	Size int64
	// Rereadable inputs can be opened again, to locate conflicts.
	Rereadable bool
	// Open opens the raw bytes; gzip is detected by its magic bytes.
	Open func(ctx context.Context) (io.ReadCloser, error)
}

// InputOptions configures ResolveInputs.
type InputOptions struct {
	Stdin io.Reader          // read for "-"
	S3    objstore.S3Options // for s3:// inputs
}

// ResolveInputs turns --input arguments into inputs: "-" (stdin, at most
// once), a file or file:// URL (CSV/TSV), a directory (every file must be
// <segment>.txt or <segment>.txt.gz), or s3://bucket/key (CSV/TSV).
func ResolveInputs(ctx context.Context, args []string, opts InputOptions) ([]Input, error) {
	if len(args) == 0 {
		return nil, errors.New("no inputs")
	}
	var out []Input
	stdinUsed := false
	for _, arg := range args {
		switch {
		case arg == "-":
			if stdinUsed {
				return nil, errors.New(`input "-" (stdin) given twice`)
			}
			if opts.Stdin == nil {
				return nil, errors.New(`input "-": no stdin`)
			}
			stdinUsed = true
			out = append(out, ReaderInput(stdinName, opts.Stdin))
		case strings.HasPrefix(arg, "s3://"):
			in, err := s3Input(ctx, arg, opts.S3)
			if err != nil {
				return nil, fmt.Errorf("input %s: %w", arg, err)
			}
			out = append(out, in)
		case strings.HasPrefix(arg, "file://"):
			p, err := objstore.FilePath(arg)
			if err != nil {
				return nil, fmt.Errorf("input %s: %w", arg, err)
			}
			ins, err := pathInputs(p)
			if err != nil {
				return nil, err
			}
			out = append(out, ins...)
		case strings.Contains(arg, "://"):
			return nil, fmt.Errorf("input %s: unsupported scheme (want a path, file://, s3:// or -)", arg)
		default:
			ins, err := pathInputs(arg)
			if err != nil {
				return nil, err
			}
			out = append(out, ins...)
		}
	}
	return out, nil
}

// ReaderInput is a CSV/TSV input read once from r.
func ReaderInput(name string, r io.Reader) Input {
	return Input{Name: name, Size: -1, Open: func(context.Context) (io.ReadCloser, error) { return io.NopCloser(r), nil }}
}

// FileInput is a CSV/TSV file, or, with segment set, a one-id-per-line list.
func FileInput(path, segment string) (Input, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return Input{}, fmt.Errorf("input %s: %w", path, err)
	}
	return Input{
		Name: path, Segment: segment, Size: fi.Size(), Rereadable: true,
		Open: func(context.Context) (io.ReadCloser, error) { return os.Open(path) },
	}, nil
}

func pathInputs(path string) ([]Input, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("input %s: %w", path, err)
	}
	if !fi.IsDir() {
		in, err := FileInput(path, "")
		if err != nil {
			return nil, err
		}
		return []Input{in}, nil
	}
	entries, err := os.ReadDir(path) // sorted by name: a stable order
	if err != nil {
		return nil, fmt.Errorf("input %s: %w", path, err)
	}
	var out []Input
	for _, e := range entries {
		full := filepath.Join(path, e.Name())
		seg, ok := listFileSegment(e.Name())
		if e.IsDir() || !ok {
			return nil, fmt.Errorf("input %s: %s is not a <segment>.txt or <segment>.txt.gz file (a directory input holds one id list per segment and nothing else)", path, full)
		}
		if err := segments.ValidateSegmentName(seg); err != nil {
			return nil, fmt.Errorf("input %s: file %s: %w", path, e.Name(), err)
		}
		in, err := FileInput(full, seg)
		if err != nil {
			return nil, err
		}
		out = append(out, in)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("input %s: directory has no <segment>.txt files", path)
	}
	return out, nil
}

func listFileSegment(name string) (string, bool) {
	for _, suf := range []string{".txt.gz", ".txt"} {
		if s, ok := strings.CutSuffix(name, suf); ok && s != "" {
			return s, true
		}
	}
	return "", false
}

func s3Input(ctx context.Context, raw string, opts objstore.S3Options) (Input, error) {
	bucket, key, err := objstore.SplitS3URL(raw)
	if err != nil {
		return Input{}, err
	}
	if key == "" || strings.HasSuffix(key, "/") {
		return Input{}, errors.New("want s3://bucket/key naming one object")
	}
	st, err := objstore.Open(ctx, "s3://"+bucket, objstore.Options{S3: opts})
	if err != nil {
		return Input{}, err
	}
	size, err := st.Size(ctx, key)
	if err != nil {
		return Input{}, err
	}
	return Input{
		Name: raw, Size: size, Rereadable: true,
		Open: func(ctx context.Context) (io.ReadCloser, error) {
			rc, _, err := st.Get(ctx, key)
			return rc, err
		},
	}, nil
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

const (
	readBufferSize = 1 << 20 // also the longest line accepted
	progressEvery  = 1 << 16 // rows between progress calls and ctx checks
)

type rowFunc func(id uint64, seg []byte, at Position, line []byte) error
type badFunc func(at Position, line []byte, reason string) error

// scanInput reads one input line by line without allocating per line and
// calls row for each well-formed row and bad for each malformed one. It
// returns the number of source bytes read.
func scanInput(ctx context.Context, in Input, progress func(int64), row rowFunc, bad badFunc) (int64, error) {
	if in.Open == nil {
		return 0, fmt.Errorf("input %s: nothing to open", in.Name)
	}
	rc, err := in.Open(ctx)
	if err != nil {
		return 0, fmt.Errorf("input %s: %w", in.Name, err)
	}
	defer rc.Close()
	src := &countingReader{r: rc}
	br := bufio.NewReaderSize(src, readBufferSize)
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return src.n, fmt.Errorf("input %s: gzip: %w", in.Name, err)
		}
		defer zr.Close()
		br = bufio.NewReaderSize(zr, readBufferSize)
	}

	p := lineParser{segment: []byte(in.Segment), list: in.Segment != ""}
	at := Position{Source: in.Name}
	for {
		line, rerr := br.ReadSlice('\n')
		if errors.Is(rerr, bufio.ErrBufferFull) {
			at.Line++
			head := append([]byte(nil), line[:80]...)
			for errors.Is(rerr, bufio.ErrBufferFull) { // skip the rest of it
				_, rerr = br.ReadSlice('\n')
			}
			if err := bad(at, head, fmt.Sprintf("line longer than %d bytes", readBufferSize)); err != nil {
				return src.n, err
			}
		} else if len(line) > 0 {
			at.Line++
			if err := p.parse(line, at, row, bad); err != nil {
				return src.n, err
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return src.n, fmt.Errorf("input %s: read after line %d: %w", in.Name, at.Line, rerr)
		}
		if at.Line%progressEvery == 0 {
			if err := ctx.Err(); err != nil {
				return src.n, err
			}
			if progress != nil {
				progress(src.n)
			}
		}
	}
	if progress != nil {
		progress(src.n)
	}
	return src.n, nil
}

// lineParser parses the lines of one input.
type lineParser struct {
	list    bool   // one id per line, all in segment
	segment []byte // for list inputs
	started bool   // a non-blank line was seen (the header can only be first)
	delim   byte
}

func (p *lineParser) parse(raw []byte, at Position, row rowFunc, bad badFunc) error {
	line := bytes.TrimSpace(raw) // also drops "\n" and "\r"
	if !p.started {
		line = bytes.TrimPrefix(line, []byte("\ufeff")) // a UTF-8 BOM, as spreadsheets write
	}
	if len(line) == 0 {
		return nil
	}
	first := !p.started
	p.started = true
	if p.list {
		id, ok := parseUint(unquote(line))
		if !ok {
			return bad(at, line, fmt.Sprintf("user id %q is not an unsigned 64-bit decimal integer", clip.String(string(line), 40)))
		}
		return row(id, p.segment, at, line)
	}
	if first {
		// Tab-separated if the first line has a tab; comma otherwise.
		p.delim = ','
		if bytes.IndexByte(line, '\t') >= 0 {
			p.delim = '\t'
		}
	}
	i := bytes.IndexByte(line, p.delim)
	if i < 0 {
		return bad(at, line, fmt.Sprintf("want 2 fields, user_id%ssegment", delimName(p.delim)))
	}
	idField := unquote(bytes.TrimSpace(line[:i]))
	segField := unquote(bytes.TrimSpace(line[i+1:]))
	if bytes.IndexByte(segField, p.delim) >= 0 {
		return bad(at, line, fmt.Sprintf("want 2 fields, user_id%ssegment; got more", delimName(p.delim)))
	}
	id, ok := parseUint(idField)
	if !ok {
		if first && bytes.EqualFold(idField, []byte("user_id")) && bytes.EqualFold(segField, []byte("segment")) {
			return nil // header
		}
		return bad(at, line, fmt.Sprintf("user_id %q is not an unsigned 64-bit decimal integer", clip.String(string(idField), 40)))
	}
	return row(id, segField, at, line)
}

func delimName(d byte) string {
	if d == '\t' {
		return "<TAB>"
	}
	return string(d)
}

// unquote strips one pair of surrounding double quotes, as CSV writers add.
func unquote(b []byte) []byte {
	if len(b) >= 2 && b[0] == '"' && b[len(b)-1] == '"' {
		return bytes.TrimSpace(b[1 : len(b)-1])
	}
	return b
}

// parseUint parses a decimal uint64 without allocating.
func parseUint(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (math.MaxUint64-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}
