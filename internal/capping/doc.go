// Package capping owns the decision on a send intent, every verdict of it
// in one order (verdicts.go: campaign control and send-by, quiet hours,
// exempt categories, overrides, users' own limits, plans' bookings, the
// caps, deferral) and the outcome and reason vocabularies with what shadow
// mode does with each; the gate the holding readers ask (Campaigns.Gate);
// the rules (policies of limits per segment, scopes, calendar periods,
// priorities, overrides, users' tiers and channels), their compilation into
// one Lua script per rule set, and the Redis side (that script called by
// SHA in pipelines that go-redis groups per Redis Cluster node, refunds and
// give-backs, readiness per master).
//
// # Semantics
//
// A policy is a list of limits; every limit that applies to an intent must
// pass, and a refusal names the first one (policy order). A limit applies to
// the intents its Where matches and counts the user's past sends that match
// it (per campaign with Per). A rolling limit allows at most Max sends in
// any Window; a calendar limit at most Max per local day, week or month in
// the user's time zone. Reserve keeps slots for higher priorities. An
// honoured Bypass is recorded without checking; BypassUncounted is not even
// recorded. Exempt categories never reach Redis.
//
// Times are whole seconds: a send at t counts for decisions at now while
// floor(now) - W <= floor(t), so for up to one second longer than its window
// (never shorter). Sends recorded with a time after the decision time (a
// worker whose clock is ahead) count too, which keeps the caps exact across
// workers whatever their skew: in any span of W seconds of recorded times
// there are at most Max sends, and in any calendar period at most Max.
//
// Counts are facts about the user, not about the policy: a send is recorded
// in every scope (a distinct Where and Per) of any policy that it matches,
// so a user who moves to another segment is judged on their real history,
// and a scope keeps its counts across policy versions that keep it.
//
// # Storage
//
// A user's record is field <uid%32> of the hash <prefix>:{b<uid/32>}, shared
// by 32 consecutive user ids (a key costs Redis about 100 bytes before it
// holds anything). The record (record.go) packs the idempotency entries of
// the last idempotency window and one section of send times per scope (and
// campaign), each trimmed to what a limit can still count: times inside the
// scope's longest window (plus a margin for clock skew), at most its
// largest max. The hash stays a compact listpack while every record fits in
// hash-max-listpack-value (see ListpackValue). Its field "x", the mark
// (layout.go), says until when the key's expiry covers every record and a
// time no record was last written before; the first write after the first
// extends it (once per idempotency window), and one that finds the second
// too old drops the records of users whose latest write is older than
// anything a limit looks at. So a user who
// stops receiving leaves nothing after the longest retention plus the
// idempotency window.
//
// # Failures
//
// Decide sends a batch as one pipeline; errors are per request. Calls that
// Redis refused without running the script (NOSCRIPT, TRYAGAIN, CLUSTERDOWN,
// LOADING, MASTERDOWN, READONLY, leftover MOVED/ASK) are re-sent a few times
// as EVAL; what still fails is returned in Decision.Err for the caller to
// retry later. When go-redis re-sends a node's whole sub-batch (read
// timeout, or a retryable error on its first command), intents its unseen
// first run allowed answer Duplicate: nothing is counted twice. Every call
// touches one key, so a slot migration only redirects it (ASK), whole.
package capping
