// Package segbuild owns the offline side of user segments, what
// segment-builder runs: reading user lists (CSV/TSV, id lists, stdin, S3)
// into one roaring bitmap per segment with exclusivity checks, and
// publishing the result as a verified, versioned snapshot in the layout
// package segments reads.
package segbuild
