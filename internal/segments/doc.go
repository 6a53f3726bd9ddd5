// Package segments owns the runtime side of user segments: the snapshot
// layout in a store (LATEST, manifest, one roaring bitmap per segment),
// loading and verifying a snapshot, serving Lookup(userID) from the one in
// use, and the watcher that hot-swaps a new version in. Building and
// publishing snapshots is segbuild's; the worker does not link it.
package segments
