// Package capping owns the frequency-cap decision: per-segment policies and
// the Redis side (Lua sliding-log and sliding-window scripts called by SHA in
// pipelines that go-redis groups per Redis Cluster node).
package capping
