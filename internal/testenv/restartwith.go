package testenv

// Restarting a node with a changed configuration.

import "slices"

// RestartWith is Restart with extra redis-server arguments, kept for every
// later start too: e.g. "--appendonly", "yes" for a node whose append-only
// file was turned on at runtime (CONFIG SET appendonly yes), as an
// operator's config file would keep it. Later arguments win over the
// defaults StartRedis gave.
func (r *Redis) RestartWith(args ...string) {
	r.t.Helper()
	r.mu.Lock()
	r.args = append(slices.Clone(r.args), args...)
	r.mu.Unlock()
	r.Restart()
}
