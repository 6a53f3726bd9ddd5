package segbuild

import (
	"github.com/capper-dev/capper/internal/objstore"
	"github.com/capper-dev/capper/internal/segments"

	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func gz(t testing.TB, s string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func writeFile(t testing.TB, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// buildInputs resolves args as the CLI does and builds.
func buildInputs(t testing.TB, opts BuilderOptions, stdin []byte, args ...string) (*Build, error) {
	t.Helper()
	ctx := context.Background()
	ins, err := ResolveInputs(ctx, args, InputOptions{Stdin: bytes.NewReader(stdin)})
	if err != nil {
		return nil, err
	}
	b := NewBuilder(opts)
	for _, in := range ins {
		if err := b.ReadInput(ctx, in); err != nil {
			return nil, err
		}
	}
	return b.Finish(ctx)
}

func lookups(t testing.TB, b *Build, want map[uint64]string) {
	t.Helper()
	s, err := b.Snapshot(t0)
	if err != nil {
		t.Fatal(err)
	}
	for id, seg := range want {
		if got := s.Lookup(id); got != seg {
			t.Errorf("Lookup(%d) = %q, want %q", id, got, seg)
		}
	}
}

func TestBuilderReadsEveryInputForm(t *testing.T) {
	dir := t.TempDir()
	csv := writeFile(t, dir, "a.csv", []byte("\ufeffUser_ID,Segment\r\n1,new\r\n\r\n  2 , new \r\n\"3\",\"active\"\r\n"))
	tsv := writeFile(t, dir, "b.tsv.gz", gz(t, "4\tactive\n5\tdormant")) // no final newline
	lists := filepath.Join(dir, "lists")
	os.Mkdir(lists, 0o755)
	writeFile(t, lists, "new.txt", []byte("6\n7\n\n"))
	writeFile(t, lists, "lapsed.txt.gz", gz(t, "8\n9\n"))
	stdin := gz(t, "10,active\n11,new\n") // gzip is detected on stdin too

	b, err := buildInputs(t, BuilderOptions{}, stdin, csv, "file://"+tsv, lists, "-")
	if err != nil {
		t.Fatal(err)
	}
	lookups(t, b, map[uint64]string{1: "new", 2: "new", 3: "active", 4: "active", 5: "dormant", 6: "new", 7: "new",
		8: "lapsed", 9: "lapsed", 10: "active", 11: "new", 12: segments.None})
	var names []string
	for _, s := range b.Segments {
		names = append(names, s.Name)
	}
	if !slices.Equal(names, []string{"active", "dormant", "lapsed", "new"}) {
		t.Fatalf("without a config, segments are sorted by name: %v", names)
	}
	if b.Rows != 11 || b.DuplicateRows != 0 || b.IDBits != 32 {
		t.Fatalf("rows %d dups %d bits %d", b.Rows, b.DuplicateRows, b.IDBits)
	}
}

func TestBuilderDirectoryWithStrayFile(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "new.txt", []byte("1\n"))
	writeFile(t, dir, "README.md", []byte("x"))
	_, err := buildInputs(t, BuilderOptions{}, nil, dir)
	wantErrContains(t, err, filepath.Join(dir, "README.md"), "is not a <segment>.txt or <segment>.txt.gz file")

	empty := t.TempDir()
	_, err = buildInputs(t, BuilderOptions{}, nil, empty)
	wantErrContains(t, err, "directory has no <segment>.txt files")

	bad := t.TempDir()
	writeFile(t, bad, "New Users.txt", []byte("1\n"))
	_, err = buildInputs(t, BuilderOptions{}, nil, bad)
	wantErrContains(t, err, `segment name "New Users" is invalid`)
}

func TestBuilderConflictsFailWithBothPositions(t *testing.T) {
	dir := t.TempDir()
	a := writeFile(t, dir, "a.csv", []byte("user_id,segment\n1,new\n2,new\n3,new\n"))
	lists := filepath.Join(dir, "lists")
	os.Mkdir(lists, 0o755)
	writeFile(t, lists, "active.txt", []byte("9\n2\n1\n1\n"))
	_, err := buildInputs(t, BuilderOptions{}, nil, a, lists)
	ce := asErr[*ConflictsError](t, err)
	if ce.Users != 2 || len(ce.Samples) != 2 {
		t.Fatalf("conflicts %+v", ce)
	}
	wantErrContains(t, err,
		"2 users are in more than one segment",
		fmt.Sprintf(`user 2: "new" at %s:3 and "active" at %s:2`, a, filepath.Join(lists, "active.txt")),
		fmt.Sprintf(`user 1: "new" at %s:2 and "active" at %s:3`, a, filepath.Join(lists, "active.txt")))
	if strings.Count(err.Error(), "user 1:") != 1 {
		t.Fatalf("a user listed again in the other segment is one conflict: %v", err)
	}
}

func TestBuilderConflictsReportFirstTen(t *testing.T) {
	var sb strings.Builder
	for i := range 25 {
		fmt.Fprintf(&sb, "%d,new\n", i)
	}
	for i := range 25 {
		fmt.Fprintf(&sb, "%d,active\n", i)
	}
	_, err := buildCSV(t, BuilderOptions{}, "c.csv", sb.String())
	ce := asErr[*ConflictsError](t, err)
	if ce.Users != 25 || len(ce.Samples) != 10 {
		t.Fatalf("%d conflicts, %d samples", ce.Users, len(ce.Samples))
	}
	wantErrContains(t, err, "25 users", `user 0: "new" at c.csv:1 and "active" at c.csv:26`, `user 9: "new" at c.csv:10 and "active" at c.csv:35`)
	if strings.Contains(err.Error(), "user 10:") {
		t.Fatal("only the first 10 conflicts are listed")
	}
}

func TestBuilderConflictFirstSeenOnStdin(t *testing.T) {
	dir := t.TempDir()
	a := writeFile(t, dir, "a.csv", []byte("5,active\n"))
	_, err := buildInputs(t, BuilderOptions{}, []byte("5,new\n"), "-", a)
	wantErrContains(t, err, fmt.Sprintf(`user 5: "new" at <stdin> (line not kept: stdin is read once) and "active" at %s:1`, a))
}

func TestBuilderPriorityPolicy(t *testing.T) {
	order := []string{"vip", "new", "active"}
	// User 1 is in all three (vip wins), user 2 in new and active (new
	// wins, whichever comes first in the input), user 3 only in active,
	// user 4 twice in new (a duplicate row, not a conflict).
	rows := []string{"1,active", "2,active", "1,new", "3,active", "2,new", "1,vip", "4,new", "4,new"}
	var want *Build
	for i := range 5 {
		r := rand.New(rand.NewPCG(uint64(i), 1))
		shuffled := slices.Clone(rows)
		if i > 0 {
			r.Shuffle(len(shuffled), func(a, b int) { shuffled[a], shuffled[b] = shuffled[b], shuffled[a] })
		}
		b := mustBuildCSV(t, BuilderOptions{Segments: order, OnConflict: ConflictPriority}, strings.Join(shuffled, "\n"))
		lookups(t, b, map[uint64]string{1: "vip", 2: "new", 3: "active", 4: "new"})
		if b.ConflictsResolved != 2 || b.DuplicateRows != 1 {
			t.Fatalf("resolved %d dups %d (order %v)", b.ConflictsResolved, b.DuplicateRows, shuffled)
		}
		if want == nil {
			want = b
			continue
		}
		for j := range b.Segments {
			if !bytes.Equal(b.Segments[j].Data, want.Segments[j].Data) {
				t.Fatalf("segment %s differs with row order %v", b.Segments[j].Name, shuffled)
			}
		}
	}
	if err := (BuilderOptions{OnConflict: ConflictPriority}).Validate(); err == nil {
		t.Fatal("priority without the segment order must be an error")
	}
	_, err := buildCSV(t, BuilderOptions{OnConflict: ConflictPriority}, "x.csv", "1,new\n")
	wantErrContains(t, err, "priority conflict policy needs the segment order")
}

func TestBuilderMalformedLines(t *testing.T) {
	long := strings.Repeat("9", 200)
	csv := "user_id,segment\n1,new\nabc,new\n2\n3,new,extra\n" + long + ",new\n-4,new\n5,New\n18446744073709551616,new\n6,\n7,active\n"
	_, err := buildCSV(t, BuilderOptions{}, "bad.csv", csv)
	bie := asErr[*BadInputError](t, err)
	if len(bie.Lines) != 1 {
		t.Fatalf("lines %v", bie.Lines)
	}
	wantErrContains(t, err, `bad.csv:3: user_id "abc" is not an unsigned 64-bit decimal integer (line "abc,new")`)

	b, err := buildCSV(t, BuilderOptions{MaxErrors: 8}, "bad.csv", csv)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range b.BadLines {
		got = append(got, l.String())
	}
	want := []string{
		`bad.csv:3: user_id "abc" is not an unsigned 64-bit decimal integer (line "abc,new")`,
		`bad.csv:4: want 2 fields, user_id,segment (line "2")`,
		`bad.csv:5: want 2 fields, user_id,segment; got more (line "3,new,extra")`,
		`bad.csv:6: user_id "` + long[:40] + `..." is not an unsigned 64-bit decimal integer (line "` + long[:80] + `...")`,
		`bad.csv:7: user_id "-4" is not an unsigned 64-bit decimal integer (line "-4,new")`,
		`bad.csv:8: segment name "New" is invalid (want ^[a-z0-9][a-z0-9_-]{0,62}$) (line "5,New")`,
		`bad.csv:9: user_id "18446744073709551616" is not an unsigned 64-bit decimal integer (line "18446744073709551616,new")`,
		`bad.csv:10: segment is empty (line "6,")`,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("bad lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	lookups(t, b, map[uint64]string{1: "new", 7: "active", 5: segments.None})

	_, err = buildCSV(t, BuilderOptions{MaxErrors: 7}, "bad.csv", csv)
	bie = asErr[*BadInputError](t, err)
	if len(bie.Lines) != 8 {
		t.Fatalf("one over the limit: %d lines listed", len(bie.Lines))
	}
	wantErrContains(t, err, "more than 7 malformed lines:", "bad.csv:10: segment is empty")
}

func TestBuilderLongLine(t *testing.T) {
	csv := "1,new\n" + strings.Repeat("x", 2<<20) + "\n2,new\n"
	b, err := buildCSV(t, BuilderOptions{MaxErrors: 1}, "long.csv", csv)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.BadLines) != 1 || b.BadLines[0].At.Line != 2 || !strings.Contains(b.BadLines[0].Reason, "line longer than") {
		t.Fatalf("bad lines %v", b.BadLines)
	}
	lookups(t, b, map[uint64]string{1: "new", 2: "new"})
}

func TestBuilderUnknownSegment(t *testing.T) {
	_, err := buildCSV(t, BuilderOptions{Segments: []string{"new", "active"}, MaxErrors: 100}, "u.csv", "1,new\n2,vip\n")
	use := asErr[*UnknownSegmentError](t, err)
	if use.Name != "vip" {
		t.Fatalf("%+v", use)
	}
	wantErrContains(t, err, `u.csv:2: unknown segment "vip" (the config's segments are: new, active)`)

	dir := t.TempDir()
	writeFile(t, dir, "vip.txt", []byte("1\n"))
	_, err = buildInputs(t, BuilderOptions{Segments: []string{"new"}}, nil, dir)
	wantErrContains(t, err, filepath.Join(dir, "vip.txt")+":1: unknown segment \"vip\" (the config's segments are: new)")
}

func TestBuilder64BitIDs(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	big := uint64(math.MaxUint32) + 1
	csv := fmt.Sprintf("1,new\n%d,new\n%d,active\n%d,active\n2,active\n", uint64(math.MaxUint32), big, uint64(math.MaxUint64))
	b, err := buildCSV(t, BuilderOptions{Logger: log}, "w.csv", csv)
	if err != nil {
		t.Fatal(err)
	}
	if b.IDBits != 64 {
		t.Fatalf("id bits %d", b.IDBits)
	}
	lookups(t, b, map[uint64]string{1: "new", math.MaxUint32: "new", big: "active", math.MaxUint64: "active", 2: "active", big + 1: segments.None, 3: segments.None})
	// Five users in ~150 bytes: far more than 8 bytes per user.
	if !strings.Contains(logs.String(), "roaring64 is compact only for clustered ids") {
		t.Fatalf("no warning about bytes per user: %q", logs.String())
	}

	// Through a store and back: id_bits 64 in the manifest.
	st := openDir(t, t.TempDir())
	m, err := Publish(context.Background(), st, b, PublishOptions{Now: fixedNow(t0)})
	if err != nil {
		t.Fatal(err)
	}
	s, err := segments.Load(context.Background(), st, segments.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if m.IDBits != 64 || s.IDBits() != 64 || s.Lookup(math.MaxUint64) != "active" || s.Lookup(math.MaxUint32) != "new" {
		t.Fatalf("loaded 64-bit snapshot: bits %d", s.IDBits())
	}

	// The first row is 64-bit: segments created after the switch, and
	// segments left empty, still serialize to valid bitmaps.
	b, err = buildCSV(t, BuilderOptions{Segments: []string{"new", "active", "empty"}}, "w.csv", fmt.Sprintf("%d,new\n7,active\n", big))
	if err != nil {
		t.Fatal(err)
	}
	lookups(t, b, map[uint64]string{big: "new", 7: "active", 0: segments.None})
	b, err = buildCSV(t, BuilderOptions{}, "w.csv", fmt.Sprintf("%d,new\n%d,active\n", big, big+1))
	if err != nil {
		t.Fatal(err)
	}
	lookups(t, b, map[uint64]string{big: "new", big + 1: "active", 0: segments.None})

	// A 64-bit conflict is still found across the switch.
	_, err = buildCSV(t, BuilderOptions{}, "w.csv", fmt.Sprintf("7,new\n%d,new\n7,active\n", big))
	wantErrContains(t, err, `user 7: "new" at w.csv:1 and "active" at w.csv:3`)
}

// TestBuilderDeterministic: the same rows, in any order and with
// duplicates, give byte-identical objects, the same sha256 values and the
// same version suffix.
func TestBuilderDeterministic(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	var rows []string
	for range 20000 {
		id := r.Uint64N(1 << 22)
		rows = append(rows, fmt.Sprintf("%d,seg%d", id, id%3))
	}
	var first *Build
	var firstM *segments.Manifest
	for i := range 3 {
		shuffled := slices.Clone(rows)
		r.Shuffle(len(shuffled), func(a, b int) { shuffled[a], shuffled[b] = shuffled[b], shuffled[a] })
		if i == 2 {
			shuffled = append(shuffled, shuffled[:100]...) // duplicates
		}
		b := mustBuildCSV(t, BuilderOptions{}, strings.Join(shuffled, "\n"))
		st := openDir(t, t.TempDir())
		m, err := Publish(context.Background(), st, b, PublishOptions{Now: fixedNow(t0.Add(timeHours(i)))})
		if err != nil {
			t.Fatal(err)
		}
		if first == nil {
			first, firstM = b, m
			continue
		}
		for j, s := range b.Segments {
			if !bytes.Equal(s.Data, first.Segments[j].Data) || s.SHA256 != first.Segments[j].SHA256 || m.Segments[j].SHA256 != firstM.Segments[j].SHA256 {
				t.Fatalf("run %d: segment %s differs", i, s.Name)
			}
		}
		if m.Version == firstM.Version || m.Version[16:] != firstM.Version[16:] {
			t.Fatalf("versions %s and %s: want another time, the same content suffix", m.Version, firstM.Version)
		}
	}
}

func TestBuilderRejectsEmptyInput(t *testing.T) {
	_, err := buildInputs(t, BuilderOptions{}, []byte("user_id,segment\n"), "-")
	wantErrContains(t, err, "no users in the inputs")
}

func TestResolveInputsErrors(t *testing.T) {
	for args, want := range map[string]string{
		"-,-":              `input "-" (stdin) given twice`,
		"/no/such/file":    "input /no/such/file: stat /no/such/file: no such file or directory",
		"http://x/y":       "unsupported scheme",
		"s3://bucket/dir/": "want s3://bucket/key naming one object",
	} {
		_, err := ResolveInputs(context.Background(), strings.Split(args, ","), InputOptions{Stdin: strings.NewReader("")})
		wantErrContains(t, err, want)
	}
}

func TestBuilderS3Input(t *testing.T) {
	ctx := context.Background()
	opts := startS3(t, objstore.S3Options{})
	st, err := objstore.Open(ctx, "s3://capper/in", objstore.Options{S3: opts})
	if err != nil {
		t.Fatal(err)
	}
	putBytes(t, st, "users.csv.gz", gz(t, "1,new\n2,active\n"))
	ins, err := ResolveInputs(ctx, []string{"s3://capper/in/users.csv.gz"}, InputOptions{S3: opts})
	if err != nil {
		t.Fatal(err)
	}
	if len(ins) != 1 || ins[0].Size <= 0 || !ins[0].Rereadable {
		t.Fatalf("inputs %+v", ins)
	}
	b := NewBuilder(BuilderOptions{})
	if err := b.ReadInput(ctx, ins[0]); err != nil {
		t.Fatal(err)
	}
	build, err := b.Finish(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lookups(t, build, map[uint64]string{1: "new", 2: "active"})
}
