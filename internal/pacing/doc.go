// Package pacing owns send pacing: the budgets a policy gives the providers
// (a rate per second with a burst, the intents each covers, its priority
// lanes), which budget and lane an intent waits in, the topics held intents
// wait in, and the release of held intents at a budget's rate by every
// worker together (token leases from one Redis key per budget, served to
// the lanes of a worker in precedence order).
//
// Holding is not a verdict: a held intent is decided (every verdict of
// capping) when it is released, as if it arrived then. docs/concepts/pacing.md
// owns the guarantee.
package pacing
