// Package capping owns the frequency-cap decision: per-segment policies and
// the Redis side (Lua sliding-log and sliding-window scripts called by SHA in
// pipelines that go-redis groups per Redis Cluster node).
//
// # Semantics
//
// A policy is a list of limits {window W, max M, optional channel}; an intent
// is allowed when every limit that applies to its channel (limits without a
// channel, and those of its channel) is under its max. Windows are
// half-open: an intent allowed at t counts for decisions at times in
// [t, t+W), not at t+W. Intents recorded with a time after the decision time
// (another worker whose clock is ahead) count too, which keeps the caps
// exact across workers whatever their skew: in any interval of length W of
// recorded times there are at most M intents. Decision times come from the
// caller; Engine.RunClockCheck watches the skew of the Redis masters against
// this process.
//
// Counts are facts about the user, not about the policy: the retention of
// the logs is the longest window of every policy (and at least the
// idempotency window), an allowed intent on a channel that some policy caps
// separately is always recorded in that channel's log, and sliding_window
// counters are shared by every limit with the same window and channel. So a
// user who moves to another segment with a new snapshot is judged on their
// real history.
//
// Exempt categories never reach Redis and are not counted.
//
// # Algorithms and keys
//
// sliding_log (exact, default): <prefix>:{<uid>} is a sorted set of the
// user's allowed intents (member: xxhash64 of the intent id, 8 bytes; score:
// decision time in ms), and <prefix>:{<uid>}:<channel> the same for a
// channel some policy caps. The set is also the idempotency record: an
// intent id found in it within the retention answers Duplicate and is not
// counted again. See sliding_log.lua for what one call costs.
//
// sliding_window (approximate): one hash of counters per (window, channel),
// <prefix>:{<uid>}:sw:<window ms>[:<channel>], one counter per sub-interval
// of W/SubIntervals, and an idempotency marker <prefix>:{<uid>}:d:<digest>
// that expires after the retention (server time). The estimate weights the
// sub-interval that straddles the window's start by its part inside the
// window. Error bound: at the time t of any allowed intent, the window
// (t-W, t] holds at most M + floor((1-f)*c) intents, where c is the count of
// the sub-interval holding t-W+1 and f the part of that sub-interval inside
// the window; so at most M plus one sub-interval's count, under 2M under
// bursts, close to M for smooth traffic. The tests check that bound against
// the recorded decisions.
//
// Every key of a user carries the hash tag {<uid>}: one slot, one node, one
// atomic script call per intent.
//
// # Failures
//
// Decide sends a batch as one pipeline; errors are per request. Calls that
// Redis refused without running the script (NOSCRIPT, TRYAGAIN, CLUSTERDOWN,
// LOADING, MASTERDOWN, READONLY, leftover MOVED/ASK) are re-sent a few times
// as EVAL; what still fails is returned in Decision.Err for the caller to
// retry later. When go-redis re-sends a node's whole sub-batch (read
// timeout, or a retryable error on its first command), intents its unseen
// first run allowed answer Duplicate: nothing is counted twice.
//
// During a slot migration, a call with several keys (a tracked channel's
// intent, every sliding_window call) answers TRYAGAIN while some of its keys
// are missing on the node that serves it, which during a migration includes
// keys that do not exist yet; such calls wait for the migration of their
// keys. A re-sent call can then be decided after later calls of the same
// user in its batch; every decision stays atomic, so the caps hold.
package capping
