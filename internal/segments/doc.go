// Package segments owns user segments: building one roaring bitmap per
// segment, publishing verified, versioned snapshots to a store (a directory or
// S3), loading and verifying them, and serving Lookup(userID) from the
// snapshot that is current, hot-swapped by a watcher.
package segments
