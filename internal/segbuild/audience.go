package segbuild

// A campaign plan's audience: files of user ids (one per line, gzip read
// transparently, local or s3://) into one roaring bitmap, with the
// builder's checks and messages (a malformed line names its file:line).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
)

// audienceSegment names the audience inside the builder.
const audienceSegment = "audience"

// Audience is a built audience.
type Audience struct {
	Data  []byte // roaring portable serialization (32-bit ids)
	Users uint64
	Rows  uint64 // lines read
	// BadLines are the malformed lines a build with MaxErrors skipped.
	BadLines []BadLine
}

// BuildAudience reads the inputs (paths, directories of id files, or
// s3://bucket/key objects), every one a list of user ids, into a bitmap.
// Ids above 2^32-1 are refused: plans keep 32-bit bitmaps.
func BuildAudience(ctx context.Context, args []string, opts InputOptions, maxErrors int, logger *slog.Logger) (*Audience, error) {
	ins, err := ResolveInputs(ctx, args, opts)
	if err != nil {
		return nil, err
	}
	b := NewBuilder(BuilderOptions{Segments: []string{audienceSegment}, MaxErrors: maxErrors, Logger: logger})
	for _, in := range ins {
		in.Segment = audienceSegment // every line a user id
		if err := b.ReadInput(ctx, in); err != nil {
			return nil, fmt.Errorf("audience: %w", err)
		}
	}
	res, err := b.Finish(ctx)
	if err != nil {
		return nil, fmt.Errorf("audience: %w", err)
	}
	if res.IDBits != 32 {
		return nil, errors.New("audience: user ids above 4294967295 are not supported in campaign plans")
	}
	s := res.Segments[0]
	return &Audience{Data: s.Data, Users: s.Users, Rows: res.Rows, BadLines: res.BadLines}, nil
}
