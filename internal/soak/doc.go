// Package soak owns the fault soak: a randomized run of the real `capper
// run` binaries (several workers in one group) against real servers (a
// single redis-server with an append-only file, or a 3-master Redis
// Cluster with replicas and wait_replicas whose masters either persist or
// come back only after their replica took over; the kfake broker over
// TCP with a compacted control topic; a segment snapshot, a plan store and
// a policy file swapped live, with a provider budget whose two lanes hold
// part of the pushes and a user_limits section; a compacted user-limits
// topic), fed a generated workload and users' own limits (records for a
// few dozen of its users: snoozes, tiers, channels turned down, quiet
// hours, changes, clears and records the policy refuses) while faults
// chosen by a seed hit every part (workers killed and stopped, Redis shut
// down, killed, paused and failed over, its script cache flushed, a slot
// migrated, the broker restarted, campaigns stopped and paused, a foreign
// record under a stopped campaign's key compacted, a stop during a Redis
// stall). It then reads every output topic and every user's record in
// Redis back and checks the oldest promises with code that shares nothing
// with the engine (internal/audit and its own checks): every input has
// exactly one final outcome, a user's intents are decided in partition
// order within each delivery pass (and within a lane: a paced intent is
// decided in its budget's release order), the budget holds the intents it
// covers in their lanes, releases at most 1.01 x its rate plus its burst
// in any second, and a paced delivery reaches its topic within a second of
// its decision, no user is above any limit, no refusal
// is one the caps do not explain, nothing is delivered or counted twice
// without the duplicate flag, nothing undelivered stays counted, no
// stopped campaign is delivered, no delivery broke a user's own limits in
// force when it was decided (those of the user's latest record settled by
// then: acknowledged 2 s before, or seen applied; a delivery decided while
// a record settles is counted ambiguous), the limits Redis holds at the end
// are each user's latest record's, and every worker is not ready while
// Redis cannot decide. Its processes die with it, however it ends.
//
// The soak is a test (soak_test.go): `make test` runs a short one with a
// fixed seed; `make soak SEED=N DURATION=S` runs any other. The seed
// chooses the topology, the workload and the fault schedule, which the
// run prints, so a failing seed replays the same schedule.
package soak
