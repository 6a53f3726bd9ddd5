// Package testenv starts the real servers that capper's tests run against:
// redis-server processes (a single node or a 3-master Redis Cluster), an S3
// endpoint (gofakes3 over HTTP) and a Kafka-protocol broker (kfake over TCP).
//
// Every server listens on a free 127.0.0.1 port and is stopped by the test
// that started it (t.Cleanup, by process, never by name).
//
// A missing redis-server skips the test on a developer machine, but fails it
// when CI=true or CAPPER_REQUIRE_SERVERS=1 (make test sets the latter), so CI
// never silently accepts a skipped invariant test.
package testenv
